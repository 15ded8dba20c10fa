-- pgbench script (scripts/bench-serving.sh): a point lookup by primary key.
\set k random(1, :rows)
SELECT v FROM items WHERE k = :k;
