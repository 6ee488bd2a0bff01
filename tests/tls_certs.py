"""Certificates the TLS tests make for themselves: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate the CA signed, and one a stranger's CA
signed. PEM files in a folder; keys unencrypted, as ``mlserve serve`` takes them."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Certificates", "make_certificates"]


@dataclass(frozen=True)
class Certificates:
    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    @property
    def stranger_cert(self) -> Path:
        """A client certificate another CA signed."""
        return self.folder / "stranger.crt"

    @property
    def stranger_key(self) -> Path:
        return self.folder / "stranger.key"

    def client_context(self, with_certificate: bool = False) -> ssl.SSLContext:
        """What a careful client uses: the test CA trusted, the hostname checked."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_certificate:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *extensions: tuple[x509.ExtensionType, bool],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(
    folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> None:
    (folder / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / f"{stem}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _ca(folder: Path, stem: str, name: str) -> ec.EllipticCurvePrivateKey:
    key = _key()
    ca_usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    cert = _certificate(
        name,
        key,
        name,
        key,
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (ca_usage, True),
    )
    _write(folder, stem, cert, key)
    return key


def _leaf(
    folder: Path, stem: str, name: str, ca: str, ca_key: ec.EllipticCurvePrivateKey, server: bool
) -> None:
    key = _key()
    # The server's may also authenticate as a client, as a pod's own probe does under
    # mutual TLS (docs/deployment.md#tls-in-kubernetes).
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    usages += [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    extensions: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage(usages), False),
    ]
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        extensions.append((x509.SubjectAlternativeName(names), False))
    _write(folder, stem, _certificate(name, key, ca, ca_key, *extensions), key)


def make_certificates(folder: Path) -> Certificates:
    """A CA and the certificates it signed (and a stranger's) as PEM files in ``folder``."""
    ca_key = _ca(folder, "ca", "mlserve test CA")
    _leaf(folder, "server", "localhost", "mlserve test CA", ca_key, server=True)
    _leaf(folder, "client", "a client", "mlserve test CA", ca_key, server=False)
    stranger_ca_key = _ca(folder, "stranger-ca", "a stranger's CA")
    _leaf(folder, "stranger", "a stranger", "a stranger's CA", stranger_ca_key, server=False)
    return Certificates(folder)
