"""The user guard: one mechanism that makes a clear final for every key
family of a user, present and future.

Every key of a user lies under ``ns:{u:U}:`` (``keys.py``), and every key
that holds the user's data lies in an *epoch* of that user: ``ns:{u:U}:...``
for epoch 0 (a user never cleared), ``ns:{u:U}:@<epoch>:...`` after a clear.
The user's guard, ``ns:{u:U}:guard``, holds the current epoch (absent: 0).

* **Every user-scoped script checks the guard first.** The script registry
  (``lua.script_source``) prefixes with ``_guard.lua`` every script
  whose header does not say ``-- unguarded: <why>`` (only the guard's own
  and the LangGraph checkpointer's, whose threads belong to no user), and
  the one way to run one (``ScriptRunner.run_guarded``) sends the guard and
  the epoch its keys were built for. A script built for another
  epoch changes nothing and fails with ``EpochMoved``: a client call builds
  its keys for the new epoch and runs again (``epochs.in_epoch``); a worker drops
  what it read (its commit names keys of a cleared epoch). Plain reads run in
  one MULTI with the guard (``read_guarded``). A key family added later
  gets its keys from ``KeyLayout`` for an epoch and its scripts from the
  registry, so it is covered without anyone remembering to.
* **clear_user** starts a new epoch in one atomic step (``guard_bump.lua``):
  from then on nothing of the earlier epochs can be read or written by
  anyone, however late a worker's commit arrives. Then it deletes every key
  of the earlier epochs (SCAN and UNLINK: nothing can recreate them), the
  user's jobs still waiting on the queue and its failure records, and
  settles the guard (``guard_settle.lua``): marks the clear finished, and
  drops the guard when the user did not come back meanwhile, so a cleared
  user leaves no key at all. When the caller dies halfway, the workers'
  sweep finishes the clear (``unfinished_clear``, ``finish_clear``). Writes
  racing the clear land either before the new epoch (and are deleted) or in
  it (and are kept, and indexed).
* **The guard outlives its epoch's keys**: every script that gives keys of
  an epoch a deadline gives the guard at least the same (``cover_guard`` in
  ``_guard.lua``), and a new guard lives at least ``GUARD_MIN_TTL_MS``, longer
  than any job that may still hold an older epoch.

Epochs are the server's time in ms at the clear (above every earlier epoch of
the user), so an epoch number is never used twice, even after a guard expired.
A worker's writes are also tied to the session they derive from (its
incarnation ``gen``), which keeps them out of a recreated session once the
guard is dropped.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from redismem.checks import new_write_id
from redismem.core.connection import EpochMoved, scan_once
from redismem.core.keys import EPOCH_MARK, KeyLayout, ParsedKey
from redismem.errors import InvalidInput

if TYPE_CHECKING:
    from redismem.core.lua import Scoped

if TYPE_CHECKING:
    from redismem.core.backend import Backend

__all__ = [
    "GUARD_MIN_TTL_MS",
    "GUARD_SETTLE_GRACE_MS",
    "clear_all",
    "clear_user",
    "finish_clear",
    "unfinished_clear",
    "current_epoch",
    "read_guarded",
]

T = TypeVar("T")

#: A new guard lives at least this long (a day): longer than any worker job
#: or retried call that may still hold an earlier epoch.
GUARD_MIN_TTL_MS = 24 * 3600 * 1000
#: Keys unlinked per command while reaping.
_UNLINK_BATCH = 1000
#: Keys SCAN examines per call while reaping (a user may have 10^5 keys).
_SCAN_COUNT = 5000
#: A clear not settled this long after it began is finished by the workers'
#: sweep: its caller died (a running clear_user takes seconds).
GUARD_SETTLE_GRACE_MS = 5 * 60 * 1000


async def current_epoch(backend: Backend, user_id: str) -> int:
    """The user's epoch now (read from the guard), remembered by the client."""
    guard = backend.layout.guard(user_id)
    raw = await backend.call(lambda redis: redis.hget(guard, "e"))
    epoch = int(raw) if raw is not None else 0
    backend.epochs.set(user_id, epoch)
    return epoch


async def read_guarded(
    backend: Backend, scope: Scoped, commands: Sequence[Sequence[Any]]
) -> list[Any]:
    """The replies of ``commands``, plain reads of keys built for ``scope``'s
    epoch, run in one MULTI with a read of the guard: ``EpochMoved`` when the
    user was cleared since (the way every plain read of a user's keys is
    guarded, as ``_guard.lua`` guards the scripts)."""
    raw, *replies = await backend.atomic([("HGET", scope.guard, "e"), *commands], key=scope.guard)
    current = int(raw) if raw is not None else 0
    if current != scope.epoch:
        raise EpochMoved(current)
    return replies


async def clear_user(backend: Backend, user_id: str) -> int:
    """See ``Memory.clear_user``. Returns the number of keys deleted."""
    epoch = await _new_epoch(backend, user_id)
    return await finish_clear(backend, user_id, epoch)


async def finish_clear(backend: Backend, user_id: str, epoch: int) -> int:
    """The rest of a clear that started ``epoch``: delete the earlier epochs'
    keys and queued jobs, then settle the guard. Idempotent: the workers'
    sweep runs it for a clear whose caller died halfway (``unfinished_clear``)."""
    removed = await reap(backend, user_id, below=epoch)
    await backend.queue.forget_user(backend.layout, user_id)
    await _settle_guard(backend, user_id, epoch)
    return removed


