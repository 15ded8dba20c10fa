"""The statements BI tools send when they connect, list schemas, tables and columns, find keys and
draw a chart, replayed against Weir: Grafana's PostgreSQL data source, Metabase's sync, DBeaver's
navigator, Tableau and Superset (SQLAlchemy). The text is the tools' own (their sources, or
captures of what they sent a real Postgres), with the demo table `orders`.

Queries without parameters go over the simple protocol (as Grafana and psycopg2 send them), those
with parameters over the extended protocol with typed binds (as pgjdbc sends Metabase's, DBeaver's
and Tableau's). Every statement runs, whatever fails before it; each failure is reported.

Usage: bi_tools_check.py HOST PORT. Exits non-zero listing the statements that failed.
"""
import sys

import psycopg

host, port = sys.argv[1], sys.argv[2]
conn = psycopg.connect(f"host={host} port={port} user=root dbname=dev", autocommit=True)
conn.execute(
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer VARCHAR(40), amount DOUBLE PRECISION, ts TIMESTAMP)"
)
conn.execute(
    "INSERT INTO orders VALUES (1, 'ann', 10.5, '2024-06-01 01:00:00'), (2, 'bob', 20, '2024-06-01 02:30:00'), "
    "(3, 'ann', 5, '2024-07-02 00:00:00')"
)
conn.execute("CREATE MATERIALIZED VIEW per_customer AS SELECT customer, sum(amount) AS total FROM orders GROUP BY customer")
conn.execute("CREATE VIEW big_orders AS SELECT id, amount FROM orders WHERE amount > 8")
conn.execute("FLUSH")
oid = conn.execute("SELECT CAST(oid AS BIGINT) FROM pg_catalog.pg_class WHERE relname = 'orders'").fetchone()[0]
public = conn.execute("SELECT CAST(oid AS BIGINT) FROM pg_catalog.pg_namespace WHERE nspname = 'public'").fetchone()[0]

