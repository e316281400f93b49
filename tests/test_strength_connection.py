"""Error mapping and call bounds the mutation run found unpinned (see
docs/mutation-testing.md). Through ``map_error`` and ``CallPolicy``, the
documented names of ``redismem.connection``."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.exceptions as rexc

from redismem import CorruptData, InvalidInput, StoreError, StoreFull, StoreUnavailable
from redismem.connection import CallPolicy, map_error

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
        (rexc.ResponseError("OOM command not allowed when used memory > 'maxmemory'."), StoreFull),
        (rexc.OutOfMemoryError("OOM command not allowed"), StoreFull),
        (rexc.ResponseError("LOADING Redis is loading the dataset in memory"), StoreUnavailable),
        (
            rexc.ResponseError("READONLY You can't write against a read only replica."),
            StoreUnavailable,
        ),
        (rexc.ResponseError("MASTERDOWN Link with MASTER is down"), StoreUnavailable),
        (rexc.ResponseError("TRYAGAIN Multiple keys request during rehashing"), StoreUnavailable),
        (rexc.ResponseError("CLUSTERDOWN The cluster is down"), StoreUnavailable),
        (rexc.ResponseError("NOPERM this user has no permissions"), StoreError),
        (rexc.ResponseError("WRONGPASS invalid username-password pair"), StoreError),
        (rexc.AuthenticationError("invalid password"), StoreError),
        (
            rexc.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
            StoreError,
        ),
        (rexc.ResponseError("ERR unknown command"), StoreError),
        (rexc.ConnectionError("Connection refused"), StoreUnavailable),
        (rexc.TimeoutError("Timeout reading from socket"), StoreUnavailable),
        (ConnectionResetError("reset by peer"), StoreUnavailable),
        (TimeoutError(), StoreUnavailable),
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
    for own in (InvalidInput("x"), CorruptData("k", "r"), StoreUnavailable("down")):
        assert map_error(own, URL) is own
    assert map_error(KeyError("x"), URL) is None
    assert map_error(ValueError("x"), URL) is None


def test_the_documented_default_bounds() -> None:
    # README: retries back off exponentially from 0.1 s, capped at 2 s; with
    # the defaults (3 retries of 5 s attempts) every call ends within 20.7 s.
    policy = CallPolicy(URL)
    assert (policy.attempt_timeout, policy.retries) == (5.0, 3)
    assert [policy.backoff(n) for n in range(1, 8)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    )
    assert policy.bound() == pytest.approx(20.7)
    assert CallPolicy(URL, attempt_timeout=1.0, retries=0).bound() == pytest.approx(1.0)
    assert CallPolicy(URL, attempt_timeout=1.0, retries=2).bound() == pytest.approx(3.3)


def _fast(retries: int, attempt_timeout: float = 5.0) -> CallPolicy:
    return CallPolicy(
        URL, attempt_timeout=attempt_timeout, retries=retries, backoff_base=0.001, backoff_cap=0.002
    )


@pytest.mark.parametrize("retries", [0, 1, 3])
async def test_a_call_is_attempted_retries_plus_one_times(retries: int) -> None:
    attempts = 0

    async def unreachable() -> None:
        nonlocal attempts
        attempts += 1
        raise rexc.ConnectionError("Connection refused")

    with pytest.raises(StoreUnavailable) as caught:
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

    with pytest.raises(StoreError):
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
    with pytest.raises(StoreUnavailable):
        await policy.run(stalled)
    assert attempts == 2
    assert time.monotonic() - started < policy.bound() + 1.0
