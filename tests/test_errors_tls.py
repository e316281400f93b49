"""A TLS certificate the client does not trust is a configuration error,
raised at once, never retried as an outage (issue 19, defect 10).

A real ``redis-server`` (Debian's is built with TLS) serves TLS with a
self-signed certificate made here by the ``openssl`` CLI. A client that does
not trust it gets ``ConfigurationError`` after one connection attempt; one
that trusts it (``?ssl_ca_certs=``) reads and writes; ``redismem worker``
stops with one line instead of waiting for Redis.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from conftest import MemoryFactory, RedisServer
from helpers import client_kill_storm, free_port, redismem_command

from redismem import BackendUnavailable, ConfigurationError, Memory

OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl CLI to make a cert")


class TlsServer:
    def __init__(self, server: RedisServer, tls_port: int, cert: Path) -> None:
        self.server = server
        self.tls_port = tls_port
        self.cert = cert

    @property
    def untrusted_url(self) -> str:
        return f"rediss://localhost:{self.tls_port}/0"

    @property
    def trusted_url(self) -> str:
        return f"{self.untrusted_url}?ssl_ca_certs={self.cert}"

    def connections_received(self) -> int:
        """Connections the server accepted so far (TLS or not), asked on its
        plain port."""
        client = redis.Redis.from_url(self.server.url)
        try:
            return int(client.info("stats")["total_connections_received"])
        finally:
            client.close()


@pytest.fixture
def tls_server(tmp_path: Path, redis_server_factory: Callable[..., RedisServer]) -> TlsServer:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    assert OPENSSL is not None
    command = [OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run(
        [*command, "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    tls_port = free_port()
    server = redis_server_factory(
        extra_args=(
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-auth-clients",
            "no",
        )
    )
    return TlsServer(server, tls_port, cert)


async def test_an_untrusted_certificate_fails_at_once(
    tls_server: TlsServer, memory_factory: MemoryFactory
) -> None:
    """``Memory.connect`` (it pings) raises ``ConfigurationError`` after one
    attempt; an outage would have been tried ``retries + 1`` = 6 times."""
    for _ in range(2):
        before = tls_server.connections_received()
        with pytest.raises(ConfigurationError) as caught:
            await memory_factory(tls_server.untrusted_url, retries=5, index=False)
        assert tls_server.connections_received() - before == 1
        assert not isinstance(caught.value, BackendUnavailable)
        assert "TLS handshake failed" in str(caught.value)
        assert "certificate verify failed" in str(caught.value)
        causes, cause = [], caught.value.__cause__
        while cause is not None:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        assert any(isinstance(c, ssl.SSLCertVerificationError) for c in causes)


async def test_a_trusting_client_reads_and_writes(
    tls_server: TlsServer, memory_factory: MemoryFactory
) -> None:
    """The same server and certificate work once the client trusts it: the
    failure above is the trust, nothing else."""
    mem: Memory = await memory_factory(tls_server.trusted_url, index=False)
    await mem.write([{"role": "user", "content": "over TLS"}], session_id="s")
    assert [m.content for m in await mem.read(session_id="s")] == ["over TLS"]
    await mem.clear_all()


async def test_a_killed_tls_connection_is_still_an_outage(
    tls_server: TlsServer, memory_factory: MemoryFactory
) -> None:
    """Only TLS errors no retry fixes are configuration errors: TLS
    connections killed mid-call (EOF, reset) are retried, and every write
    lands once."""
    mem: Memory = await memory_factory(
        tls_server.trusted_url, index=False, retries=20, socket_timeout=2.0
    )
    written = 0
    async with client_kill_storm(tls_server.server.url, every=0.02) as kills:
        while kills[0] < 20:  # the client's connection killed 20 times at least
            await mem.write([{"role": "user", "content": f"m{written}"}], session_id="s")
            written += 1
    stored = [m.content for m in await mem.read(session_id="s")]
    assert stored == [f"m{i}" for i in range(written)]
    await mem.clear_all()


def test_a_worker_stops_at_once_on_an_untrusted_certificate(
    tls_server: TlsServer, namespace: str
) -> None:
    """Without the fix the worker waited 30 s for Redis, then exited; now it
    exits after one attempt with one line naming the TLS problem."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(REDISMEM_URL=tls_server.untrusted_url, REDISMEM_NAMESPACE=namespace)
    before = tls_server.connections_received()
    started = time.monotonic()
    result = subprocess.run(
        [*redismem_command(), "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "TLS handshake failed" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    # One attempt (waiting for Redis tries once a second, for 30 s).
    assert tls_server.connections_received() - before == 1
    assert elapsed < 30, elapsed
