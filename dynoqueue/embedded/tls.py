"""Throw-away TLS material for local servers: a CA and a server certificate for ``127.0.0.1``."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynoqueue.errors import RedisServerStartError


@dataclass(frozen=True)
class TlsFiles:
    """A CA certificate and a server certificate + key signed by it, as PEM files."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def client_options(self) -> dict[str, Any]:
        """redis-py keyword arguments of a client that trusts this CA (hostname 127.0.0.1)."""
        return {"ssl": True, "ssl_ca_certs": str(self.ca_file), "ssl_cert_reqs": "required"}

    def url_query(self) -> str:
        """The same as a URL query string, e.g. ``?ssl_ca_certs=/tmp/.../ca.crt``."""
        return f"?ssl_ca_certs={self.ca_file}&ssl_cert_reqs=required"


def make_tls_files(directory: str | Path, days: int = 2) -> TlsFiles:
    """Create a throw-away CA and a server certificate for ``127.0.0.1`` with ``openssl``.

    Args:
        directory: where to write ``ca.crt``, ``server.crt`` and ``server.key`` (created).
        days: validity in days.

    Returns:
        The :class:`TlsFiles`.

    Raises:
        RedisServerStartError: ``openssl`` is missing or failed (its output is in the message).
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RedisServerStartError("openssl is needed to make TLS certificates: "
                                    "apt-get install openssl")
    ca_key, ca_crt = folder / "ca.key", folder / "ca.crt"
    key, csr, crt = folder / "server.key", folder / "server.csr", folder / "server.crt"
    ext = folder / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n", encoding="ascii")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
         "-out", str(ca_crt), "-days", str(days), "-subj", "/CN=dynoqueue test CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(crt), "-days", str(days), "-extfile", str(ext)],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run([openssl, *step], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RedisServerStartError(f"openssl {step[0]} failed: {done.stderr.strip()}")
    return TlsFiles(ca_file=ca_crt, cert_file=crt, key_file=key)
