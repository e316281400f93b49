"""URL forms on real servers: db number, ACL user and password, unix socket, TLS."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from helpers import free_port

from redismem import Memory, StoreError

REDIS_BIN = shutil.which("redis-server")
OPENSSL = shutil.which("openssl")


def _wait_for(client: redis.Redis, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                assert process.poll() is None, "redis-server exited"
                assert time.monotonic() < deadline, "redis-server did not answer"
                time.sleep(0.05)
    finally:
        client.close()


Starter = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[Starter]:
    """A starter of redis-servers with extra arguments, stopped at teardown."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        assert REDIS_BIN, "redis-server is needed"
        process = subprocess.Popen(
            [REDIS_BIN, "--save", "", "--appendonly", "no", "--dir", str(tmp_path), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


async def _round_trip(url: str) -> Memory:
    memory = await Memory.connect(url, namespace=f"conn-{uuid.uuid4().hex[:8]}")
    await memory.write([{"role": "user", "content": "héllo"}], session_id="s", user_id="u")
    assert [m.content for m in await memory.read(session_id="s", user_id="u")] == ["héllo"]
    return memory


async def test_db_number_and_acl_user_in_the_url(redis_url: str) -> None:
    admin = redis.Redis.from_url(redis_url)
    user, password = f"agent{uuid.uuid4().hex[:6]}", "s3cr:t/pw"
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    base = redis_url.rsplit("/", 1)[0].replace("redis://", "")
    quoted = password.replace(":", "%3A").replace("/", "%2F")
    try:
        memory = await _round_trip(f"redis://{user}:{quoted}@{base}/5")
        namespace = memory.layout.namespace
        in_db5 = redis.Redis.from_url(f"redis://{base}/5")
        assert list(in_db5.scan_iter(match=f"{namespace}:*"))
        assert not list(admin.scan_iter(match=f"{namespace}:*"))  # db 0 untouched
        await memory.clear_all()
        await memory.aclose()
        in_db5.close()

        with pytest.raises(StoreError, match="refused the credentials"):
            await Memory.connect(f"redis://{user}:wrong@{base}/5")
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()


async def test_unix_socket_url(private_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    socket_path = tmp_path / "redis.sock"
    process = private_server(
        "--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700"
    )
    _wait_for(redis.Redis(unix_socket_path=str(socket_path)), process)
    memory = await _round_trip(f"unix://{socket_path}?db=2")
    await memory.aclose()


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate and key for 127.0.0.1."""
    if OPENSSL is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_url(private_server: Starter, tls_cert: tuple[Path, Path]) -> None:
    cert, key = tls_cert
    port = free_port()
    process = private_server(
        "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert),
        "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
    )  # fmt: skip
    _wait_for(redis.Redis(port=port, ssl=True, ssl_ca_certs=str(cert)), process)
    memory = await _round_trip(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}")
    await memory.aclose()
