"""SQLAlchemy's inspector (the reflection BI tools and ORMs run) and asyncpg against Weir.

Usage: sqlalchemy_check.py HOST PORT. Exits non-zero with a message on the first mismatch.
"""
import asyncio
import datetime
import sys

import asyncpg
import asyncpg.introspection
import json
from sqlalchemy import create_engine, inspect, text

host, port = sys.argv[1], sys.argv[2]
engine = create_engine(f"postgresql+psycopg://root@{host}:{port}/dev")
with engine.connect() as c:
    c.execute(text("CREATE TABLE orders (id BIGINT PRIMARY KEY, customer VARCHAR NOT NULL, amount DOUBLE PRECISION)"))
    c.execute(text("CREATE TABLE composite (a INT, b INT, c TEXT, PRIMARY KEY (b, a))"))
    c.execute(text("CREATE MATERIALIZED VIEW per_customer AS SELECT customer, sum(amount) AS total FROM orders GROUP BY customer"))
    c.execute(text("CREATE VIEW big_orders AS SELECT id, amount FROM orders WHERE amount > 100"))
    c.commit()

insp = inspect(engine)
assert sorted(insp.get_table_names()) == ["composite", "orders"], insp.get_table_names()
assert insp.get_materialized_view_names() == ["per_customer"], insp.get_materialized_view_names()
assert insp.get_view_names() == ["big_orders"], insp.get_view_names()
assert "amount > 100" in insp.get_view_definition("big_orders"), insp.get_view_definition("big_orders")
assert "public" in insp.get_schema_names(), insp.get_schema_names()
columns = {c["name"]: c for c in insp.get_columns("orders")}
assert list(columns) == ["id", "customer", "amount"], columns
assert str(columns["id"]["type"]) == "BIGINT" and not columns["id"]["nullable"], columns["id"]
assert not columns["customer"]["nullable"] and columns["amount"]["nullable"], columns
assert str(columns["customer"]["type"]) == "VARCHAR", columns["customer"]
with engine.connect() as c:
    c.execute(text("CREATE TABLE sized (code CHAR(3), name VARCHAR(20), price NUMERIC(10, 2))"))
    c.commit()
sized = {c["name"]: str(c["type"]) for c in insp.get_columns("sized")}
assert sized == {"code": "CHAR(3)", "name": "VARCHAR(20)", "price": "NUMERIC(10, 2)"}, sized
assert insp.get_pk_constraint("orders")["constrained_columns"] == ["id"], insp.get_pk_constraint("orders")
assert insp.get_pk_constraint("composite")["constrained_columns"] == ["b", "a"], insp.get_pk_constraint("composite")
assert insp.has_table("orders") and not insp.has_table("nope")
# Primary keys are not listed as indexes, as in Postgres; there are no foreign keys.
assert insp.get_indexes("orders") == [], insp.get_indexes("orders")
assert insp.get_foreign_keys("orders") == [], insp.get_foreign_keys("orders")


async def with_asyncpg():
    conn = await asyncpg.connect(f"postgresql://root@{host}:{port}/dev")
    ts = datetime.datetime(2026, 1, 2, 3, 4, 5)
    await conn.executemany("INSERT INTO orders VALUES ($1, $2, $3)", [(i, f"c{i % 2}", i * 2.5) for i in range(4)])
    rows = await conn.fetch("SELECT id, customer, amount FROM orders WHERE id > $1 ORDER BY id", 1)
    assert [tuple(r) for r in rows] == [(2, "c0", 5.0), (3, "c1", 7.5)], rows
    assert await conn.fetchval("SELECT $1::timestamp", ts) == ts
    # A prepared statement's description (asyncpg's get_attributes / get_parameters).
    st = await conn.prepare("SELECT id, customer, amount FROM orders WHERE id = $1")
    attributes = [(a.name, a.type.name) for a in st.get_attributes()]
    # customer is VARCHAR: announced as declared, not as the text it is stored as.
    assert attributes == [("id", "int8"), ("customer", "varchar"), ("amount", "float8")], attributes
    assert [p.name for p in st.get_parameters()] == ["int8"], st.get_parameters()
    assert [tuple(r) for r in await st.fetch(2)] == [(2, "c0", 5.0)]
    # Arrays make asyncpg introspect their types through pg_catalog.
    assert await conn.fetchval("SELECT make_array(1, 2, 3)") == [1, 2, 3]
    assert await conn.fetchval("SELECT make_array('a', 'b')") == ["a", "b"]
    # Array parameters cast by their pg_type names; ranks are bigint (an int, not a Decimal).
    assert await conn.fetchval("SELECT $1::_int4", [1, 2]) == [1, 2]
    rank = await conn.fetchval("SELECT row_number() OVER ()")
    assert type(rank) is int and rank == 1, repr(rank)
    # jsonb comes back in binary (asyncpg's default), as the JSON text; $1::jsonb takes text.
    assert await conn.fetchval("SELECT '{\"b\": 1, \"a\": [1, 2.50]}'::jsonb") == '{"a": [1, 2.50], "b": 1}'
    assert await conn.fetchval("SELECT $1::jsonb ->> 'k'", '{"k": "v"}') == "v"
    # A type looked up by name (asyncpg's TYPE_BY_NAME, as set_type_codec does for types outside
    # its built-in map): kind is PostgreSQL's "char", which asyncpg reads as bytes.
    found = await conn.fetchrow(asyncpg.introspection.TYPE_BY_NAME, "varchar", "pg_catalog")
    assert found["kind"] == b"b" and found["elemtype"] == 0, found
    assert asyncpg.introspection.is_scalar_type(found), found
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    assert await conn.fetchval("SELECT '{\"a\": [1]}'::json") == {"a": [1]}
    await conn.execute("FLUSH")
    totals = await conn.fetch("SELECT customer, total FROM per_customer ORDER BY customer")
    assert [tuple(r) for r in totals] == [("c0", 5.0), ("c1", 10.0)], totals
    await conn.close()


asyncio.run(with_asyncpg())
print("sqlalchemy and asyncpg ok")
