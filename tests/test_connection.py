"""URL forms on real servers (db number, ACL user and password, unix socket, TLS),
and which connection errors are retried."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from helpers import free_port

from redismem import BackendError, BackendUnavailable, ConfigurationError, Memory
from redismem.core.connection import map_error, tls_failure
from redismem.workers.connections import OutageRetry

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

        with pytest.raises(BackendError, match="refused the credentials"):
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


# -- error mapping: what is retried -----------------------------------------


def _raised_while_handling(error: BaseException, cause: BaseException) -> BaseException:
    """``error`` raised inside ``except`` of ``cause``, as redis-py raises its
    ConnectionError around a socket or TLS error (``__context__``, no ``from``)."""
    try:
        try:
            raise cause
        except BaseException:
            raise error  # noqa: B904 - the point: an implicit context
    except BaseException as exc:
        return exc


def test_a_watch_lost_with_its_connection_is_an_outage() -> None:
    """redis-py reports a connection lost while arq's enqueue watched a job
    key as ``WatchError``; it is retried, like the lost connection it is. A
    watched key that changed stays an error reply (arq handles it)."""
    lost = _raised_while_handling(
        redis.WatchError("A ConnectionError occurred on while watching one or more keys"),
        redis.ConnectionError("Connection closed by server."),
    )
    assert isinstance(map_error(lost, "redis://h:1/0"), BackendUnavailable)
    changed = redis.WatchError("Watched variable changed.")
    error = map_error(changed, "redis://h:1/0")
    assert isinstance(error, BackendError) and not isinstance(error, BackendUnavailable)


def test_which_tls_errors_are_configuration_errors() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate")
    handshake = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    for cause in (verify, handshake):
        wrapped = _raised_while_handling(redis.ConnectionError("Error 1 connecting"), cause)
        assert isinstance(map_error(wrapped, "rediss://h:1/0"), ConfigurationError)
        assert tls_failure(wrapped) is cause
    # A connection lost during a handshake is an outage: retried.
    for lost in (ssl.SSLEOFError(8, "EOF occurred"), ssl.SSLZeroReturnError(6, "closed")):
        wrapped = _raised_while_handling(redis.ConnectionError("Error 8 connecting"), lost)
        assert isinstance(map_error(wrapped, "rediss://h:1/0"), BackendUnavailable)
        assert tls_failure(wrapped) is None


async def test_the_workers_pool_does_not_retry_a_tls_failure() -> None:
    """``OutageRetry`` rides out outages for minutes, but a certificate that
    fails verification fails at once."""
    retry = OutageRetry(seconds=60)
    calls = 0

    async def untrusted() -> None:
        nonlocal calls
        calls += 1
        raise _raised_while_handling(
            redis.ConnectionError("Error 1 connecting"),
            ssl.SSLCertVerificationError(1, "certificate verify failed"),
        )

    async def ignore(_: BaseException) -> None:
        return None

    with pytest.raises(redis.ConnectionError):
        await retry.call_with_retry(untrusted, ignore)
    assert calls == 1

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise redis.ConnectionError("Connection reset by peer")
        return "ok"

    calls = 0
    assert await retry.call_with_retry(flaky, ignore) == "ok"
    assert calls == 3
