-- pgbench script (scripts/bench-serving.sh): a short range of primary keys.
\set k random(1, :rows - 100)
SELECT count(*), sum(v) FROM items WHERE k >= :k AND k < :k + 100;
