"""Certificates for the TLS tests (a test CA and what it signs), written to DIR:

- ca.pem / ca.key: the test CA, which the tests trust;
- server.pem / server.key: for the names localhost and 127.0.0.1, signed by the CA;
- wrong_host.pem / wrong_host.key: signed by the CA for another name (weir-wrong-host.invalid);
- client.pem / client.key: a client certificate (CN weir) signed by the CA;
- other_ca.pem: a CA nobody here trusts, and untrusted.pem / untrusted.key it signed for localhost.

    python certs.py DIR      # does nothing when DIR/ca.pem exists already
"""

import datetime
import ipaddress
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def key():
    return ec.generate_private_key(ec.SECP256R1())


def name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def write(directory, stem, certificate, private):
    with open(os.path.join(directory, stem + ".pem"), "wb") as f:
        f.write(certificate.public_bytes(serialization.Encoding.PEM))
    if private is not None:
        path = os.path.join(directory, stem + ".key")
        with open(path, "wb") as f:
            f.write(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
        os.chmod(path, 0o600)


def builder(subject, issuer, public):
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650)))


def authority(common):
    private = key()
    certificate = (builder(name(common), name(common), private.public_key())
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .sign(private, hashes.SHA256()))
    return certificate, private


def leaf(ca, ca_key, common, names, usage):
    private = key()
    alternatives = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in names]
    b = builder(name(common), ca.subject, private.public_key()).add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False)
    if alternatives:
        b = b.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    return b.sign(ca_key, hashes.SHA256()), private


def main(directory):
    if os.path.exists(os.path.join(directory, "ca.pem")):
        return
    os.makedirs(directory, exist_ok=True)
    ca, ca_key = authority("Weir test CA")
    write(directory, "server", *leaf(ca, ca_key, "localhost", ["localhost", "127.0.0.1"], ExtendedKeyUsageOID.SERVER_AUTH))
    write(directory, "wrong_host", *leaf(ca, ca_key, "weir-wrong-host.invalid", ["weir-wrong-host.invalid"],
                                         ExtendedKeyUsageOID.SERVER_AUTH))
    write(directory, "client", *leaf(ca, ca_key, "weir", [], ExtendedKeyUsageOID.CLIENT_AUTH))
    other, other_key = authority("Untrusted CA")
    write(directory, "untrusted", *leaf(other, other_key, "localhost", ["localhost", "127.0.0.1"],
                                        ExtendedKeyUsageOID.SERVER_AUTH))
    write(directory, "other_ca", other, None)
    # Last: its presence says the directory is complete.
    write(directory, "ca", ca, ca_key)


if __name__ == "__main__":
    main(sys.argv[1])
