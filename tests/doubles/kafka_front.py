"""A TEST DOUBLE of a secured Kafka broker: a front that terminates TLS and performs SASL itself
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) in front of the plain test broker (noida-db), which speaks
neither TLS nor SCRAM.

It is Kafka-protocol-aware only as far as that takes:
- it answers SaslHandshake and SaslAuthenticate itself, checking the users it was given, and
  passes nothing else on before a client has authenticated;
- it caps, in the broker's ApiVersions answer, Metadata at v8 and FindCoordinator at v2 (the
  versions without tagged fields), so that it can rewrite the broker addresses in their answers
  to its own: a client following the metadata comes back through the front, never around it;
- every other request and answer passes unchanged.

    python kafka_front.py --listen 127.0.0.1:PORT --upstream 127.0.0.1:9092 \
        --advertise localhost [--tls CERT KEY [--client-ca CA]] [--sasl MECHANISM --user NAME:PASSWORD ...]

It prints "ready" once it listens; it stops on SIGTERM. Used by tests/kafka_security.rs.
"""

import argparse
import asyncio
import base64
import hashlib
import hmac
import os
import signal
import ssl
import struct
import sys

API_METADATA, API_FIND_COORDINATOR, API_SASL_HANDSHAKE, API_API_VERSIONS, API_SASL_AUTHENTICATE = 3, 10, 17, 18, 36
CAPS = {API_METADATA: 8, API_FIND_COORDINATOR: 2, API_SASL_HANDSHAKE: 1, API_SASL_AUTHENTICATE: 1}
ERROR_UNSUPPORTED_SASL_MECHANISM, ERROR_ILLEGAL_SASL_STATE, ERROR_SASL_AUTHENTICATION_FAILED = 33, 34, 58
HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


def string(value):
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def nullable_string(value):
    return struct.pack(">h", -1) if value is None else string(value)


def read_string(data, at):
    (n,) = struct.unpack_from(">h", data, at)
    at += 2
    if n < 0:
        return None, at
    return data[at:at + n].decode(), at + n


def uvarint(data, at):
    value, shift = 0, 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def skip_tags(data, at):
    count, at = uvarint(data, at)
    for _ in range(count):
        _, at = uvarint(data, at)
        size, at = uvarint(data, at)
        at += size
    return at


def capped_api_versions(body, version):
    """The broker's ApiVersions answer (after the correlation id) with the versions in CAPS lowered."""
    body = bytearray(body)
    at = 2  # error_code
    if version >= 3:
        count, at = uvarint(body, at)
        count -= 1
    else:
        (count,) = struct.unpack_from(">i", body, at)
        at += 4
    for _ in range(max(count, 0)):
        key, _, high = struct.unpack_from(">hhh", body, at)
        if key in CAPS and high > CAPS[key]:
            struct.pack_into(">h", body, at + 4, CAPS[key])
        at += 6
        if version >= 3:
            at = skip_tags(body, at)
    return bytes(body)


def readdressed_metadata(body, version, host, port):
    """A Metadata answer (v0-v8) whose brokers all point at host:port."""
    at = 0
    head = b""
    if version >= 3:
        head, at = body[:4], 4
    (count,) = struct.unpack_from(">i", body, at)
    at += 4
    brokers = b""
    for _ in range(count):
        (node,) = struct.unpack_from(">i", body, at)
        _, at = read_string(body, at + 4)
        at += 4
        rack = None
        if version >= 1:
            rack, at = read_string(body, at)
        brokers += struct.pack(">i", node) + string(host) + struct.pack(">i", port)
        if version >= 1:
            brokers += nullable_string(rack)
    return head + struct.pack(">i", count) + brokers + body[at:]


def readdressed_coordinator(body, version, host, port):
    """A FindCoordinator answer (v0-v2) pointing at host:port."""
    at = 4 if version >= 1 else 0
    at += 2  # error_code
    if version >= 1:
        _, at = read_string(body, at)
    node_at = at
    _, at = read_string(body, at + 4)
    return body[:node_at + 4] + string(host) + struct.pack(">i", port) + body[at + 4:]


class Scram:
    """The server side of one SCRAM exchange (RFC 5802, no channel binding)."""

    def __init__(self, mechanism, users):
        self.hash = HASHES[mechanism]
        self.users = users
        self.step = 0

    def answer(self, message):
        """(reply, done, ok)."""
        text = message.decode()
        if self.step == 0:
            self.step = 1
            bare = text.split(",", 2)[2]
            fields = dict(f.split("=", 1) for f in bare.split(","))
            self.user = fields["n"].replace("=2C", ",").replace("=3D", "=")
            self.salt = os.urandom(16)
            self.nonce = fields["r"] + base64.b64encode(os.urandom(18)).decode()
            self.first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i=4096"
            self.client_first_bare = bare
            return self.first.encode(), False, True
        without_proof, proof = text.rsplit(",p=", 1)
        password = self.users.get(self.user)
        if password is None or f"r={self.nonce}" not in without_proof.split(","):
            return b"e=unknown-user", True, False
        salted = hashlib.pbkdf2_hmac(self.hash().name, password.encode(), self.salt, 4096)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = self.hash(client_key).digest()
        auth = f"{self.client_first_bare},{self.first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.hash).digest()
        sent = base64.b64decode(proof)
        recovered = bytes(a ^ b for a, b in zip(sent, signature))
        if len(sent) != len(signature) or not hmac.compare_digest(self.hash(recovered).digest(), stored_key):
            return b"e=invalid-proof", True, False
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        server_signature = hmac.new(server_key, auth, self.hash).digest()
        return b"v=" + base64.b64encode(server_signature), True, True


