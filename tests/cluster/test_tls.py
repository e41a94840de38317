"""A node reaches NATS over TLS (`--cluster tls://HOST:PORT`), against a real nats-server that
requires TLS, trusting its CA the system's way (SSL_CERT_FILE here). `nats://` to that server
is upgraded to TLS the same way, never sent in clear; a server whose certificate the node
cannot verify is refused: the node does not start, with the coded error."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.cluster.harness import StartDaemon, swarm_of, unique_swarm_bundle
from tests.cluster.natsd import free_ports, nats_server_or_skip

LOCAL = "127.0.0.1"
READY_WITHIN = 30.0
LOGIN = "n1:n1-secret"
"""The server's one user (a node needs credentials, README: Running on several machines)."""


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))  # fmt: skip


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
) -> x509.Certificate:  # fmt: skip
    """A day's certificate with the extensions Python 3.13's strict verification wants."""
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer.subject if issuer is not None else _name(subject))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if issuer is None:  # the CA
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                              content_commitment=False, key_encipherment=False,
                              data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False)  # fmt: skip
        builder = builder.add_extension(usage, critical=True)
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        address = x509.IPAddress(ipaddress.ip_address(LOCAL))
        builder = builder.add_extension(x509.SubjectAlternativeName([address]), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(root: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1, server key)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("goondan test CA", ca_key, None, ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(LOCAL, key, ca, ca_key)
    paths = root / "ca.pem", root / "server.pem", root / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    _write_key(key, paths[2])
    return paths


async def wait_ready(port: int, ca: Path) -> None:
    """Until the server answers over TLS (nothing to await in it: ask every 0.2 s, bounded)."""
    trust = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + READY_WITHIN
    while True:
        try:
            nc = await nats.connect(f"tls://{LOGIN}@{LOCAL}:{port}", tls=trust, connect_timeout=1,
                                    max_reconnect_attempts=0, allow_reconnect=False)  # fmt: skip
        except (OSError, nats.errors.Error, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
            continue
        await nc.close()
        return


@pytest.fixture(scope="module")
def tls_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """One JetStream server that speaks only TLS: (its port, the CA that signed it)."""
    binary = nats_server_or_skip()
    root = tmp_path_factory.mktemp("tlsnats")
    ca, cert, key = make_certificates(root)
    [port] = free_ports(1)
    with (root / "server.log").open("wb") as log:
        proc = subprocess.Popen(
            [binary, "-a", LOCAL, "-p", str(port), "-js", "-sd", str(root / "store"),
             "--tls", "--tlscert", str(cert), "--tlskey", str(key), "--user", "n1",
             "--pass", "n1-secret"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        asyncio.run(wait_ready(port, ca))
        yield port, ca
    finally:
        proc.kill()
        proc.wait(timeout=10)


def one_server_bundle(tmp_path: Path) -> Path:
    bundle = unique_swarm_bundle(tmp_path)
    yaml = bundle / "goondan.yaml"
    yaml.write_text(yaml.read_text().replace("replicas: 3", "replicas: 1"))
    return bundle


@pytest.mark.parametrize("scheme", ["tls", "nats"])
async def test_a_node_talks_to_nats_over_tls(
    start_daemon: StartDaemon, tls_nats: tuple[int, Path], tmp_path: Path, scheme: str
) -> None:
    port, ca = tls_nats
    bundle = one_server_bundle(tmp_path)
    async with asyncio.timeout(60):
        node = await start_daemon(
            bundle, swarm=swarm_of(bundle), state_root=tmp_path / "n1",
            args=("--cluster", f"{scheme}://{LOGIN}@{LOCAL}:{port}", "--node", "n1"),
            env={"SSL_CERT_FILE": str(ca)},
        )  # fmt: skip
        await node.wait_for("cluster_settled")
        reply = await node.send(f"over {scheme}", key="t1")
    assert reply.ok, reply.error
    assert reply.result["input"] == f"caller: over {scheme}"


async def test_a_server_the_node_cannot_verify_is_refused(
    start_daemon: StartDaemon, tls_nats: tuple[int, Path], tmp_path: Path
) -> None:
    port, _ = tls_nats
    bundle = one_server_bundle(tmp_path)
    stranger, _, _ = make_certificates(tmp_path)  # a CA that did not sign the server's
    async with asyncio.timeout(60):
        with pytest.raises(RuntimeError) as failed:
            await start_daemon(
                bundle, swarm=swarm_of(bundle), state_root=tmp_path / "n1",
                args=("--cluster", f"tls://{LOGIN}@{LOCAL}:{port}", "--node", "n1"),
                env={"SSL_CERT_FILE": str(stranger)},
            )  # fmt: skip
    assert "E_CLUSTER_UNAVAILABLE" in str(failed.value)
