"""Drives Weir with psycopg 3 the way a Python application would.

psycopg binds parameters server-side (extended protocol); a binary cursor asks for binary
results. Exits non-zero with a message on the first mismatch. Usage: psycopg_check.py URL
"""
import datetime
import decimal
import sys

import psycopg

url = sys.argv[1]
with psycopg.connect(url, autocommit=True) as conn:
    assert conn.info.server_version >= 150000, conn.info.server_version
    conn.execute("CREATE TABLE py (id BIGINT PRIMARY KEY, name VARCHAR, price DOUBLE PRECISION, ts TIMESTAMP, ok BOOLEAN)")
    ts = datetime.datetime(2026, 1, 2, 3, 4, 5)
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO py VALUES (%s, %s, %s, %s, %s)",
            [(i, f"n{i}", i * 1.5, ts, i % 2 == 0) for i in range(5)],
        )
        cur.execute("SELECT id, name, price, ts, ok FROM py WHERE id >= %s ORDER BY id", (3,))
        rows = cur.fetchall()
        assert rows == [(3, "n3", 4.5, ts, False), (4, "n4", 6.0, ts, True)], rows
    with conn.cursor(binary=True) as cur:
        cur.execute("SELECT count(*), sum(price), CAST(2.5 AS NUMERIC(4,2)) FROM py")
        count, total, num = cur.fetchone()
        assert count == 5 and total == 15.0 and num == decimal.Decimal("2.50"), (count, total, num)
    # Integer literals and int4 arithmetic are int4 (OID 23), in text and binary, with and
    # without parameters, as Postgres sends them.
    for binary in (False, True):
        with conn.cursor(binary=binary) as cur:
            cur.execute("SELECT 1 AS one, %s::int4 + 1 AS two, 10000000000 AS big", (1,))
            assert [d.type_code for d in cur.description] == [23, 23, 20], cur.description
            assert cur.fetchone() == (1, 2, 10000000000)
    # Errors carry SQLSTATEs psycopg maps to exception classes.
    try:
        conn.execute("SELECT * FROM missing")
        raise AssertionError("expected UndefinedTable")
    except psycopg.errors.UndefinedTable:
        pass
    # A transaction block.
    with conn.transaction():
        conn.execute("UPDATE py SET name = %s WHERE id = %s", ("renamed", 0))
    (name,) = conn.execute("SELECT name FROM py WHERE id = 0").fetchone()
    assert name == "renamed", name
    # Bulk loading with psycopg's COPY API (text format, rows written one by one).
    with conn.cursor() as cur:
        with cur.copy("COPY py (id, name, price, ts, ok) FROM STDIN") as copy:
            for i in range(100, 1100):
                copy.write_row((i, f"copied\t{i}" if i % 100 else None, i / 2, ts, i % 2 == 0))
        assert cur.rowcount == 1000, cur.rowcount
    (n, named, evens) = conn.execute(
        "SELECT count(*), count(name), count(*) FILTER (WHERE ok) FROM py WHERE id >= 100"
    ).fetchone()
    assert (n, named, evens) == (1000, 990, 500), (n, named, evens)
    (name,) = conn.execute("SELECT name FROM py WHERE id = 101").fetchone()
    assert name == "copied\t101", name
    # Durations as psycopg sends them (text: '1 day 2:03:04'; binary), and intervals back.
    for delta in [datetime.timedelta(days=1, hours=2, minutes=3, seconds=4), datetime.timedelta(days=-1, seconds=5)]:
        for query in ["SELECT %s::interval", "SELECT %b::interval"]:
            (back,) = conn.execute(query, [delta]).fetchone()
            assert back == delta, (query, delta, back)
    (back,) = conn.execute("SELECT '1 day 02:03:04'::interval").fetchone()
    assert back == datetime.timedelta(days=1, hours=2, minutes=3, seconds=4), back
    # jsonb and json: values psycopg sends (text and binary), read back as Python objects
    # (psycopg parses what RowDescription announces as json/jsonb), operators included.
    from psycopg.types.json import Json, Jsonb
    conn.execute("CREATE TABLE docs (id INT PRIMARY KEY, body JSONB, raw JSON)")
    doc = {"user": {"name": "ann", "tags": ["a", "b"]}, "n": 2}
    conn.execute("INSERT INTO docs VALUES (1, %s, %s)", [Jsonb(doc), Json([1, 2])])
    conn.execute("INSERT INTO docs VALUES (2, %b, %b)", [Jsonb({"k": None}), Json({"b": 1})])
    assert conn.execute("SELECT body, raw FROM docs WHERE id = 1").fetchone() == (doc, [1, 2])
    assert conn.execute("SELECT body FROM docs WHERE id = 2", binary=True).fetchone() == ({"k": None},)
    row = conn.execute(
        "SELECT body -> 'user', body -> 'user' ->> 'name', body #>> '{user,tags,1}' FROM docs WHERE body @> %s",
        [Jsonb({"n": 2})],
    ).fetchone()
    assert row == ({"name": "ann", "tags": ["a", "b"]}, "ann", "b"), row
    try:
        conn.execute("INSERT INTO docs VALUES (3, '{not json', NULL)")
        raise AssertionError("malformed jsonb was stored")
    except psycopg.errors.InvalidTextRepresentation:
        pass
    # Type introspection, as psycopg's TypeInfo does it.
    info = psycopg.types.TypeInfo.fetch(conn, "int8")
    assert info is not None and info.oid == 20, info
# A connection without autocommit, as applications open them: rollback() undoes the block's
# writes, commit() keeps them, and another connection sees them only after the commit.
with psycopg.connect(url) as conn, psycopg.connect(url, autocommit=True) as other:
    conn.execute("INSERT INTO py VALUES (5000, 'rolled back', 1, NULL, NULL)")
    conn.execute("UPDATE py SET name = 'changed' WHERE id = 1")
    assert conn.execute("SELECT count(*) FROM py WHERE id = 5000").fetchone() == (1,)
    assert other.execute("SELECT count(*) FROM py WHERE id = 5000").fetchone() == (0,)
    conn.rollback()
    assert conn.execute("SELECT name FROM py WHERE id = 1").fetchone() == ("n1",)
    conn.execute("INSERT INTO py VALUES (5001, 'committed', 1, NULL, NULL)")
    assert other.execute("SELECT count(*) FROM py WHERE id = 5001").fetchone() == (0,)
    conn.commit()
    assert other.execute("SELECT count(*) FROM py WHERE id >= 5000").fetchone() == (1,)
print("psycopg ok")
