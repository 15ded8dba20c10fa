-- pgbench script (scripts/bench-serving.sh): a lookup of one group of the view by its key.
\set g random(0, :groups - 1)
SELECT n, s FROM per_group WHERE g = :g;
