"""goodput's client settings for a production Temporal: TLS with the site's CA, mTLS with a client
certificate, a server name other than the address dialled, and an API key. The dev server
speaks plain gRPC, so a TLS-terminating proxy on loopback (the test's own CA, server and client
certificates) stands in front of it, the way a load balancer or Temporal's own TLS would."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import socketserver
import ssl
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import SecretStr, ValidationError
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

from goodput.config import Settings, TemporalTlsSettings
from goodput.service.incidents import ServiceUnavailableError
from workers.client import connect_from

pytestmark = pytest.mark.temporal
NOW = datetime.datetime.now(datetime.UTC)


def _pair(name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
          sans: list[x509.GeneralName], *, ca: bool = False) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = x509.CertificateBuilder().subject_name(subject)
    builder = builder.issuer_name(issuer[0].subject if issuer else subject).public_key(key.public_key())
    builder = builder.serial_number(x509.random_serial_number())
    builder = builder.not_valid_before(NOW - datetime.timedelta(hours=1))
    builder = builder.not_valid_after(NOW + datetime.timedelta(days=1))
    builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def _write(directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = _pair("goodput test CA", None, [], ca=True)
    other_ca = _pair("someone else's CA", None, [], ca=True)
    server = _pair("temporal.internal", ca, [x509.DNSName("temporal.internal"),
                                              x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client = _pair("goodput-worker", ca, [x509.DNSName("goodput-worker")])
    files = {"ca": _write(d, "ca", *ca)[0], "other_ca": _write(d, "other-ca", *other_ca)[0]}
    files["server_crt"], files["server_key"] = _write(d, "server", *server)
    files["client_crt"], files["client_key"] = _write(d, "client", *client)
    return files


@contextlib.asynccontextmanager
async def tls_proxy(backend: str, pki: dict[str, Path], *, require_client_cert: bool) -> AsyncIterator[str]:
    """TLS on 127.0.0.1 in front of the plain dev server; bytes are piped as they come. Plain
    threads and blocking sockets, off the test's event loop (asyncio's SSL transport in the same
    loop as the Temporal client upset CPython 3.11's parser afterwards)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki["server_crt"], pki["server_key"])
    context.set_alpn_protocols(["h2"])
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki["ca"])
    host, _, port = backend.rpartition(":")

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                tls = context.wrap_socket(self.request, server_side=True)
            except (ssl.SSLError, OSError):
                return  # a refused handshake is the point of some tests
            with tls, socket.create_connection((host, int(port))) as upstream:
                other = threading.Thread(target=pipe, args=(upstream, tls), daemon=True)
                other.start()
                pipe(tls, upstream)
                other.join(timeout=5)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()


def settings(address: str, **tls: object) -> Settings:
    return Settings(temporal_address=address, temporal_tls=TemporalTlsSettings.model_validate(tls))


async def _works(s: Settings) -> None:
    client = await connect_from(s)
    await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))


async def test_tls_with_the_sites_ca_and_a_server_name(temporal_address: str, pki: dict[str, Path]) -> None:
    async with tls_proxy(temporal_address, pki, require_client_cert=False) as address:
        await _works(settings(address, enabled=True, ca_file=pki["ca"]))
        await _works(settings(address, enabled=True, ca_file=pki["ca"], server_name="temporal.internal"))
        with pytest.raises(ServiceUnavailableError):  # a certificate of another CA is refused
            await _works(settings(address, enabled=True, ca_file=pki["other_ca"]))
        with pytest.raises(ServiceUnavailableError):  # and so is plain gRPC to a TLS port
            await _works(settings(address))


async def test_mtls_needs_the_client_certificate(temporal_address: str, pki: dict[str, Path]) -> None:
    async with tls_proxy(temporal_address, pki, require_client_cert=True) as address:
        await _works(settings(address, enabled=True, ca_file=pki["ca"], cert_file=pki["client_crt"],
                              key_file=pki["client_key"]))
        with pytest.raises(ServiceUnavailableError):
            await _works(settings(address, enabled=True, ca_file=pki["ca"]))


async def test_an_api_key_rides_on_tls(temporal_address: str, pki: dict[str, Path]) -> None:
    async with tls_proxy(temporal_address, pki, require_client_cert=False) as address:
        s = settings(address, enabled=True, ca_file=pki["ca"]).model_copy(
            update={"temporal_api_key": SecretStr("key-" + "k" * 30)})
        client = await connect_from(s)
        assert client.api_key == "key-" + "k" * 30
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))


async def test_bad_tls_settings_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cert_file and key_file go together"):
        TemporalTlsSettings(enabled=True, cert_file=tmp_path / "c.crt")
    missing = settings("127.0.0.1:1", enabled=True, ca_file=tmp_path / "absent.pem")
    with pytest.raises(ServiceUnavailableError, match=r"temporal_tls\.ca_file .*absent\.pem"):
        await connect_from(missing)
