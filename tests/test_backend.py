"""The core object every feature takes: ``Backend``, and each user's epoch as a client saw it."""

from __future__ import annotations

from typing import Any

import pytest

from redismem import BackendError, InvalidInput, Memory
from redismem.core import epochs
from redismem.core.backend import Backend, backend_of
from redismem.core.connection import EpochMoved
from redismem.core.epochs import UserEpochs, in_epoch


async def test_a_memory_hands_its_backend_to_the_features(make_memory: Any) -> None:
    mem = await make_memory()
    backend = mem.backend
    assert isinstance(backend, Backend)
    assert backend_of(backend) is backend
    assert backend_of(mem) is backend
    assert mem.store._backend is backend
    assert backend.layout is mem.layout and backend.config is mem.config
    shown = repr(backend)
    assert shown.startswith("Backend(url=") and f"namespace={mem.layout.namespace!r}" in shown


def test_backend_of_refuses_what_holds_no_backend() -> None:
    with pytest.raises(InvalidInput, match="expected a Memory or a Backend, not object"):
        backend_of(object())  # type: ignore[arg-type]


async def test_atomic_runs_the_commands_in_one_transaction_on_every_backend(
    make_memory: Any,
) -> None:
    mem = await make_memory()
    key = mem.layout.guard("atomic-user")
    try:
        replies = await mem.backend.atomic(
            [("HSET", key, "e", "7"), ("HGET", key, "e"), ("HLEN", key)], key=key
        )
        assert [int(r) if not isinstance(r, bytes) else r for r in replies] == [1, b"7", 1]
    finally:
        await mem.backend.call(lambda redis: redis.delete(key))


async def test_the_multiplexed_connection_serves_redis_urls_only(backend_url: str) -> None:
    mem = await Memory.connect(backend_url)
    try:
        multiplexed = mem.backend.multiplexed
        assert (multiplexed is None) == backend_url.startswith("memory://")
    finally:
        await mem.aclose()


async def test_replica_acks_need_a_multiplexed_connection() -> None:
    with pytest.raises(InvalidInput, match="replica_acks needs a redis://"):
        await Memory.connect("memory://acks", replica_acks=1)


async def test_a_closed_backend_refuses_calls(make_memory: Any) -> None:
    mem = await make_memory()
    backend = mem.backend
    await mem.aclose()
    assert backend.closed
    with pytest.raises(Exception, match="closed"):
        await backend.ping()


def test_user_epochs_forget_epoch_zero_and_keep_the_latest_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(epochs, "_EPOCHS_KEPT", 2)
    seen = UserEpochs()
    seen.set("a", 5)
    seen.set("a", 0)
    assert seen.get("a") == 0
    seen.set("a", 1)
    seen.set("b", 2)
    seen.set("a", 3)  # a is the latest again
    seen.set("c", 4)  # over the bound: the user seen longest ago goes
    assert (seen.get("a"), seen.get("b"), seen.get("c")) == (3, 0, 4)


async def test_in_epoch_runs_again_in_the_epoch_it_is_told_and_gives_up_after_eight() -> None:
    seen = UserEpochs()
    tried: list[int] = []

    async def moved_once(epoch: int) -> str:
        tried.append(epoch)
        if epoch != 9:
            raise EpochMoved(9)
        return "done"

    assert await in_epoch(seen, "u", moved_once) == "done"
    assert tried == [0, 9] and seen.get("u") == 9

    calls = 0

    async def always_moved(epoch: int) -> str:
        nonlocal calls
        calls += 1
        raise EpochMoved(epoch + 1)

    with pytest.raises(BackendError, match="cleared 8 times during one call"):
        await in_epoch(seen, "v", always_moved)
    assert calls == 8