SEARCH_PATH_SCHEMAS = """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""

# (tool, what, sql, parameters or None, check of the rows or None)
CASES = [
    # Grafana (grafana/grafana: public/app/plugins/datasource/grafana-postgresql-datasource,
    # pkg/tsdb/grafana-postgresql-datasource).
    ("grafana", "health check", "-- ping", None, None),
    ("grafana", "version", "SELECT current_setting('server_version_num')::int/100 as version", None,
     lambda rows: rows[0][0] >= 906),
    ("grafana", "timescaledb", "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'", None,
     lambda rows: rows == []),
    ("grafana", "schemas", """SELECT schema_name AS "name"
    FROM information_schema.schemata
    WHERE schema_name NOT IN ('information_schema',
                              'pg_catalog',
                              'pg_toast',
                              '_timescaledb_cache',
                              '_timescaledb_catalog',
                              '_timescaledb_internal',
                              '_timescaledb_config',
                              'timescaledb_information',
                              'timescaledb_experimental')
    ORDER BY schema_name""", None, lambda rows: ("public",) in rows),
    ("grafana", "tables of a schema", """SELECT quote_ident(table_name) AS "table"
      FROM information_schema.tables
      WHERE quote_ident(table_schema) = 'public'
      ORDER BY 1""", None, lambda rows: rows == [("big_orders",), ("orders",), ("per_customer",)]),
    ("grafana", "tables on the search path", f"""SELECT
    CASE WHEN {SEARCH_PATH_SCHEMAS}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN {SEARCH_PATH_SCHEMAS} THEN 0 ELSE 1 END, 1""", None,
     lambda rows: rows[:3] == [("big_orders",), ("orders",), ("per_customer",)]),
    ("grafana", "columns", f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('orders'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('orders'))[1]
          AND quote_ident(table_name) = (parse_ident('orders'))[2]
        ELSE quote_ident(table_name) = 'orders'
          AND {SEARCH_PATH_SCHEMAS}
      END""", None,
     lambda rows: rows == [("id", "bigint"), ("customer", "character varying"), ("amount", "double precision"),
                           ("ts", "timestamp without time zone")]),
    ("grafana", "time series", "SELECT floor(extract(epoch from ts)/3600)*3600 AS \"time\", sum(amount) AS \"amount\" "
     "FROM orders WHERE ts BETWEEN '2024-06-01T00:00:00Z' AND '2024-06-02T00:00:00Z' GROUP BY 1 ORDER BY 1", None,
     lambda rows: [float(r[1]) for r in rows] == [10.5, 20.0]),
    ("grafana", "query builder", "SELECT ts, amount FROM orders LIMIT 50 ", None, lambda rows: len(rows) == 3),
    ("grafana", "schema api: schemas", """SELECT schema_name FROM information_schema.schemata
		 WHERE schema_name NOT LIKE 'pg_%%' AND schema_name != 'information_schema'
		 ORDER BY schema_name""", [], lambda rows: ("public",) in rows),
    ("grafana", "schema api: tables", """SELECT table_name FROM information_schema.tables
		 WHERE table_schema = %s AND table_type IN ('BASE TABLE', 'VIEW')
		 ORDER BY table_name""", ["public"], lambda rows: ("orders",) in rows and ("big_orders",) in rows),
    ("grafana", "schema api: columns", """SELECT column_name, data_type, udt_name, numeric_precision, numeric_scale
		 FROM information_schema.columns
		 WHERE table_schema = %s AND table_name = %s
		 ORDER BY ordinal_position""", ["public", "orders"],
     lambda rows: [(r[0], r[2]) for r in rows] == [("id", "int8"), ("customer", "varchar"), ("amount", "float8"),
                                                   ("ts", "timestamp")]),

    # Metabase (metabase/metabase: src/metabase/driver/postgres.clj and sql_jdbc/sync).
    ("metabase", "connection test", "SELECT 1", None, lambda rows: rows == [(1,)]),
    ("metabase", "isolation", "SHOW TRANSACTION ISOLATION LEVEL", None, None),
    ("metabase", "set isolation", "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED", None,
     None),
    ("metabase", "time zone", "SET SESSION TIMEZONE TO 'UTC'", None, None),
    ("metabase", "show time zone", "show timezone", None, lambda rows: rows[0][0] in ("UTC", "Etc/UTC", "+00:00")),
    ("metabase", "current catalog", "select current_catalog", None, lambda rows: rows == [("dev",)]),
    ("metabase", "schemas (getSchemas)", """SELECT nspname AS "TABLE_SCHEM", current_database() AS "TABLE_CATALOG" FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY "TABLE_SCHEM\"""",
     None, lambda rows: ("public", "dev") in rows),
    ("metabase", "table privileges", """with table_privileges as (
 select
   NULL as role,
   t.schemaname as schema,
   t.objectname as table,
   pg_catalog.has_any_column_privilege(current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'update') as update,
   pg_catalog.has_any_column_privilege(current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'select') as select,
   pg_catalog.has_any_column_privilege(current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'insert') as insert,
   pg_catalog.has_table_privilege(     current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'delete') as delete
 from (
   select schemaname, tablename as objectname from pg_catalog.pg_tables
   union
   select schemaname, viewname as objectname from pg_catalog.pg_views
   union
   select schemaname, matviewname as objectname from pg_catalog.pg_matviews
 ) t
 where t.schemaname !~ '^pg_'
   and t.schemaname <> 'information_schema'
   and pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage')
)
select t.*
from table_privileges t""", None,
     lambda rows: {(r[1], r[2]) for r in rows if r[4]} >= {("public", "orders"), ("public", "per_customer"),
                                                           ("public", "big_orders")}),
    ("metabase", "tables", """SELECT "n"."nspname" AS "schema", "c"."relname" AS "name", CASE "c"."relkind" WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS "type", "d"."description" AS "description", NULLIF("stat"."n_live_tup", %s) AS "estimated_row_count" FROM "pg_catalog"."pg_class" AS "c" INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "c"."relnamespace" = "n"."oid" LEFT JOIN "pg_catalog"."pg_description" AS "d" ON ("c"."oid" = "d"."objoid") AND ("d"."objsubid" = %s) AND ("d"."classoid" = 'pg_class'::regclass) LEFT JOIN "pg_stat_user_tables" AS "stat" ON ("n"."nspname" = "stat"."schemaname") AND ("c"."relname" = "stat"."relname") WHERE ("c"."relnamespace" = "n"."oid") AND ("n"."nspname" !~ %s) AND ("n"."nspname" <> %s) AND c.relkind in ('r', 'p', 'v', 'f', 'm') AND ("n"."nspname" IN (%s)) ORDER BY "type" ASC, "schema" ASC, "name" ASC""",
     [0, 0, "^pg_", "information_schema", "public"],
     lambda rows: [(r[1], r[2]) for r in rows] == [("per_customer", "MATERIALIZED VIEW"), ("orders", "TABLE"),
                                                   ("big_orders", "VIEW")]),
    ("metabase", "enum types", "SELECT nspname, typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid IN (SELECT DISTINCT enumtypid FROM pg_enum e)",
     None, lambda rows: rows == []),
    ("metabase", "fields", """SELECT "c"."column_name" AS "name", CASE WHEN "c"."udt_schema" IN ('public', 'pg_catalog') THEN FORMAT('%%s', "c"."udt_name") ELSE FORMAT('"%%s"."%%s"', "c"."udt_schema", "c"."udt_name") END AS "database-type", "c"."ordinal_position" - 1 AS "database-position", "c"."table_schema" AS "table-schema", "c"."table_name" AS "table-name", "pk"."column_name" IS NOT NULL AS "pk?", COL_DESCRIPTION(CAST(CAST(FORMAT('%%I.%%I', CAST("c"."table_schema" AS TEXT), CAST("c"."table_name" AS TEXT)) AS REGCLASS) AS OID), "c"."ordinal_position") AS "field-comment", (("column_default" IS NULL) OR (LOWER("column_default") = 'null')) AND ("is_nullable" = 'NO') AND NOT ((("column_default" IS NOT NULL) AND ("column_default" LIKE '%%nextval(%%')) OR ("is_identity" <> 'NO')) AS "database-required", "column_default" AS "database-default", (("column_default" IS NOT NULL) AND ("column_default" LIKE '%%nextval(%%')) OR ("is_identity" <> 'NO') AS "database-is-auto-increment", "is_generated" = %s AS "database-is-generated", "is_nullable" = 'YES' AS "database-is-nullable" FROM "information_schema"."columns" AS "c" LEFT JOIN (SELECT "tc"."table_schema", "tc"."table_name", "kc"."column_name" FROM "information_schema"."table_constraints" AS "tc" INNER JOIN "information_schema"."key_column_usage" AS "kc" ON ("tc"."constraint_name" = "kc"."constraint_name") AND ("tc"."table_schema" = "kc"."table_schema") AND ("tc"."table_name" = "kc"."table_name") WHERE "tc"."constraint_type" = 'PRIMARY KEY') AS "pk" ON ("c"."table_schema" = "pk"."table_schema") AND ("c"."table_name" = "pk"."table_name") AND ("c"."column_name" = "pk"."column_name") WHERE c.table_schema !~ '^information_schema|catalog_history|pg_' AND ("c"."table_schema" IN (%s)) UNION ALL SELECT "pa"."attname" AS "name", CASE WHEN "ptn"."nspname" IN ('public', 'pg_catalog') THEN FORMAT('%%s', "pt"."typname") ELSE FORMAT('"%%s"."%%s"', "ptn"."nspname", "pt"."typname") END AS "database-type", "pa"."attnum" - 1 AS "database-position", "pn"."nspname" AS "table-schema", "pc"."relname" AS "table-name", FALSE AS "pk?", NULL AS "field-comment", FALSE AS "database-required", NULL AS "database-default", FALSE AS "database-is-auto-increment", FALSE AS "database-is-generated", FALSE AS "database-is-nullable" FROM "pg_catalog"."pg_class" AS "pc" INNER JOIN "pg_catalog"."pg_namespace" AS "pn" ON "pn"."oid" = "pc"."relnamespace" INNER JOIN "pg_catalog"."pg_attribute" AS "pa" ON "pa"."attrelid" = "pc"."oid" INNER JOIN "pg_catalog"."pg_type" AS "pt" ON "pt"."oid" = "pa"."atttypid" INNER JOIN "pg_catalog"."pg_namespace" AS "ptn" ON "ptn"."oid" = "pt"."typnamespace" WHERE ("pc"."relkind" = 'm') AND ("pa"."attnum" >= 1) AND ("pn"."nspname" IN (%s)) ORDER BY "table-schema" ASC, "table-name" ASC, "database-position" ASC""",
     ["ALWAYS", "public", "public"],
     lambda rows: [(r[0], r[1], r[5]) for r in rows if r[4] == "orders"] == [
         ("id", "int8", True), ("customer", "varchar", False), ("amount", "float8", False), ("ts", "timestamp", False)]
     and [(r[0], r[1], r[2]) for r in rows if r[4] == "per_customer"] == [("customer", "varchar", 0), ("total", "float8", 1)]),
    ("metabase", "foreign keys", """SELECT "fk_ns"."nspname" AS "fk-table-schema", "fk_table"."relname" AS "fk-table-name", "fk_column"."attname" AS "fk-column-name", "pk_ns"."nspname" AS "pk-table-schema", "pk_table"."relname" AS "pk-table-name", "pk_column"."attname" AS "pk-column-name" FROM "pg_constraint" AS "c" INNER JOIN "pg_class" AS "fk_table" ON "c"."conrelid" = "fk_table"."oid" INNER JOIN "pg_namespace" AS "fk_ns" ON "c"."connamespace" = "fk_ns"."oid" INNER JOIN "pg_attribute" AS "fk_column" ON "c"."conrelid" = "fk_column"."attrelid" INNER JOIN "pg_class" AS "pk_table" ON "c"."confrelid" = "pk_table"."oid" INNER JOIN "pg_namespace" AS "pk_ns" ON "pk_table"."relnamespace" = "pk_ns"."oid" INNER JOIN "pg_attribute" AS "pk_column" ON "c"."confrelid" = "pk_column"."attrelid" WHERE fk_ns.nspname !~ '^information_schema|catalog_history|pg_' AND ("c"."contype" = 'f'::char) AND ("fk_column"."attnum" = ANY(c.conkey)) AND ("pk_column"."attnum" = ANY(c.confkey)) AND ("fk_ns"."nspname" IN (%s)) ORDER BY "fk-table-schema" ASC, "fk-table-name" ASC""",
     ["public"], lambda rows: rows == []),
    ("metabase", "select probe", 'SELECT TRUE AS "_" FROM "public"."orders" WHERE 1 <> 1 LIMIT 0', None,
     lambda rows: rows == []),
    ("metabase", "fingerprint", 'SELECT SUBSTRING("public"."orders"."customer", 1, 1234) AS "substring4476", "public"."orders"."amount" AS "amount", "public"."orders"."ts" AS "ts" FROM "public"."orders" LIMIT 10000',
     None, lambda rows: len(rows) == 3),
    ("metabase", "chart", """-- Metabase:: userID: 1 queryType: MBQL queryHash: a54de39466cbf3e82ff09c5a9a2bccf1f922bf9fd59b2717c1ad5e09a1c0bfbc
SELECT DATE_TRUNC('month', "public"."orders"."ts") AS "ts", SUM("public"."orders"."amount") AS "sum" FROM "public"."orders" GROUP BY DATE_TRUNC('month', "public"."orders"."ts") ORDER BY DATE_TRUNC('month', "public"."orders"."ts") ASC""",
     None, lambda rows: [float(r[1]) for r in rows] == [30.5, 5.0]),
    ("metabase", "count", 'SELECT COUNT(*) AS "count" FROM "public"."orders"', None, lambda rows: rows == [(3,)]),
    ("pgjdbc", "nullability of result columns", f"""SELECT c.oid, a.attnum, a.attname, c.relname, n.nspname, a.attnotnull OR (t.typtype = 'd' AND t.typnotnull), a.attidentity != '' OR pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE '%nextval(%' FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON (c.relnamespace = n.oid) JOIN pg_catalog.pg_attribute a ON (c.oid = a.attrelid) JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid) LEFT JOIN pg_catalog.pg_attrdef d ON (d.adrelid = a.attrelid AND d.adnum = a.attnum) JOIN (SELECT {oid} AS oid , 2 AS attnum UNION ALL SELECT {oid}, 3 UNION ALL SELECT {oid}, 4) vals ON (c.oid = vals.oid AND a.attnum = vals.attnum) where c.oid in ({oid})""",
     None, lambda rows: sorted((r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows) == [
         (2, "customer", "orders", "public", False, False), (3, "amount", "orders", "public", False, False),
         (4, "ts", "orders", "public", False, False)]),
    ("pgjdbc", "columns (getColumns)", """SELECT * FROM (SELECT current_database() AS current_database, n.nspname,c.relname,a.attname,a.atttypid,a.attnotnull  OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,a.atttypmod,a.attlen,t.typtypmod,row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum, nullif(a.attidentity, '') as attidentity,nullif(a.attgenerated, '') as attgenerated,pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc,dsc.description,t.typbasetype,t.typtype  FROM pg_catalog.pg_namespace n  JOIN pg_catalog.pg_class c ON (c.relnamespace = n.oid)  JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid)  JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid)  LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid AND a.attnum = def.adnum)  LEFT JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)  LEFT JOIN pg_catalog.pg_class dc ON (dc.oid=dsc.classoid AND dc.relname='pg_class')  LEFT JOIN pg_catalog.pg_namespace dn ON (dc.relnamespace=dn.oid AND dn.nspname='pg_catalog')  WHERE c.relkind in ('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped  AND n.nspname LIKE %s AND c.relname LIKE %s) c WHERE true  ORDER BY nspname,c.relname,attnum""",
     ["public", "orders"], lambda rows: [(r[3], r[4], r[6]) for r in rows] == [
         ("id", 20, -1), ("customer", 1043, 44), ("amount", 701, -1), ("ts", 1114, -1)]),
    ("pgjdbc", "primary key (getPrimaryKeys)", """SELECT        result.TABLE_CAT AS "TABLE_CAT",        result.TABLE_SCHEM AS "TABLE_SCHEM",        result.TABLE_NAME AS "TABLE_NAME",        result.COLUMN_NAME AS "COLUMN_NAME",        result.KEY_SEQ AS "KEY_SEQ",        result.PK_NAME AS "PK_NAME"FROM      (SELECT current_database() AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME,   information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM, i.indnkeyatts as KEY_COUNT FROM pg_catalog.pg_class ct   JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid)   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_index i ON ( a.attrelid = i.indrelid)   JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid) WHERE true  AND n.nspname = %s AND ct.relname = %s AND i.indisprimary  ) result where  result.A_ATTNUM = (result.KEYS).x AND result.KEY_SEQ <= KEY_COUNT  ORDER BY result.table_name, result.pk_name, result.key_seq""",
     ["public", "orders"], lambda rows: [tuple(r) for r in rows] == [("dev", "public", "orders", "id", 1, "orders_pkey")]),

    # DBeaver (dbeaver/dbeaver: plugins/org.jkiss.dbeaver.ext.postgresql).
    ("dbeaver", "version", "SELECT version()", None, lambda rows: "PostgreSQL" in rows[0][0]),
    ("dbeaver", "setting", "select * from pg_catalog.pg_settings where name=%s", ["standard_conforming_strings"],
     lambda rows: len(rows) == 1),
    ("dbeaver", "database", "SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE datname=%s", ["dev"],
     lambda rows: len(rows) == 1),
    ("dbeaver", "defaults", "SELECT current_schema(),session_user", None, lambda rows: rows[0][0] == "public"),
    ("dbeaver", "search path", "SHOW search_path", None, None),
    ("dbeaver", "types", """SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name, d.description
FROM pg_catalog.pg_type t
LEFT OUTER JOIN pg_catalog.pg_type et ON et.oid=t.typelem 
LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid
LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid
WHERE t.typname IS NOT NULL
AND (c.relkind IS NULL OR c.relkind = 'c') AND (et.typcategory IS NULL OR et.typcategory <> 'C')""", None,
     lambda rows: len(rows) > 50),
    ("dbeaver", "enum probe", "SELECT * FROM pg_catalog.pg_enum WHERE 1<>1 LIMIT 1", None, lambda rows: rows == []),
    ("dbeaver", "reltype probe", "SELECT reltype FROM pg_catalog.pg_class WHERE 1<>1 LIMIT 1", None,
     lambda rows: rows == []),
    ("dbeaver", "schemas", """SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass
 ORDER BY nspname""", None, lambda rows: any(r[2] == "public" for r in rows)),
    ("dbeaver", "tables", """SELECT c.oid,c.*,d.description,pg_catalog.pg_get_expr(c.relpartbound, c.oid) as partition_expr,  pg_catalog.pg_get_partkeydef(c.oid) as partition_key 
FROM pg_catalog.pg_class c
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass
WHERE c.relnamespace=%s AND c.relkind not in ('i','I','c')""", [public],
     lambda rows: {r[2] for r in rows} >= {"orders", "per_customer", "big_orders"}),
    ("dbeaver", "columns", """SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description,dep.objid
FROM pg_catalog.pg_attribute a
INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)
LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)
LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)
LEFT OUTER JOIN pg_depend dep on dep.refobjid = a.attrelid AND dep.deptype = 'i' and dep.refobjsubid = a.attnum and dep.classid = dep.refclassid
WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.oid=%s
ORDER BY a.attnum""", [oid], lambda rows: [r[2] for r in rows] == ["id", "customer", "amount", "ts"]),
    ("dbeaver", "constraints", """SELECT c.oid,c.*,t.relname as tabrelname,rt.relnamespace as refnamespace,d.description, case when c.contype='c' then "substring"(pg_get_constraintdef(c.oid), 7) else null end consrc_copy
FROM pg_catalog.pg_constraint c
INNER JOIN pg_catalog.pg_class t ON t.oid=c.conrelid
LEFT OUTER JOIN pg_catalog.pg_class rt ON rt.oid=c.confrelid
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_constraint'::regclass
WHERE c.conrelid=%s
ORDER BY c.oid""", [oid], lambda rows: len(rows) == 1 and "orders_pkey" in rows[0]),
    ("dbeaver", "roles", """SELECT a.oid,a.*,pd.description FROM pg_catalog.pg_roles a 
left join pg_catalog.pg_shdescription pd on a.oid = pd.objoid
ORDER BY a.rolname""", None, None),
    ("dbeaver", "data tab", "SELECT * FROM public.orders\nLIMIT 200", None, lambda rows: len(rows) == 3),

    # Tableau (through pgjdbc; its temp-table probes may fail, the connection must not).
    ("tableau", "chart", """SELECT DATE_TRUNC( 'MONTH', CAST("orders"."ts" AS TIMESTAMP) ) AS "tmn:ts:ok",
  SUM("orders"."amount") AS "sum:amount:ok"
FROM "public"."orders" "orders"
GROUP BY 1""", None, lambda rows: sorted(float(r[1]) for r in rows) == [5.0, 30.5]),
    ("tableau", "date literal filter", """SELECT SUM("orders"."amount") AS "sum:amount:ok" FROM "public"."orders" "orders" WHERE ("orders"."ts" >= (TIMESTAMP '2024-06-01 00:00:00.000')) AND ("orders"."ts" < (DATE '2024-07-01'))""",
     None, lambda rows: float(rows[0][0]) == 30.5),

    # Superset (SQLAlchemy's first connect, its catalog and schema lists, a chart).
    ("superset", "version", "select pg_catalog.version()", None, lambda rows: "PostgreSQL 1" in rows[0][0]),
    ("superset", "current schema", "select current_schema()", None, lambda rows: rows == [("public",)]),
    ("superset", "isolation", "show transaction isolation level", None, lambda rows: rows == [("read committed",)]),
    ("superset", "strings", "show standard_conforming_strings", None, lambda rows: rows == [("on",)]),
    ("superset", "catalogs", "SELECT datname FROM pg_database\nWHERE datistemplate = false;", None,
     lambda rows: ("dev",) in rows),
    ("superset", "schemas", "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg_%' ORDER BY nspname", None,
     lambda rows: ("public",) in rows),
    ("superset", "search path", 'set search_path = "public"', None, None),
    ("superset", "backend pid", "SELECT pg_backend_pid()", None, lambda rows: isinstance(rows[0][0], int)),
    ("superset", "chart", """SELECT DATE_TRUNC('month', ts) AS ts, sum(amount) AS "SUM(amount)" 
FROM public.orders GROUP BY DATE_TRUNC('month', ts) ORDER BY "SUM(amount)" DESC 
 LIMIT 10000""", None, lambda rows: [float(r[1]) for r in rows] == [30.5, 5.0]),
    ("superset", "time filter", "SELECT count(*) FROM public.orders WHERE ts >= TO_TIMESTAMP('2024-06-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US')",
     None, lambda rows: rows == [(3,)]),
]

