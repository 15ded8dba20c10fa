#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into fuzz/corpus/<target>/ (kept between runs; files
already there stay). Seeds come from the statements of tests/slt/*.slt (the `sql` target's
text, and the `wire` target's simple-query and extended-protocol messages), from hand-made
records of the types the decoders read (`records`, `avro`, `values`) and, for `stored`, from
Weir's own encoders (the target writes those itself at start: weir::fuzz::init).

Usage: python3 fuzz/seeds.py   (scripts/fuzz.sh runs it)
"""
import glob
import hashlib
import json
import os
import struct

FUZZ = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(FUZZ)
MAX_LEN = 8192


def write(target, data):
    if len(data) > MAX_LEN:
        return
    directory = os.path.join(FUZZ, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "seed-" + hashlib.sha1(data).hexdigest()[:16])
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)


def slt_statements():
    """The SQL of each `statement` and `query` record of the slt files, in order."""
    seen = set()
    for path in sorted(glob.glob(os.path.join(REPO, "tests", "slt", "*.slt"))):
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].startswith(("statement ", "query ")):
                i += 1
                body = []
                while i < len(lines) and lines[i].strip() and lines[i] != "----":
                    body.append(lines[i])
                    i += 1
                sql = "\n".join(body)
                if sql and sql not in seen:
                    seen.add(sql)
                    yield sql
            else:
                i += 1


# --- Postgres wire messages (protocol 3.0) ---
def message(tag, body):
    return tag + struct.pack("!I", len(body) + 4) + body


def cstr(text):
    return text.encode() + b"\0"


def startup(**params):
    body = struct.pack("!I", 196608) + b"".join(cstr(k) + cstr(v) for k, v in params.items()) + b"\0"
    return struct.pack("!I", len(body) + 4) + body


def query(sql):
    return message(b"Q", cstr(sql))


def parse(sql, types=()):
    return message(b"P", cstr("") + cstr(sql) + struct.pack("!H", len(types)) + b"".join(struct.pack("!I", t) for t in types))


def bind(values=(), binary=False, result_binary=False):
    body = cstr("") + cstr("")
    body += struct.pack("!HH", 1, 1 if binary else 0) if values else struct.pack("!H", 0)
    body += struct.pack("!H", len(values))
    for v in values:
        body += struct.pack("!i", -1) if v is None else struct.pack("!I", len(v)) + v
    body += struct.pack("!HH", 1, 1 if result_binary else 0)
    return message(b"B", body)


DESCRIBE = message(b"D", b"P" + cstr(""))
DESCRIBE_STATEMENT = message(b"D", b"S" + cstr(""))
EXECUTE = message(b"E", cstr("") + struct.pack("!I", 0))
SYNC = message(b"S", b"")
TERMINATE = message(b"X", b"")


def copy_data(data):
    return message(b"d", data)


COPY_DONE = message(b"c", b"")


def extended(sql, values=(), binary=False, types=()):
    return parse(sql, types) + DESCRIBE_STATEMENT + bind(values, binary) + DESCRIBE + EXECUTE + SYNC


# --- COPY data for table t (weir::fuzz's every-type table) ---
TEXT_ROWS = (
    b"1\t1\tabc\t1.500\t0.25\tt\t2026-01-01 00:00:00\t2026-01-01 00:00:00+00\t2026-01-01\t1 day 02:00:00\t"
    b'{"a": [1, 2]}\t\\\\x00ff\t{1,2}\n'
    b"2\t\\N\ttab\\there\\nnew line\t-12345.678\tNaN\tf\t1999-12-31 23:59:59.999999\t\\N\t0001-01-01\t-3 mons\t"
    b"null\t\\\\x\t{}\n"
)
CSV_ROWS = (
    b'1,1,abc,1.500,0.25,true,2026-01-01 00:00:00,2026-01-01 00:00:00+00,2026-01-01,1 day,"{""a"": 1}",\\x00ff,"{1,2}"\n'
    b'2,,"quoted, ""comma""",,Infinity,,,,,,,,\n'
)
HEADER_ROWS = (
    b"id;k;s;n;f;b;ts;tz;d;iv;j;raw;arr\n"
    b"3;NULL;'semi;colon';0.001;1e300;true;2026-02-28 12:00;2026-02-28 12:00+05:30;2026-02-28;P1D;[1];\\x;{3}\n"
)
PIPE_ROWS = b"4|5|x||1.5|t|||||||\n"


def binary_copy(rows):
    out = b"PGCOPY\n\xff\r\n\0" + struct.pack("!ii", 0, 0)
    for row in rows:
        out += struct.pack("!h", len(row))
        for v in row:
            out += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    return out + struct.pack("!h", -1)


BINARY_ROW = [
    struct.pack("!q", 7), struct.pack("!i", 3), b"text", None, struct.pack("!d", 2.5), b"\x01",
    struct.pack("!q", 820_454_400_000_000), struct.pack("!q", 0), struct.pack("!i", 9497),
    struct.pack("!qii", 3_600_000_000, 1, 2), b"\x01" + b'{"k": "v"}', b"\x00\xff",
    struct.pack("!iiiii", 1, 0, 23, 2, 1) + struct.pack("!ii", 4, 10) + struct.pack("!ii", 4, 20),
]


# --- Avro values of weir::fuzz's reader schema ---
def zigzag(n):
    n = (n << 1) ^ (n >> 63)
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def avro_string(s):
    data = s.encode() if isinstance(s, str) else s
    return zigzag(len(data)) + data


def avro_order(i, note=None, tags=(), attrs=None, zip_code=None):
    out = zigzag(i) + zigzag(i * 3) + avro_string("order %d" % i)
    out += struct.pack("<d", i * 1.25) + struct.pack("<f", 0.5) + bytes([i % 2])
    out += zigzag(0) if note is None else zigzag(1) + avro_string(note)
    out += avro_string(b"\x00\x01\xff")
    out += (zigzag(len(tags)) + b"".join(avro_string(t) for t in tags) if tags else b"") + zigzag(0)
    attrs = attrs or {}
    out += (zigzag(len(attrs)) + b"".join(avro_string(k) + zigzag(v) for k, v in attrs.items()) if attrs else b"") + zigzag(0)
    out += zigzag(i % 3) + b"ab\x00\xff"
    unscaled = (12345 * (i + 1)).to_bytes(4, "big", signed=True)
    out += avro_string(unscaled)
    out += zigzag(1_780_000_000_000_000 + i) + zigzag(20_000 + i)
    out += avro_string("Lyon") + (zigzag(0) if zip_code is None else zigzag(1) + zigzag(zip_code))
    return out


def main():
    statements = list(slt_statements())
    for sql in statements:
        write("sql", sql.encode())
        write("wire", b"\0" + query(sql) + TERMINATE)
    for sql in statements[::7]:
        write("wire", b"\0" + extended(sql) + TERMINATE)
    # Over the wire, on the table role `fuzz` may change.
    for sql in [
        "SELECT * FROM t ORDER BY id",
        "SELECT k, c FROM t_counts",
        "INSERT INTO t (id, k, s) VALUES (1, 2, 'x') ON CONFLICT (id) DO UPDATE SET k = excluded.k",
        "UPDATE t SET s = s || '!' WHERE id = 1 RETURNING *",
        "DELETE FROM t WHERE k > 1",
        "BEGIN; INSERT INTO t (id) VALUES (9); SELECT 1/0; COMMIT",
        "BEGIN; INSERT INTO t (id) VALUES (10); ROLLBACK",
        "COPY t TO STDOUT (FORMAT csv, HEADER true)",
        "SET statement_timeout = '1s'; SHOW statement_timeout",
        "DROP TABLE t",
    ]:
        write("wire", b"\0" + query(sql) + TERMINATE)
    write("wire", b"\0" + extended("SELECT * FROM t WHERE id = $1 AND s = $2", [b"1", b"abc"]) + TERMINATE)
    write("wire", b"\0" + extended("SELECT * FROM t WHERE id = $1", [struct.pack("!q", 1)], True, [20]) + TERMINATE)
    write("wire", b"\0" + extended("INSERT INTO t (id, j, ts) VALUES ($1, $2, $3)", [b"5", b'{"x": 1}', b"2026-01-01 10:00"]) + TERMINATE)
    write("wire", b"\0" + extended("UPDATE t SET n = $1 WHERE id = $2", [b"1.25", b"5"]) + TERMINATE)
    for options, data in [("", TEXT_ROWS), (" (FORMAT csv)", CSV_ROWS), (" (FORMAT binary)", binary_copy([BINARY_ROW]))]:
        half = len(data) // 2
        write("wire", b"\0" + query("COPY t FROM STDIN" + options) + copy_data(data[:half]) + copy_data(data[half:]) + COPY_DONE + TERMINATE)
    write("wire", b"\0" + query("COPY t FROM STDIN") + copy_data(TEXT_ROWS) + message(b"f", cstr("client gave up")) + TERMINATE)
    # The whole stream fuzzed: startup, SSL and GSS requests, cancel requests.
    write("wire", b"\1" + startup(user="fuzz", database="dev", application_name="psql", options="-c search_path=public") + query("SELECT 1") + TERMINATE)
    write("wire", b"\1" + struct.pack("!II", 8, 80877103) + startup(user="fuzz", database="dev") + TERMINATE)
    write("wire", b"\1" + struct.pack("!II", 8, 80877104) + startup(user="fuzz") + TERMINATE)
    write("wire", b"\1" + struct.pack("!IIII", 16, 80877102, 1234, 5678))
    write("wire", b"\1" + startup(user="root", database="dev") + message(b"p", cstr("wrong")) + TERMINATE)
    # COPY data in each of the values target's formats (first byte: format, second: the cut).
    for fmt, data in [(0, TEXT_ROWS), (1, CSV_ROWS), (2, binary_copy([BINARY_ROW, [None] * 13])), (3, HEADER_ROWS), (4, PIPE_ROWS)]:
        for cut in (0, 100, 255):
            write("values", bytes([fmt, cut]) + data)
    # Source records: JSON (first byte even) and CSV lines.
    json_rows = [
        {"id": 1, "name": "a", "price": 1.5, "qty": 2, "ok": True, "ts": "2026-01-01T00:00:00", "tz": "2026-01-01T00:00:00Z",
         "d": "2026-01-01", "amount": "12.345", "doc": {"x": [1, 2, {"y": None}]}},
        {"id": 2, "name": None, "doc": "text", "amount": 1e3},
        {"id": "3", "qty": 2147483648, "ok": "yes"},
    ]
    write("records", b"\0" + b"\n".join(json.dumps(r).encode() for r in json_rows) + b"\n")
    write("records", b"\0" + b'{"id": 1, "doc": [1, 2]}\n[1, 2]\n"just a string"\n{"id": \n')
    write("records", b"\1" + b'1,a,1.5,2,true,2026-01-01T00:00:00,2026-01-01T00:00:00Z,2026-01-01,12.345,"{""x"": 1}"\n2,,,,,,,,,\n3,"b,c"\n')
    # Avro values, several a poll (0xFF 0xFE between them).
    orders = [avro_order(1), avro_order(2, note="gift", tags=("a", "b"), attrs={"n": 5}, zip_code=69001), avro_order(-3)]
    write("avro", orders[0])
    write("avro", b"\xff\xfe".join(orders))
    write("avro", orders[1][:20] + b"\xff\xfe" + orders[2])
    print("seeds: %d statements from tests/slt; corpora in %s" % (len(statements), os.path.join(FUZZ, "corpus")))


if __name__ == "__main__":
    main()
