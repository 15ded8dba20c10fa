-- pgbench script (scripts/bench-serving.sh): an update by primary key.
\set k random(1, :rows)
UPDATE items SET v = v + 1 WHERE k = :k;
