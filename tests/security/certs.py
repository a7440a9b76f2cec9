"""The security tests' certificates, made at run time with trustme (nothing is committed).

:func:`make_pki` writes into a directory:

- a trusted CA (``ca.pem``) and, issued by it, a server certificate for ``127.0.0.1`` and
  ``localhost``, a client certificate (for mutual TLS and RabbitMQ's EXTERNAL login), an expired
  server certificate and a server certificate for another host name (``wrong.example``);
- an untrusted CA (``untrusted-ca.pem``): a client that trusts only it must refuse every server here.

Each certificate is a :class:`Pair` of PEM files: ``cert`` (the leaf and its chain), ``key``, and
``both`` (key and chain in one file, for servers and clients that take one file).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import trustme

__all__ = ["CLIENT_NAME", "WRONG_HOST", "Pair", "Pki", "make_pki"]

#: The common name of the client certificate (RabbitMQ's EXTERNAL login takes it as the user name).
CLIENT_NAME = "polybroker-client"
#: The only name the wrong-host certificate is valid for.
WRONG_HOST = "wrong.example"


@dataclass(frozen=True)
class Pair:
    """One certificate as PEM files."""

    #: The certificate followed by its chain up to (not including) the CA.
    cert: Path
    #: Its private key (unencrypted).
    key: Path
    #: Key and chain in one file.
    both: Path


@dataclass(frozen=True)
class Pki:
    """Every certificate file the security tests use."""

    directory: Path
    #: The CA the clients trust.
    ca: Path
    #: A CA nobody here trusts (a client given it must refuse the servers).
    untrusted_ca: Path
    #: The servers' certificate: 127.0.0.1 and localhost, issued by :attr:`ca`.
    server: Pair
    #: A client certificate, common name :data:`CLIENT_NAME`, issued by :attr:`ca`.
    client: Pair
    #: A client certificate issued by the untrusted CA (mutual TLS must refuse it).
    untrusted_client: Pair
    #: A server certificate for 127.0.0.1 and localhost that expired yesterday.
    expired: Pair
    #: A server certificate valid only for :data:`WRONG_HOST`.
    wrong_host: Pair


def _write(directory: Path, name: str, leaf: trustme.LeafCert) -> Pair:
    cert = directory / f"{name}.pem"
    key = directory / f"{name}.key"
    both = directory / f"{name}-both.pem"
    chain = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
    cert.write_bytes(chain)
    key.write_bytes(leaf.private_key_pem.bytes())
    both.write_bytes(leaf.private_key_pem.bytes() + chain)
    for path in (key, both):
        path.chmod(0o600)
    return Pair(cert, key, both)


def make_pki(directory: Path) -> Pki:
    """Make the CAs and certificates under ``directory`` (RSA keys: every server here reads them)."""
    directory.mkdir(parents=True, exist_ok=True)
    rsa = trustme.KeyType.RSA
    ca = trustme.CA(organization_name="polybroker test CA", key_type=rsa)
    untrusted = trustme.CA(organization_name="polybroker untrusted CA", key_type=rsa)
    now = datetime.datetime.now(datetime.UTC)
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    untrusted.cert_pem.write_to_path(str(directory / "untrusted-ca.pem"))
    return Pki(
        directory=directory,
        ca=directory / "ca.pem",
        untrusted_ca=directory / "untrusted-ca.pem",
        server=_write(directory, "server", ca.issue_cert("127.0.0.1", "localhost", key_type=rsa)),
        client=_write(directory, "client", ca.issue_cert(CLIENT_NAME, common_name=CLIENT_NAME, key_type=rsa)),
        untrusted_client=_write(
            directory,
            "untrusted-client",
            untrusted.issue_cert(CLIENT_NAME, common_name=CLIENT_NAME, key_type=rsa),
        ),
        expired=_write(
            directory,
            "expired",
            ca.issue_cert(
                "127.0.0.1",
                "localhost",
                not_before=now - datetime.timedelta(days=30),
                not_after=now - datetime.timedelta(days=1),
                key_type=rsa,
            ),
        ),
        wrong_host=_write(directory, "wrong-host", ca.issue_cert(WRONG_HOST, key_type=rsa)),
    )
