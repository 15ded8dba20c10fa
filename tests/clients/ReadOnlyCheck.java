// A read-only role through pgjdbc, as a BI tool logs in: SCRAM-SHA-256, its view readable
// (plain and prepared), everything else refused with 42501, the tool's metadata calls working.
// Usage: java -cp postgresql.jar:. ReadOnlyCheck jdbc:postgresql://127.0.0.1:PORT/dev USER PASSWORD
import java.sql.*;

public class ReadOnlyCheck {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static void denied(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute(sql);
            throw new AssertionError("not refused: " + sql);
        } catch (SQLException e) {
            check("42501".equals(e.getSQLState()), sql + ": " + e.getSQLState() + " " + e.getMessage());
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0], args[1], args[2])) {
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT count(*) FROM totals")) {
                check(r.next() && r.getLong(1) == 2, "rows of the view");
            }
            try (PreparedStatement p = c.prepareStatement("SELECT total FROM totals WHERE customer = ?")) {
                p.setString(1, "ann");
                try (ResultSet r = p.executeQuery()) {
                    check(r.next() && r.getLong(1) == 15, "prepared read of the view");
                }
            }
            denied(c, "SELECT * FROM orders");
            denied(c, "INSERT INTO orders VALUES (9, 'x', 1)");
            denied(c, "DROP MATERIALIZED VIEW totals");
            try (PreparedStatement p = c.prepareStatement("SELECT * FROM orders WHERE id = ?")) {
                p.setInt(1, 1);
                p.executeQuery();
                throw new AssertionError("prepared read of the table not refused");
            } catch (SQLException e) {
                check("42501".equals(e.getSQLState()), "prepared: " + e.getSQLState());
            }
            DatabaseMetaData md = c.getMetaData();
            check(md.getUserName().equals(args[1]), "user name");
            boolean found = false;
            try (ResultSet r = md.getTables(null, "public", "totals", null)) {
                found = r.next();
            }
            check(found, "getTables lists the view");
        }
        System.out.println("jdbc read-only ok");
    }
}
