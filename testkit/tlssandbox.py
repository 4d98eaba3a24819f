"""Throwaway TLS files for a broker on this machine: a CA, a broker certificate for 127.0.0.1 and
localhost, and a client certificate, as PEM files made with openssl. For the security tests and
bench/security.py, like `sandbox.sql` for MariaDB; never for a real deployment."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_certs(d: Path) -> Path:
    """A CA, a broker certificate for 127.0.0.1 and a client certificate, as PEM files in `d`."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=binlake test CA")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("broker", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext")
        (d / f"{name}.pem").write_text((d / f"{name}.key").read_text() + (d / f"{name}.crt").read_text())
    return d
