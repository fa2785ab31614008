"""Certificates for the TLS tests, made with the openssl command line in a directory: a
CA, the daemon's certificate (localhost, 127.0.0.1), and client certificates the daemon
accepts or refuses."""

from __future__ import annotations

import pathlib
import re
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Leaf:
    cert_file: str
    key_file: str


@dataclass(frozen=True)
class Pki:
    dir: pathlib.Path
    #: The CA of the daemon's certificate and of the client certificates.
    ca_file: str
    #: A CA nothing here is signed by but ``other_ca_leaf``.
    other_ca_file: str
    server: Leaf
    #: SAN DNS:gateway.test, extended key usage clientAuth: the configured caller.
    good: Leaf
    #: As ``good``, valid from 2020-01-01 to 2020-01-02.
    expired: Leaf
    #: As ``good``, valid from 2090.
    not_yet_valid: Leaf
    #: As ``good``, signed by the other CA.
    other_ca_leaf: Leaf
    #: As ``good``, extended key usage serverAuth only.
    server_auth_only: Leaf
    #: An X.509 v1 certificate (no extensions at all); ``None`` where openssl makes none.
    v1: Leaf | None

    def daemon_toml(self) -> str:
        """The daemon's ``[tls]`` for mutual TLS with this CA, and the caller ``good`` names."""
        return (
            "[tls]\n"
            f'cert_file = "{self.server.cert_file}"\n'
            f'key_file = "{self.server.key_file}"\n'
            f'client_ca_file = "{self.ca_file}"\n'
            "\n"
            "[callers.gateway]\n"
            'san_dns = ["gateway.test"]\n'
            'rpcs = ["Admit", "RecordAttempt", "Verify", "ClearAttempts"]\n'
            'realms = ["*"]\n'
        )


def _extensions(san: str, eku: str) -> str:
    return (
        f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectAltName={san}\nextendedKeyUsage={eku}\n"
    )


def make_pki(dir: pathlib.Path) -> Pki:
    """Makes every certificate of :class:`Pki` in ``dir`` (an empty directory)."""

    def openssl(*args: str) -> str:
        return subprocess.run(
            ["openssl", *args], cwd=dir, check=True, capture_output=True, text=True, timeout=60
        ).stdout

    def key(name: str) -> None:
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")

    def leaf_of(name: str) -> Leaf:
        return Leaf(str(dir / f"{name}.pem"), str(dir / f"{name}.key"))

    def ca(name: str) -> None:
        key(name)
        openssl(
            "req", "-x509", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-days", "30",
            "-out", f"{name}.pem", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip

    def csr(name: str) -> None:
        key(name)
        openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr")

    def leaf(name: str, issuer: str, san: str, eku: str) -> Leaf:
        csr(name)
        (dir / f"{name}.ext").write_text(_extensions(san, eku))
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem", "-CAkey", f"{issuer}.key",
            "-CAcreateserial", "-days", "30", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
        )  # fmt: skip
        return leaf_of(name)

    def dated(name: str, start: str, end: str) -> Leaf:
        # `openssl x509 -req` sets no dates in the past or future before OpenSSL 3.4
        # (-not_before/-not_after); `openssl ca` does with -startdate/-enddate.
        csr(name)
        db = dir / f"{name}.db"
        db.mkdir()
        (db / "index.txt").write_text("")
        (db / "serial").write_text("1000\n")
        (dir / f"{name}.cnf").write_text(
            "[ca]\ndefault_ca = test\n[test]\n"
            f"database = {db}/index.txt\nserial = {db}/serial\nnew_certs_dir = {db}\n"
            "default_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n"
            "[leaf]\n" + _extensions("DNS:gateway.test", "clientAuth")
        )
        openssl(
            "ca", "-batch", "-config", f"{name}.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
            "-in", f"{name}.csr", "-out", f"{name}.pem", "-extensions", "leaf",
            "-startdate", start, "-enddate", end, "-notext",
        )  # fmt: skip
        return leaf_of(name)

    def v1() -> Leaf | None:
        # A certificate without extensions. OpenSSL 3.2 and later may add key
        # identifiers (and so make v3) unless told not to.
        csr("v1")
        (dir / "v1.ext").write_text("subjectKeyIdentifier = none\nauthorityKeyIdentifier = none\n")
        for extra in ([], ["-extfile", "v1.ext"]):
            try:
                openssl(
                    "x509", "-req", "-in", "v1.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                    "-days", "30", *extra, "-out", "v1.pem",
                )  # fmt: skip
            except subprocess.CalledProcessError:
                continue
            if re.search(r"Version: 1 \(0x0\)", openssl("x509", "-in", "v1.pem", "-noout", "-text")):
                return leaf_of("v1")
        return None

    ca("ca")
    ca("other-ca")
    return Pki(
        dir=dir,
        ca_file=str(dir / "ca.pem"),
        other_ca_file=str(dir / "other-ca.pem"),
        server=leaf("server", "ca", "DNS:localhost,IP:127.0.0.1", "serverAuth"),
        good=leaf("good", "ca", "DNS:gateway.test", "clientAuth"),
        expired=dated("expired", "20200101000000Z", "20200102000000Z"),
        not_yet_valid=dated("not-yet-valid", "20900101000000Z", "20900102000000Z"),
        other_ca_leaf=leaf("other-ca-leaf", "other-ca", "DNS:gateway.test", "clientAuth"),
        server_auth_only=leaf("server-auth-only", "ca", "DNS:gateway.test", "serverAuth"),
        v1=v1(),
    )
