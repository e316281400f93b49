"""Error mapping and call bounds the mutation run found unpinned (see
docs/mutation-testing.md). Through ``map_error`` and ``RetryPolicy``, the
documented names of ``redismem.core.connection``."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.exceptions as rexc

from redismem import BackendError, BackendFull, BackendUnavailable, CorruptData, InvalidInput
from redismem.core.connection import RetryPolicy, map_error

URL = "redis://user:secret@127.0.0.1:6379/0"


def test_corrupt_replies_of_the_scripts_name_the_key_and_the_whole_reason() -> None:
    exc = rexc.ResponseError("REDISMEM_CORRUPT ns:{u:a}:s:b:entries entry records are missing")
    error = map_error(exc, URL)
    assert isinstance(error, CorruptData)
    assert error.key == "ns:{u:a}:s:b:entries"
    assert error.reason.startswith("entry records are missing; ")
    assert "clear it" in error.reason


def test_a_corrupt_reply_without_details_still_maps() -> None:
    error = map_error(rexc.ResponseError("REDISMEM_CORRUPT"), URL)
    assert isinstance(error, CorruptData)
    assert error.key == ""


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (
            rexc.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
            BackendFull,
        ),
        (rexc.OutOfMemoryError("OOM command not allowed"), BackendFull),
        (rexc.ResponseError("LOADING Redis is loading the dataset in memory"), BackendUnavailable),
        (
            rexc.ResponseError("READONLY You can't write against a read only replica."),
            BackendUnavailable,
        ),
        (
            rexc.ResponseError("MASTERDOWN Link with MASTER is down"),
            BackendUnavailable,
        ),
        (rexc.ResponseError("TRYAGAIN Multiple keys request during rehashing"), BackendUnavailable),
        (rexc.ResponseError("CLUSTERDOWN The cluster is down"), BackendUnavailable),
        (rexc.ResponseError("NOPERM this user has no permissions"), BackendError),
        (rexc.ResponseError("WRONGPASS invalid username-password pair"), BackendError),
        (rexc.AuthenticationError("invalid password"), BackendError),
        (
            rexc.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
            BackendError,
        ),
        (rexc.ResponseError("ERR unknown command"), BackendError),
        (rexc.ConnectionError("Connection refused"), BackendUnavailable),
        (rexc.TimeoutError("Timeout reading from socket"), BackendUnavailable),
        (ConnectionResetError("reset by peer"), BackendUnavailable),
        (TimeoutError(), BackendUnavailable),
    ],
)
def test_redis_errors_map_to_their_kind(exc: BaseException, kind: type[Exception]) -> None:
    error = map_error(exc, URL)
    assert type(error) is kind
    assert "secret" not in str(error)  # the password is masked
    assert "127.0.0.1:6379" in str(error)


def test_credential_errors_say_what_to_check() -> None:
    error = map_error(rexc.ResponseError("WRONGPASS invalid username-password pair"), URL)
    assert "refused the credentials (check the user and password in the URL)" in str(error)
    assert str(error).endswith("WRONGPASS invalid username-password pair")


def test_transient_replies_carry_the_servers_text() -> None:
    error = map_error(rexc.ResponseError("LOADING Redis is loading the dataset"), URL)
    assert str(error).endswith("is not ready: LOADING Redis is loading the dataset")


def test_a_timeout_without_text_says_so() -> None:
    error = map_error(TimeoutError(), URL)
    assert str(error).endswith("is unavailable: no answer in time")


def test_redismem_errors_map_to_themselves_and_others_to_none() -> None:
    for own in (InvalidInput("x"), CorruptData("k", "r"), BackendUnavailable("down")):
        assert map_error(own, URL) is own
    assert map_error(KeyError("x"), URL) is None
    assert map_error(ValueError("x"), URL) is None


def test_the_documented_default_bounds() -> None:
    # README: retries back off exponentially from 0.1 s, capped at 2 s; with
    # the defaults (3 retries of 5 s attempts) every call ends within 20.7 s.
    policy = RetryPolicy(URL)
    assert (policy.attempt_timeout, policy.retries) == (5.0, 3)
    assert [policy.backoff(n) for n in range(1, 8)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    )
    assert policy.bound() == pytest.approx(20.7)
    assert RetryPolicy(URL, attempt_timeout=1.0, retries=0).bound() == pytest.approx(1.0)
    assert RetryPolicy(URL, attempt_timeout=1.0, retries=2).bound() == pytest.approx(3.3)


def _fast(retries: int, attempt_timeout: float = 5.0) -> RetryPolicy:
    return RetryPolicy(
        URL, attempt_timeout=attempt_timeout, retries=retries, backoff_base=0.001, backoff_cap=0.002
    )


@pytest.mark.parametrize("retries", [0, 1, 3])
async def test_a_call_is_attempted_retries_plus_one_times(retries: int) -> None:
    attempts = 0

    async def unreachable() -> None:
        nonlocal attempts
        attempts += 1
        raise rexc.ConnectionError("Connection refused")

    with pytest.raises(BackendUnavailable) as caught:
        await _fast(retries).run(unreachable)
    assert attempts == retries + 1
    assert isinstance(caught.value.__cause__, rexc.ConnectionError)


async def test_a_call_that_recovers_on_its_last_retry_succeeds() -> None:
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts <= 2:
            raise rexc.ResponseError("LOADING Redis is loading")
        return "ok"

    assert await _fast(2).run(flaky) == "ok"
    assert attempts == 3


async def test_errors_a_retry_cannot_fix_are_raised_at_once() -> None:
    attempts = 0

    async def refused() -> None:
        nonlocal attempts
        attempts += 1
        raise rexc.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")

    with pytest.raises(BackendError):
        await _fast(3).run(refused)
    assert attempts == 1


async def test_each_attempt_is_cut_at_the_attempt_timeout() -> None:
    attempts = 0

    async def stalled() -> None:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(30)

    started = time.monotonic()
    policy = _fast(1, attempt_timeout=0.05)
    with pytest.raises(BackendUnavailable):
        await policy.run(stalled)
    assert attempts == 2
    assert time.monotonic() - started < policy.bound() + 1.0