async def read_frame(reader):
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def frame(correlation, body):
    return struct.pack(">ii", len(body) + 4, correlation) + body


class Front:
    def __init__(self, args):
        self.args = args
        self.upstream = args.upstream.rsplit(":", 1)
        self.host, self.port = args.advertise, int(args.listen.rsplit(":", 1)[1])
        self.users = dict(u.split(":", 1) for u in args.user)

    async def client(self, reader, writer):
        upstream_writer = None
        try:
            up_reader, upstream_writer = await asyncio.open_connection(self.upstream[0], int(self.upstream[1]))
            asked = {}
            answers = asyncio.ensure_future(self.answers(up_reader, writer, asked))
            authenticated = self.args.sasl is None
            mechanism_chosen = None
            exchange = None
            while True:
                request = await read_frame(reader)
                key, version, correlation = struct.unpack_from(">hhi", request, 0)
                if key == API_SASL_HANDSHAKE and not authenticated:
                    mechanism, _ = self.handshake_mechanism(request)
                    offered = [self.args.sasl]
                    error = 0 if mechanism == self.args.sasl else ERROR_UNSUPPORTED_SASL_MECHANISM
                    body = struct.pack(">hi", error, len(offered)) + b"".join(string(m) for m in offered)
                    writer.write(frame(correlation, body))
                    mechanism_chosen = mechanism if error == 0 else None
                    exchange = Scram(mechanism, self.users) if mechanism in HASHES else None
                    continue
                if key == API_SASL_AUTHENTICATE and not authenticated:
                    token = self.auth_bytes(request)
                    if mechanism_chosen is None:
                        ok, done, reply, message = False, True, b"", "SaslHandshake first"
                        error = ERROR_ILLEGAL_SASL_STATE
                    elif exchange is None:
                        _, user, password = token.split(b"\0", 2)
                        ok = self.users.get(user.decode()) == password.decode()
                        done, reply, error = True, b"", 0 if ok else ERROR_SASL_AUTHENTICATION_FAILED
                        message = None if ok else f"Authentication failed: invalid credentials for user {user.decode()}"
                    else:
                        reply, done, ok = exchange.answer(token)
                        error = 0 if ok else ERROR_SASL_AUTHENTICATION_FAILED
                        message = None if ok else "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism_chosen
                    body = struct.pack(">h", error) + nullable_string(message) + struct.pack(">i", len(reply)) + reply
                    if version >= 1:
                        body += struct.pack(">q", 0)
                    writer.write(frame(correlation, body))
                    await writer.drain()
                    if not ok:
                        return
                    authenticated = done
                    continue
                if not authenticated and key != API_API_VERSIONS:
                    return
                asked[correlation] = (key, version)
                upstream_writer.write(struct.pack(">i", len(request)) + request)
                await upstream_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError):
            pass
        finally:
            writer.close()
            if upstream_writer is not None:
                upstream_writer.close()

    @staticmethod
    def header_end(request):
        """Where a request's body starts (header v1: key, version, correlation, client id)."""
        (n,) = struct.unpack_from(">h", request, 8)
        return 10 + max(n, 0)

    def handshake_mechanism(self, request):
        return read_string(request, self.header_end(request))

    def auth_bytes(self, request):
        at = self.header_end(request)
        (n,) = struct.unpack_from(">i", request, at)
        return request[at + 4:at + 4 + n]

    async def answers(self, up_reader, writer, asked):
        try:
            while True:
                response = await read_frame(up_reader)
                (correlation,) = struct.unpack_from(">i", response, 0)
                key, version = asked.pop(correlation, (None, None))
                body = response[4:]
                if key == API_API_VERSIONS:
                    body = capped_api_versions(body, version)
                elif key == API_METADATA:
                    body = readdressed_metadata(body, version, self.host, self.port)
                elif key == API_FIND_COORDINATOR:
                    body = readdressed_coordinator(body, version, self.host, self.port)
                writer.write(frame(correlation, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError):
            writer.close()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--advertise", required=True)
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--client-ca")
    parser.add_argument("--sasl", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    parser.add_argument("--user", action="append", default=[])
    args = parser.parse_args()
    context = None
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*args.tls)
        if args.client_ca:
            context.load_verify_locations(args.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
            # Under TLS 1.3 the server judges the client's certificate only after the client has
            # finished its side of the handshake and sent its first request, so a client without
            # one sees either the server's alert or a reset, whichever arrives first. Under TLS 1.2
            # the refusal is part of the handshake: the client always reads an SSL alert.
            context.maximum_version = ssl.TLSVersion.TLSv1_2
    front = Front(args)
    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(front.client, host, int(port), ssl=context)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
