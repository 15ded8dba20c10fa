// node-postgres (the `pg` package) against Weir, as a Node.js application uses it: simple and
// parameterized queries, the types it parses from RowDescription (an int4 becomes a number, an
// int8 a string, a timestamp a Date), result fields naming their table, a duration sent as
// Postgres prints intervals, errors with their SQLSTATE, a pool.
// Usage: node node_pg_check.js HOST PORT (with NODE_PATH naming the pg install). Exits non-zero
// on the first mismatch.
const { Client, Pool } = require('pg');
const assert = require('assert');

async function main() {
  const [host, port] = process.argv.slice(2);
  const config = { host, port: Number(port), user: 'root', database: 'dev' };
  const client = new Client(config);
  await client.connect();
  await client.query(
    'CREATE TABLE readings (id BIGINT PRIMARY KEY, device VARCHAR(16) NOT NULL, value INT, at TIMESTAMP, span INTERVAL)');
  for (let i = 1; i <= 3; i++) {
    await client.query('INSERT INTO readings VALUES ($1, $2, $3, $4, $5)',
      [i, `d${i % 2}`, i * 10, new Date(Date.UTC(2026, 0, i)), '1 day 02:03:04']);
  }

  // Literals are int4: node-postgres hands out a number, not a string.
  const one = await client.query('SELECT 1 AS one, 2147483648 AS big');
  assert.strictEqual(one.rows[0].one, 1);
  assert.strictEqual(one.rows[0].big, '2147483648');

  const rows = await client.query('SELECT id, device, value, at, span FROM readings WHERE id >= $1 ORDER BY id', [2]);
  assert.deepStrictEqual(rows.rows.map((r) => [r.id, r.device, r.value]), [['2', 'd0', 20], ['3', 'd1', 30]]);
  assert.ok(rows.rows[0].at instanceof Date, `at is ${typeof rows.rows[0].at}`);
  assert.strictEqual(rows.rows[0].span.days, 1);
  assert.strictEqual(rows.rows[0].span.hours, 2);
  // RowDescription: types and the table each column comes from.
  const fields = Object.fromEntries(rows.fields.map((f) => [f.name, f]));
  assert.strictEqual(fields.device.dataTypeID, 1043, 'device is varchar');
  assert.strictEqual(fields.value.dataTypeID, 23, 'value is int4');
  const oid = await client.query("SELECT CAST(oid AS BIGINT) AS oid FROM pg_catalog.pg_class WHERE relname = 'readings'");
  assert.strictEqual(fields.device.tableID, Number(oid.rows[0].oid));
  assert.strictEqual(fields.device.columnID, 2);

  // Aggregates over a materialized view, by name.
  await client.query('CREATE MATERIALIZED VIEW per_device AS SELECT device, count(*), sum(value) FROM readings GROUP BY device');
  await client.query('FLUSH');
  const per = await client.query('SELECT device, count, sum FROM per_device ORDER BY device');
  assert.deepStrictEqual(per.rows.map((r) => [r.device, r.count, r.sum]), [['d0', '1', '20'], ['d1', '2', '40']]);

  // Errors carry the SQLSTATE; the connection carries on.
  // NUMERIC as Postgres writes it: a declared scale, else the value's own (no trailing zeros);
  // a VALUES column of small integers is int4.
  await client.query('CREATE TABLE prices (id INT PRIMARY KEY, free NUMERIC, fixed NUMERIC(10,3))');
  await client.query('INSERT INTO prices VALUES (1, 12345.678, 12.5)');
  const price = await client.query('SELECT free, fixed, sum(free) AS total FROM prices GROUP BY free, fixed');
  assert.deepStrictEqual([price.rows[0].free, price.rows[0].fixed, price.rows[0].total], ['12345.678', '12.500', '12345.678']);
  const values = await client.query('SELECT x FROM (VALUES (1), (2)) t(x) ORDER BY x');
  assert.deepStrictEqual(values.rows.map((r) => r.x), [1, 2]);
  assert.strictEqual(values.fields[0].dataTypeID, 23, 'VALUES of small integers is int4');
  await assert.rejects(client.query('SELECT * FROM nope'), (e) => e.code === '42P01');
  await assert.rejects(client.query('SELECT 2147483647::INT + 1'), (e) => e.code === '22003');
  await assert.rejects(client.query("INSERT INTO readings VALUES (9, 'a much too long name', 1, NULL, NULL)"),
    (e) => e.code === '22001');
  assert.strictEqual((await client.query('SELECT count(*)::INT AS n FROM readings')).rows[0].n, 3);
  await client.end();

  // A pool of connections, queried concurrently.
  const pool = new Pool({ ...config, max: 4 });
  const counts = await Promise.all(
    [...Array(8).keys()].map((i) => pool.query('SELECT count(*)::INT AS n FROM readings WHERE id > $1', [i % 3])));
  assert.deepStrictEqual(counts.map((r) => r.rows[0].n), [3, 2, 1, 3, 2, 1, 3, 2]);
  await pool.end();
  console.log('node-postgres ok');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