async def unfinished_clear(backend: Backend, guard_key: str | bytes) -> tuple[str, int] | None:
    """``(user, epoch)`` when ``guard_key`` (a match of
    ``KeyLayout.guard_pattern``) is the guard of a clear not finished after
    ``GUARD_SETTLE_GRACE_MS`` (its caller died), else None."""
    text = guard_key.decode() if isinstance(guard_key, bytes) else guard_key
    try:
        parsed = backend.layout.parse_key(text)
    except InvalidInput:
        return None
    if parsed.kind != "guard" or parsed.session_id is not None:
        return None
    epoch, reaped, at = await backend.call(lambda redis: redis.hmget(text, "e", "reaped", "at"))
    if epoch is None or epoch == reaped or at is None:
        return None
    now_ms = await backend.call(lambda redis: redis.time())
    if (now_ms[0] * 1000 + now_ms[1] // 1000) - int(at) < GUARD_SETTLE_GRACE_MS:
        return None  # its clear_user may still be running
    return parsed.user_id, int(epoch)


async def clear_all(backend: Backend) -> int:
    """See ``Memory.clear_all``: every user found as ``clear_user`` clears
    one, in two passes over the namespace whatever the number of users; keys
    of no user (LangGraph threads) are deleted as found."""
    layout = backend.layout
    epochs: dict[str, int] = {}
    async for batch in _scan(backend, layout.namespace_pattern(), None):
        for raw_key in batch:
            parsed = _parsed(layout, raw_key)
            if parsed is not None and parsed.user_id not in epochs:
                epochs[parsed.user_id] = await _new_epoch(backend, parsed.user_id)

    def doomed(raw_key: bytes) -> bool:
        parsed = _parsed(layout, raw_key)
        if parsed is None:
            return True  # the namespace's, but no user's
        below = epochs.get(parsed.user_id)
        return below is not None and parsed.kind != "guard" and parsed.epoch < below

    removed = await _delete(backend, layout.namespace_pattern(), None, doomed)
    await backend.queue.forget_user(layout, None)
    for user_id, epoch in epochs.items():
        await _settle_guard(backend, user_id, epoch)
    return removed


async def reap(backend: Backend, user_id: str, *, below: int) -> int:
    """Delete every key of the user's epochs before ``below`` (no script can
    reach them any more: see the module docstring). Returns how many."""
    layout = backend.layout
    prefix = layout.user_tag_prefix(user_id).encode()
    mark = EPOCH_MARK.encode()

    def doomed(raw_key: bytes) -> bool:
        # Every match starts with the user's prefix: only the epoch is read
        # (a full parse_key per key would double the time of a large clear).
        rest = raw_key[len(prefix) :]
        if rest == b"guard" or not raw_key.startswith(prefix):
            return False
        if not rest.startswith(mark):
            return True  # epoch 0
        digits = rest[1:].partition(b":")[0]
        return digits.isdigit() and int(digits) < below

    return await _delete(backend, layout.user_pattern(user_id), layout.guard(user_id), doomed)


async def _new_epoch(backend: Backend, user_id: str) -> int:
    guard = backend.layout.guard(user_id)
    epoch = await backend.scripts.bump_epoch(
        guard, min_ttl_ms=GUARD_MIN_TTL_MS, clear_id=new_write_id()
    )
    backend.epochs.set(user_id, epoch)
    return epoch


async def _settle_guard(backend: Backend, user_id: str, epoch: int) -> None:
    layout = backend.layout
    roots = layout.epoch_roots(user_id, epoch)
    if await backend.scripts.settle_guard(layout.guard(user_id), epoch=epoch, roots=roots):
        backend.epochs.set(user_id, 0)


def _parsed(layout: KeyLayout, raw_key: bytes) -> ParsedKey | None:
    try:
        return layout.parse_key(raw_key.decode("utf-8"))
    except (InvalidInput, UnicodeDecodeError):
        return None


async def _scan(backend: Backend, pattern: str, key: str | None) -> AsyncIterator[list[bytes]]:
    cursor = "0"
    while True:
        step = functools.partial(
            scan_once, cursor=cursor, pattern=pattern, key=key, count=_SCAN_COUNT
        )
        cursor, batch = await backend.call(step)
        yield batch
        if cursor == "0":
            return


async def _delete(
    backend: Backend, pattern: str, key: str | None, doomed: Callable[[bytes], bool]
) -> int:
    """UNLINK, in batches, the keys matching ``pattern`` that are ``doomed``
    (on a cluster, with ``key``: on the node of its slot only)."""
    removed = 0
    found: list[bytes] = []
    async for batch in _scan(backend, pattern, key):
        found += [raw_key for raw_key in batch if doomed(raw_key)]
        while len(found) >= _UNLINK_BATCH:
            removed += await _unlink_batch(backend, found[:_UNLINK_BATCH])
            del found[:_UNLINK_BATCH]
    if found:
        removed += await _unlink_batch(backend, found)
    return removed


async def _unlink_batch(backend: Backend, keys: list[bytes]) -> int:
    async def unlink(redis: Any) -> int:
        count: int = await redis.unlink(*keys)
        return count

    return await backend.call(unlink)
