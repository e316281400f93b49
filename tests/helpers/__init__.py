"""Helpers shared by the behaviour tests (raw Redis inspection, message builders)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from hypothesis import settings

Snapshot = dict[bytes, tuple[bytes | None, bool]]


def examples(full: int) -> int:
    """A property test's number of Hypothesis examples: ``full`` under the
    ``ci`` profile (100 examples by default), the same share of it under
    another (``dev``: a tenth), at least 10. Read when the test module is
    imported, after ``conftest`` has loaded the profile."""
    return max(10, full * settings.default.max_examples // 100)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _own(pattern: str) -> str:
    """``pattern``, if it names a test's own keys: not the whole database,
    which the suite shares (another test's keys expire or appear in it)."""
    if not pattern.strip("*"):
        raise ValueError(
            f"pattern {pattern!r} covers the whole shared database: give the test's own "
            "keys, e.g. f'{namespace}:*' or f'*{namespace}*'"
        )
    return pattern


async def keys_matching(raw: Any, pattern: str) -> list[bytes]:
    """Every key matching ``pattern``, found with SCAN, sorted."""
    pattern = _own(pattern)
    return sorted({key async for key in raw.scan_iter(match=pattern, count=1000)})


async def snapshot(raw: Any, pattern: str) -> Snapshot:
    """``key -> (DUMP, has a TTL)`` for every key matching ``pattern`` (the
    test's own keys: ``"*"`` is refused).

    DUMP covers type and value byte for byte; the TTL is compared by presence
    only, since its remaining time runs down between two snapshots.
    """
    out: Snapshot = {}
    for key in await keys_matching(raw, pattern):
        out[key] = (await raw.dump(key), await raw.pttl(key) > 0)
    return out


async def pttls(raw: Any, pattern: str) -> dict[bytes, int]:
    """``key -> PTTL`` for every key matching ``pattern``."""
    return {key: await raw.pttl(key) for key in await keys_matching(raw, pattern)}


async def session_ttls(memory: Any, raw: Any, session_id: str, user_id: str) -> list[int]:
    """The PTTL of every key of the session (-1: no expiry), checked against
    its expiry as ``memory.sessions`` reports it."""
    (info,) = [s for s in await memory.sessions(user_id=user_id) if s.session_id == session_id]
    keys = await keys_matching(raw, f"{memory.layout.namespace}:*{session_id}*")
    assert keys
    ttls = [await raw.pttl(k) for k in keys]
    assert (info.expires_at is None) == all(t == -1 for t in ttls)
    return ttls


def user(content: str, **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}


def assistant(content: str, **fields: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **fields}


def tool_call(call_id: str, content: str = "", name: str = "lookup") -> dict[str, Any]:
    """An assistant message requesting one tool call."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": call_id, "name": name, "arguments": {"q": call_id}}],
    }


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "content": content, "tool_call_id": call_id}


def redismem_command() -> list[str]:
    """The installed ``redismem`` console script (what operators run), next to
    the test interpreter; ``python -m redismem`` where it is not installed."""
    import shutil
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("redismem")
    if script.exists():
        return [str(script)]
    found = shutil.which("redismem")
    return [found] if found else [sys.executable, "-m", "redismem"]


async def key_values(raw: Any, key: bytes) -> list[bytes]:
    """Every byte string a key holds (fields and values, members, items)."""
    kind = (await raw.type(key)).decode()
    if kind == "string":
        return [await raw.get(key) or b""]
    if kind == "hash":
        return [b for pair in (await raw.hgetall(key)).items() for b in pair]
    if kind == "zset":
        return list(await raw.zrange(key, 0, -1))
    if kind == "list":
        return list(await raw.lrange(key, 0, -1))
    if kind == "set":
        return list(await raw.smembers(key))
    return []


@asynccontextmanager
async def client_kill_storm(url: str, every: float) -> AsyncIterator[list[int]]:
    """While inside: ``CLIENT KILL TYPE normal`` on the server every ``every``
    seconds (every client but this one). Yields ``[kills so far]``."""
    killer = aioredis.Redis.from_url(url)
    stop = asyncio.Event()
    kills = [0]

    async def storm() -> None:
        while not stop.is_set():
            kills[0] += await killer.execute_command("CLIENT", "KILL", "TYPE", "normal")
            await asyncio.sleep(every)

    task = asyncio.create_task(storm())
    try:
        yield kills
    finally:
        stop.set()
        await task
        await killer.aclose()
