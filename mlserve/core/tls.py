"""TLS on the network faces: the server's certificate and key and, for mutual TLS,
the CA whose certificates clients must present (docs/security.md#tls).

One object from the flags or the ``MLSERVE_SSL_*`` variables, shared by every face.
``check`` reads the files at start-up, so a missing or bad one is one line before
any port opens or model loads; the HTTP faces then wrap their sockets in
``server_context`` and gRPC takes the same files as PEM bytes (``pem``).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TLSError", "TLSSettings", "TLS_ENV"]

# Each setting, its flag of ``mlserve serve`` and its environment variable.
TLS_ENV = {
    "certfile": ("--ssl-certfile", "MLSERVE_SSL_CERTFILE"),
    "keyfile": ("--ssl-keyfile", "MLSERVE_SSL_KEYFILE"),
    "ca_certs": ("--ssl-ca-certs", "MLSERVE_SSL_CA_CERTS"),
}


class TLSError(ValueError):
    """A TLS file that is missing, unreadable or not what its flag needs: one line."""


@dataclass(frozen=True)
class TLSSettings:
    """Where the faces' certificate, key and client CA are; empty: plain TCP."""

    certfile: str = ""  # PEM: the server's certificate (then its chain)
    keyfile: str = ""  # PEM: its private key (empty: the key is in certfile)
    ca_certs: str = ""  # PEM: given, every client must present a certificate it signed

    @property
    def enabled(self) -> bool:
        return bool(self.certfile)

    @property
    def mutual(self) -> bool:
        """Clients authenticate with certificates (mTLS)."""
        return bool(self.ca_certs)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **given: str | None) -> TLSSettings:
        """Settings from ``MLSERVE_SSL_*`` variables; ``given`` (flags that were set) win."""
        env = dict(os.environ if env is None else env)
        values = {name: env.get(variable, "") for name, (_, variable) in TLS_ENV.items()}
        values.update({name: value for name, value in given.items() if value})
        return cls(**values)

    def check(self) -> None:
        """Raise ``TLSError`` unless every file given loads as what it must be."""
        if self.enabled:
            self.server_context()
            return
        given = [_named(name) for name in ("keyfile", "ca_certs") if getattr(self, name)]
        if given:
            verb = "needs" if len(given) == 1 else "need"
            raise TLSError(f"{' and '.join(given)} {verb} {_named('certfile')} too")

    def server_context(self) -> ssl.SSLContext:
        """The context the HTTP faces wrap connections in: TLS 1.2 or later; with
        ``ca_certs``, a client without a certificate signed by it fails the handshake.
        Only ``ca_certs`` is trusted for clients, never the system's CAs."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        for name in TLS_ENV:
            _readable(name, getattr(self, name))
        try:
            # An encrypted key would prompt on the terminal: refuse it instead.
            context.load_cert_chain(self.certfile, self.keyfile or None, password=_no_password)
        except (ssl.SSLError, ValueError) as exc:
            raise TLSError(_chain_error(self, exc)) from None
        if self.ca_certs:
            try:
                context.load_verify_locations(cafile=self.ca_certs)
            except ssl.SSLError:
                raise TLSError(
                    f"{_named('ca_certs')} {self.ca_certs}: no PEM CA certificate in it"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def pem(self) -> tuple[bytes, bytes, bytes | None]:
        """(private key, certificate chain, client CA or None) as PEM bytes, for gRPC."""
        chain = Path(self.certfile).read_bytes()
        key = Path(self.keyfile).read_bytes() if self.keyfile else chain
        ca = Path(self.ca_certs).read_bytes() if self.ca_certs else None
        return key, chain, ca


def _named(name: str) -> str:
    flag, variable = TLS_ENV[name]
    return f"{flag} ({variable})"


def _readable(name: str, path: str) -> None:
    if not path:
        return
    if not os.path.isfile(path):
        what = "not a file" if os.path.exists(path) else "no such file"
        raise TLSError(f"{_named(name)} {path}: {what}")
    if not os.access(path, os.R_OK):
        raise TLSError(f"{_named(name)} {path}: not readable by this process")


def _no_password() -> str:
    raise TLSError("the private key is encrypted: give it unencrypted (a file only mlserve reads)")


def _chain_error(settings: TLSSettings, exc: Exception) -> str:
    """Which file is wrong, as far as its text tells."""
    cert, key = settings.certfile, settings.keyfile or settings.certfile
    key_flag = _named("keyfile" if settings.keyfile else "certfile")
    if isinstance(exc, TLSError):
        return f"{key_flag} {key}: {exc}"
    if b"-----BEGIN CERTIFICATE-----" not in Path(cert).read_bytes():
        return f"{_named('certfile')} {cert}: no PEM certificate in it"
    if b"PRIVATE KEY-----" not in Path(key).read_bytes():
        if not settings.keyfile:
            return f"{_named('certfile')} {cert} holds no private key: give {_named('keyfile')}"
        return f"{key_flag} {key}: no PEM private key in it"
    reason = getattr(exc, "reason", None) or str(exc)
    if reason == "KEY_VALUES_MISMATCH":
        return f"{key_flag} {key} is not the key of {_named('certfile')} {cert}"
    return f"{_named('certfile')} {cert} and its key {key}: cannot load them ({reason})"
