-- pgbench script (scripts/bench-serving.sh): the rows of one group through the secondary
-- index items_g (10 rows per group).
\set g random(0, :groups - 1)
SELECT k, v FROM items WHERE g = :g;
