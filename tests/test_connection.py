"""URL forms on real servers (db number, ACL user and password, unix socket, TLS),
and which connection errors are retried."""

from __future__ import annotations

import asyncio
import copy
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

from redismem import BackendError, BackendUnavailable, ConfigurationError, InvalidInput, Memory
from redismem.core.connection import RetryPolicy, map_error, tls_failure
from redismem.workers.connections import outage_policy

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
    """The workers' pool rides out outages for minutes, but a certificate
    that fails verification fails at once."""
    retry = outage_policy("rediss://h:1/0", seconds=60).for_redis_py()
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


def _quick(*, retries: int | None = 3, within: float | None = None) -> RetryPolicy:
    return RetryPolicy(
        "redis://h:1/0", retries=retries, within=within, backoff_base=0.01, backoff_cap=0.02
    )


async def test_a_policy_bounded_by_time_retries_until_its_time_is_up() -> None:
    """``within``: retries as many as fit, none starting later than
    ``within`` seconds after the first failure; then the mapped error."""
    policy = _quick(retries=None, within=0.3)
    attempts = 0

    async def unreachable() -> None:
        nonlocal attempts
        attempts += 1
        raise redis.ConnectionError("Connection refused")

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(BackendUnavailable) as caught:
        await policy.run(unreachable)
    took = loop.time() - started
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    # Waits of at most 0.02 s over 0.3 s: far more than 3 tries, and the
    # last wait was cut to what was left.
    assert attempts > 5
    assert 0.3 <= took < 0.3 + 5.0
    # A count bound still holds beside a time bound.
    attempts = 0
    with pytest.raises(BackendUnavailable):
        await _quick(retries=2, within=60).run(unreachable)
    assert attempts == 3


def test_a_policy_that_would_never_give_up_is_refused() -> None:
    with pytest.raises(InvalidInput, match="retries or within"):
        RetryPolicy("redis://h:1/0", retries=None)
    outage = outage_policy("redis://h:1/0", seconds=300)
    assert outage.bound() == float("inf")  # each attempt keeps its own time (sockets)
    assert [outage.backoff(n) for n in range(1, 6)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0])
    bounded = RetryPolicy("redis://h:1/0", attempt_timeout=1.0, retries=None, within=10.0)
    assert bounded.bound() == pytest.approx(12.0)


async def test_the_policy_as_redis_py_retry_keeps_redis_py_s_contract() -> None:
    """redis-py hands its ``Retry`` the command and a failure handler (which
    drops the connection), retries only its own errors, and deep-copies the
    object per connection; what it raises in the end is redis-py's error."""
    retry = copy.deepcopy(_quick(retries=2).for_redis_py())
    failed: list[BaseException] = []

    async def fail(error: BaseException) -> None:
        failed.append(error)

    async def reset() -> None:
        raise redis.ConnectionError("Connection reset by peer")

    with pytest.raises(redis.ConnectionError, match="reset by peer"):
        await retry.call_with_retry(reset, fail)
    assert len(failed) == 3  # every failed attempt, the last too

    async def wrong_type() -> None:
        raise redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")

    failed.clear()
    with pytest.raises(redis.ResponseError):  # not redis-py's to retry: raised at once
        await retry.call_with_retry(wrong_type, fail)
    assert failed == []

    async def refused_password() -> None:
        raise redis.AuthenticationError("invalid username-password pair")

    with pytest.raises(redis.AuthenticationError):  # a ConnectionError, yet never retried
        await retry.call_with_retry(refused_password, fail)
    assert len(failed) == 1
