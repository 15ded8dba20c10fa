// Drives Weir with pgjdbc the way a Java application or BI tool would: prepared statements,
// and the DatabaseMetaData calls tools make on connect. Exits non-zero on the first mismatch.
// Usage: java -cp postgresql.jar:. JdbcCheck jdbc:postgresql://127.0.0.1:PORT/dev
import java.sql.*;
import java.util.*;

public class JdbcCheck {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0], "root", "")) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE j (id INT PRIMARY KEY, name VARCHAR, price DOUBLE PRECISION)");
                s.execute("CREATE VIEW j_named AS SELECT id, name FROM j");
            }
            try (PreparedStatement p = c.prepareStatement("INSERT INTO j VALUES (?, ?, ?)")) {
                for (int i = 0; i < 3; i++) {
                    p.setInt(1, i);
                    p.setString(2, "n" + i);
                    p.setDouble(3, i * 2.0);
                    check(p.executeUpdate() == 1, "insert count");
                }
            }
            try (PreparedStatement p = c.prepareStatement("SELECT name, price FROM j WHERE id > ? ORDER BY id")) {
                p.setInt(1, 0);
                try (ResultSet r = p.executeQuery()) {
                    check(r.next() && r.getString(1).equals("n1") && r.getDouble(2) == 2.0, "row 1");
                    check(r.next() && r.getString(1).equals("n2"), "row 2");
                    check(!r.next(), "two rows");
                }
            }
            DatabaseMetaData md = c.getMetaData();
            check(md.getDatabaseProductName().equals("PostgreSQL"), "product " + md.getDatabaseProductName());
            List<String> tables = new ArrayList<>();
            try (ResultSet r = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (r.next()) tables.add(r.getString("TABLE_NAME"));
            }
            check(tables.contains("j") && !tables.contains("j_named"), "getTables " + tables);
            List<String> views = new ArrayList<>();
            try (ResultSet r = md.getTables(null, "public", "%", new String[] {"VIEW"})) {
                while (r.next()) views.add(r.getString("TABLE_NAME"));
            }
            check(views.contains("j_named") && !views.contains("j"), "getTables VIEW " + views);
            List<String> columns = new ArrayList<>();
            try (ResultSet r = md.getColumns(null, "public", "j", "%")) {
                while (r.next()) columns.add(r.getString("COLUMN_NAME") + ":" + r.getString("TYPE_NAME"));
            }
            check(columns.size() == 3 && columns.get(0).startsWith("id:"), "getColumns " + columns);
            List<String> pk = new ArrayList<>();
            try (ResultSet r = md.getPrimaryKeys(null, "public", "j")) {
                while (r.next()) pk.add(r.getString("COLUMN_NAME"));
            }
            check(pk.equals(List.of("id")), "getPrimaryKeys " + pk);
            List<String> indexes = new ArrayList<>();
            try (ResultSet r = md.getIndexInfo(null, "public", "j", true, false)) {
                while (r.next()) indexes.add(r.getString("INDEX_NAME") + ":" + r.getString("COLUMN_NAME"));
            }
            check(indexes.equals(List.of("j_pkey:id")), "getIndexInfo " + indexes);
            try (ResultSet r = md.getImportedKeys(null, "public", "j")) {
                check(!r.next(), "getImportedKeys: no foreign keys");
            }
            int types = 0;
            try (ResultSet r = md.getTypeInfo()) {
                while (r.next()) types++;
            }
            check(types > 10, "getTypeInfo " + types);
        }
        System.out.println("jdbc ok");
    }
}