failures = []
for tool, what, sql, params, check in CASES:
    try:
        with conn.cursor() as cur:
            if params is None:
                cur.execute(sql.encode())  # bytes: sent as is, over the simple protocol
            else:
                cur.execute(sql, params, prepare=True)
            rows = cur.fetchall() if cur.description else []
        if check is not None and not check(rows):
            failures.append(f"{tool}: {what}: unexpected rows {rows[:8]}")
    except Exception as e:  # noqa: BLE001 (every failure is reported)
        failures.append(f"{tool}: {what}: {type(e).__name__}: {str(e).strip()}")

# Tableau's temp-table probes: refused or not, the connection carries on.
for probe in [
    'SELECT *\nINTO TEMPORARY TABLE "#Tableau_1_1_Connect_CheckSelectIntoCap"\nFROM (SELECT 1 AS COL) AS CHECKTEMP',
    'CREATE LOCAL TEMPORARY TABLE "#Tableau_1_2_Connect_CheckCreateTempTableCap" (\n\tCOL INTEGER\n\t) ON COMMIT PRESERVE ROWS',
]:
    try:
        conn.execute(probe.encode())
    except psycopg.Error:
        pass
    if conn.execute("SELECT 1").fetchone() != (1,):
        failures.append(f"tableau: the connection broke after {probe!r}")

for f in failures:
    print("FAILED", f)
print(f"{len(CASES) - len(failures)} of {len(CASES)} BI statements ok")
sys.exit(1 if failures else 0)
