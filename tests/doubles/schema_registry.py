"""A TEST DOUBLE of a Confluent Schema Registry: the REST endpoints Avro and Protobuf serializers
and Weir use, over schemas held in memory (no compatibility checks, no deletes, no contexts).

- POST /subjects/{subject}/versions  {"schema": "...", "schemaType"?, "references"?}  -> {"id": n}
  (the same schema text under any subject keeps one id, as the registry's ids are global)
  Schemas are kept and answered as given: a Protobuf schema registered serialized (base64, as
  confluent-kafka's ProtobufSerializer sends it) is answered serialized, so `?format=serialized`
  is accepted and changes nothing. Answers carry "schemaType" (when not AVRO) and "references".
- POST /subjects/{subject}  {"schema": "..."}  -> the version holding that schema, or 404 40403
- GET  /subjects  -> the subjects
- GET  /subjects/{subject}/versions  -> [1, 2, ...]
- GET  /subjects/{subject}/versions/{version | latest}  -> {"subject", "id", "version", "schema"}
- GET  /schemas/ids/{id}  -> {"schema": "..."} or 404 {"error_code": 40403}
- GET  /config, PUT /config  -> {"compatibilityLevel": "NONE"}

    python schema_registry.py --listen 127.0.0.1:PORT [--user NAME:PASSWORD] [--data FILE] [--tls CERT KEY]

With --user, every request must carry HTTP basic auth for that user (401 otherwise). With
--data, the schemas are kept in FILE, so a registry stopped and started again still has them.
With --tls, it speaks HTTPS with that certificate.
Prints "ready" once it listens; stops on SIGTERM. Used by tests/kafka_avro.rs.
"""

import argparse
import base64
import json
import os
import signal
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

lock = threading.Lock()
schemas = []  # index + 1 = id: (schema text, schema type, references)
subjects = {}  # subject -> [id, ...] by version
data_file = None


def save():
    if data_file:
        with open(data_file + ".new", "w") as f:
            json.dump({"schemas": schemas, "subjects": subjects}, f)
        os.replace(data_file + ".new", data_file)


def register(subject, text, kind, references):
    with lock:
        entry = (text, kind, references)
        if entry in schemas:
            id_ = schemas.index(entry) + 1
        else:
            schemas.append(entry)
            id_ = len(schemas)
        versions = subjects.setdefault(subject, [])
        if id_ not in versions:
            versions.append(id_)
        save()
        return id_


def described(id_):
    """Schema id_'s text, type (when not AVRO) and references, as the registry answers them."""
    with lock:
        text, kind, references = schemas[id_ - 1]
    body = {"schema": text}
    if kind != "AVRO":
        body["schemaType"] = kind
    if references:
        body["references"] = references
    return body


class Handler(BaseHTTPRequestHandler):
    user = None

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self, code, message):
        self.answer(404, {"error_code": code, "message": message})

    def authorized(self):
        if self.user is None:
            return True
        expected = "Basic " + base64.b64encode(self.user.encode()).decode()
        if self.headers.get("Authorization") == expected:
            return True
        self.answer(401, {"error_code": 401, "message": "Unauthorized"})
        return False

    def parts(self):
        return [unquote(p) for p in urlparse(self.path).path.strip("/").split("/") if p]

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def version_of(self, subject, version):
        with lock:
            versions = subjects.get(subject)
            if not versions:
                return self.not_found(40401, f"Subject '{subject}' not found.")
            n = len(versions) if version in ("latest", "-1") else int(version)
            if not 1 <= n <= len(versions):
                return self.not_found(40402, "Version not found.")
            id_ = versions[n - 1]
        body = {"subject": subject, "id": id_, "version": n}
        body.update(described(id_))
        self.answer(200, body)

    def do_GET(self):
        if not self.authorized():
            return
        p = self.parts()
        if p == ["subjects"]:
            with lock:
                return self.answer(200, sorted(subjects))
        if p[:1] == ["config"]:
            return self.answer(200, {"compatibilityLevel": "NONE"})
        if len(p) == 3 and p[:2] == ["schemas", "ids"]:
            id_ = int(p[2])
            with lock:
                found = 1 <= id_ <= len(schemas)
            if not found:
                return self.not_found(40403, "Schema not found")
            return self.answer(200, described(id_))
        if len(p) == 3 and p[0] == "subjects" and p[2] == "versions":
            with lock:
                versions = subjects.get(p[1])
            if not versions:
                return self.not_found(40401, f"Subject '{p[1]}' not found.")
            return self.answer(200, list(range(1, len(versions) + 1)))
        if len(p) == 4 and p[0] == "subjects" and p[2] == "versions":
            return self.version_of(p[1], p[3])
        self.not_found(404, "Not found")

    def do_POST(self):
        if not self.authorized():
            return
        p = self.parts()
        body = self.body()
        if len(p) == 3 and p[0] == "subjects" and p[2] == "versions":
            kind, references = body.get("schemaType", "AVRO"), body.get("references") or []
            return self.answer(200, {"id": register(p[1], body["schema"], kind, references)})
        if len(p) == 2 and p[0] == "subjects":
            with lock:
                for n, id_ in enumerate(subjects.get(p[1], []), 1):
                    if schemas[id_ - 1][0] == body["schema"]:
                        return self.answer(200, {"subject": p[1], "id": id_, "version": n, "schema": body["schema"]})
            return self.not_found(40403, "Schema not found")
        self.not_found(404, "Not found")

    def do_PUT(self):
        if not self.authorized():
            return
        self.body()
        self.answer(200, {"compatibility": "NONE"})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--user")
    parser.add_argument("--data")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    args = parser.parse_args()
    Handler.user = args.user
    global data_file
    data_file = args.data
    if data_file and os.path.exists(data_file):
        with open(data_file) as f:
            kept = json.load(f)
        schemas.extend((text, kind, references) for text, kind, references in kept["schemas"])
        subjects.update(kept["subjects"])
    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*args.tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
    sys.exit(0)
