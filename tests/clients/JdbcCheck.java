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
                s.execute("CREATE INDEX j_name ON j (name) INCLUDE (price)");
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
            // What connection pools and BI tools do: validate with an empty query, cap rows
            // (Execute with a row limit), fetch in pieces (portal suspension).
            check(c.isValid(5), "isValid");
            try (Statement s = c.createStatement()) {
                s.setMaxRows(2);
                int n = 0;
                try (ResultSet r = s.executeQuery("SELECT * FROM j ORDER BY id")) {
                    while (r.next()) n++;
                }
                check(n == 2, "setMaxRows(2) gave " + n);
            }
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.setFetchSize(1);
                int n = 0;
                try (ResultSet r = s.executeQuery("SELECT * FROM j ORDER BY id")) {
                    while (r.next()) n++;
                }
                check(n == 3, "setFetchSize(1) gave " + n);
            }
            c.commit();
            // With autocommit off, rollback() undoes what the block wrote and commit() keeps it.
            try (Statement s = c.createStatement()) {
                s.executeUpdate("INSERT INTO j VALUES (100, 'rolled back', 1)");
                c.rollback();
                s.executeUpdate("INSERT INTO j VALUES (101, 'committed', 1)");
                c.commit();
                try (ResultSet r = s.executeQuery("SELECT count(*) FROM j WHERE id >= 100")) {
                    check(r.next() && r.getLong(1) == 1, "rollback then commit");
                }
                s.executeUpdate("DELETE FROM j WHERE id >= 100");
                c.commit();
            }
            c.setAutoCommit(true);
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
            check(columns.equals(List.of("id:int4", "name:varchar", "price:float8")), "getColumns " + columns);
            // Result columns name their table and column (RowDescription's table OID and
            // column number), and VARCHAR columns are varchar.
            try (PreparedStatement p = c.prepareStatement("SELECT name, price * 2 AS doubled FROM j WHERE id = ?")) {
                p.setInt(1, 1);
                try (ResultSet r = p.executeQuery()) {
                    ResultSetMetaData meta = r.getMetaData();
                    org.postgresql.PGResultSetMetaData pg = meta.unwrap(org.postgresql.PGResultSetMetaData.class);
                    check(pg.getBaseTableName(1).equals("j"), "getBaseTableName " + pg.getBaseTableName(1));
                    check(pg.getBaseColumnName(1).equals("name"), "getBaseColumnName " + pg.getBaseColumnName(1));
                    check(pg.getBaseSchemaName(1).equals("public"), "getBaseSchemaName " + pg.getBaseSchemaName(1));
                    check(pg.getBaseTableName(2).equals(""), "computed column has no table: " + pg.getBaseTableName(2));
                    check(meta.getColumnTypeName(1).equals("varchar"), "getColumnTypeName " + meta.getColumnTypeName(1));
                    check(meta.isNullable(1) == ResultSetMetaData.columnNullable, "isNullable " + meta.isNullable(1));
                    check(r.next() && r.getString(1).equals("n1"), "row");
                }
            }
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
            List<String> all = new ArrayList<>();
            try (ResultSet r = md.getIndexInfo(null, "public", "j", false, false)) {
                while (r.next()) {
                    all.add(r.getString("INDEX_NAME") + ":" + r.getString("COLUMN_NAME") + ":" + r.getBoolean("NON_UNIQUE"));
                }
            }
            check(all.contains("j_pkey:id:false") && all.contains("j_name:name:true"), "getIndexInfo (all) " + all);
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
