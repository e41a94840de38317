"""https through http-fetch: the connection goes to the vetted IP, while SNI and the certificate
check still use the URL's host name (a local CA made for this test, trusted via `caFile`)."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bundles.sdk import ToolFailed

from .conftest import FakeContext, call, load_tool

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

http = load_tool("tools/http_fetch.py")


def _cert(subject: str, issuer_key: Any, issuer: Any, key: Any, *, ca: bool) -> Any:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Python 3.13 verifies with VERIFY_X509_STRICT, which wants both key identifiers.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: Any) -> bytes:
    return bytes(cert.public_bytes(serialization.Encoding.PEM))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a throwaway CA and a certificate for `localhost`."""
    directory = tmp_path_factory.mktemp("pki")
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test CA", ca_key, None, ca_key, ca=True)
    leaf = _cert("localhost", ca_key, ca.subject, key, ca=False)
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server.key")
    paths[0].write_bytes(_pem(ca))
    paths[1].write_bytes(_pem(leaf))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


class Hello(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = f"host={self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def tls_port(pki: tuple[Path, Path, Path]) -> Iterator[int]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki[1], pki[2])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


async def test_https_keeps_the_name_for_sni_and_certificate_check(
    ctx: FakeContext, pki: tuple[Path, Path, Path], tls_port: int
) -> None:
    named = replace(ctx, config={"allowHosts": ["localhost"], "caFile": str(pki[0])})
    async with asyncio.timeout(15):
        out = await call(http, "get", named, {"url": f"https://localhost:{tls_port}/x"})
    assert (out["status"], out["body"]) == (200, f"host=localhost:{tls_port}")


async def test_https_to_an_address_the_certificate_does_not_name_fails(
    ctx: FakeContext, pki: tuple[Path, Path, Path], tls_port: int
) -> None:
    by_ip = replace(ctx, config={"allowHosts": ["127.0.0.1"], "caFile": str(pki[0])})
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(15):
            await call(http, "get", by_ip, {"url": f"https://127.0.0.1:{tls_port}/x"})
    assert info.value.code == "E_TOOL_HTTP"
    assert info.value.suggestion is not None and "caFile" in info.value.suggestion


async def test_an_untrusted_certificate_fails(ctx: FakeContext, tls_port: int) -> None:
    system_store = replace(ctx, config={"allowHosts": ["localhost"]})
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(15):
            await call(http, "get", system_store, {"url": f"https://localhost:{tls_port}/x"})
    assert info.value.code == "E_TOOL_HTTP"
    assert info.value.suggestion is not None and "caFile" in info.value.suggestion
