"""Corrupt stored data, wrong key types, and an unreachable or dying Redis."""

from __future__ import annotations

import asyncio
import time

import msgpack
import pytest
from helpers import free_port, user

from redismem import BackendError, BackendUnavailable, CorruptData, Memory, RedisMemError

GARBAGE_MESSAGES = {
    "no token prefix": b"\x00\x01garbage",
    "bad msgpack": b"5|\xc1\xc1\xc1",
    "not a record": b"5|" + msgpack.packb({"role": "user"}),
    "unknown schema": b"5|" + msgpack.packb([99, 1, "x"]),
    "unknown role": b"5|" + msgpack.packb([1, 17, "x"]),
    "content not text": b"5|" + msgpack.packb([1, 1, 12345]),
    "non-numeric tokens": b"abc|" + msgpack.packb([1, 1, "x"]),
    "spaced tokens": b" 5|" + msgpack.packb([1, 1, "x"]),
    "name not text": b"5|" + msgpack.packb([1, 1, "x", 5]),
    "bad tool calls": b"5|" + msgpack.packb([1, 2, "x", None, [5]]),
    "metadata not a map": b"5|" + msgpack.packb([1, 1, "x", None, None, None, [1]]),
    "empty": b"",
}

GARBAGE_ENTRIES = {
    "no prefix": b"garbage without commas",
    "half prefix": b"1,garbage",
    "bad msgpack": b"1,1700000000000,\xc1\xc1",
    "not a record": b"1,1700000000000," + msgpack.packb("text"),
    "agent not text": b"3,1700000000000," + msgpack.packb([1, 1, 5, 123]),
    "tags not a map": b"3,1700000000000," + msgpack.packb([1, 1, 5, None, ["k", "v"]]),
    "tag value not text": b"3,1700000000000," + msgpack.packb([1, 1, 5, None, {"k": 1}]),
    "count not a number": b"3,1700000000000," + msgpack.packb([1, "one", 5]),
    "empty": b"",
}
BAD_ENTRY_PREFIX = {"no prefix", "half prefix", "empty"}


async def _two_sessions(mem) -> None:
    await mem.write([user("a1"), user("a2")], session_id="bad", tags={"k": "v"})
    await mem.write([user("a3")], session_id="bad", tags={"k": "v"})
    await mem.write([user("b1")], session_id="good", tags={"k": "v"})


async def _good_still_readable(mem) -> None:
    assert [m.content for m in await mem.read(session_id="good")] == ["b1"]
    assert [m.content for m in await mem.read(session_id="good", max_tokens=100)] == ["b1"]
    assert len(await mem.entries(session_id="good")) == 1


@pytest.mark.parametrize("garbage", list(GARBAGE_MESSAGES), ids=list(GARBAGE_MESSAGES))
@pytest.mark.parametrize("index", [0, -1], ids=["oldest", "newest"])
async def test_corrupt_message_raises_corrupt_data_naming_the_key(make_memory, raw, garbage, index):
    mem = await make_memory()
    await _two_sessions(mem)
    key = mem.layout.session("default", "bad").msgs
    await raw.lset(key, index, GARBAGE_MESSAGES[garbage])

    reads = [
        lambda: mem.read(session_id="bad"),
        lambda: mem.read(session_id="bad", tags={"k": "v"}),
        lambda: mem.entries(session_id="bad"),
    ]
    if index == -1:
        reads += [
            lambda: mem.read(session_id="bad", limit=1),
            lambda: mem.read(session_id="bad", max_tokens=10_000),
        ]
    for read in reads:
        with pytest.raises(CorruptData) as info:
            await read()
        assert info.value.key == key
        assert key in str(info.value)
        assert isinstance(info.value, RedisMemError)
    await _good_still_readable(mem)
    # Messages before the corrupt one can still be read.
    if index == -1:
        assert [m.content for m in await mem.read(session_id="bad", limit=0)] == []


@pytest.mark.parametrize("garbage", list(GARBAGE_ENTRIES), ids=list(GARBAGE_ENTRIES))
async def test_corrupt_entry_raises_corrupt_data_naming_the_key(make_memory, raw, garbage):
    mem = await make_memory()
    await _two_sessions(mem)
    key = mem.layout.session("default", "bad").entries
    await raw.lset(key, -1, GARBAGE_ENTRIES[garbage])

    reads = [
        lambda: mem.read(session_id="bad", tags={"k": "v"}),
        lambda: mem.entries(session_id="bad"),
        lambda: mem.sessions(tags={"k": "v"}),
    ]
    if garbage in BAD_ENTRY_PREFIX:
        # Plain reads use only the "first_seq,created_ms," prefix of a record.
        reads += [
            lambda: mem.read(session_id="bad"),
            lambda: mem.read(session_id="bad", limit=1),
            lambda: mem.read(session_id="bad", max_tokens=10_000),
        ]
    for read in reads:
        with pytest.raises(CorruptData) as info:
            await read()
        assert info.value.key == key
    await _good_still_readable(mem)


async def test_writes_go_on_past_a_corrupt_entry_record(make_memory, raw):
    mem = await make_memory(max_messages=2)
    await _two_sessions(mem)
    await raw.lset(mem.layout.session("default", "bad").entries, 1, b"garbage")
    for i in range(3):
        await mem.write([user(f"n{i}")], session_id="bad")
    assert [m.content for m in await mem.read(session_id="bad")] == ["n1", "n2"]


async def test_trimming_past_a_corrupt_message_still_writes(make_memory, raw):
    mem = await make_memory(max_messages=2)
    await mem.write([user("a"), user("b")], session_id="s")
    await raw.lset(mem.layout.session("default", "s").msgs, 0, b"garbage")
    await mem.write([user("c"), user("d")], session_id="s")
    assert [m.content for m in await mem.read(session_id="s")] == ["c", "d"]


async def test_corrupt_session_meta_raises_corrupt_data(make_memory, raw):
    mem = await make_memory()
    await _two_sessions(mem)
    key = mem.layout.session("default", "bad").meta
    await raw.hset(key, "created", b"garbage")
    with pytest.raises(CorruptData) as info:
        await mem.sessions()
    assert info.value.key == key


async def test_wrong_key_type_raises_store_error_and_spares_other_sessions(make_memory, raw):
    mem = await make_memory()
    await _two_sessions(mem)
    await raw.set(mem.layout.session("default", "bad").msgs, b"not a list")
    with pytest.raises(BackendError):
        await mem.read(session_id="bad")
    with pytest.raises(BackendError):
        await mem.write([user("x")], session_id="bad")
    await _good_still_readable(mem)


async def test_unreachable_redis_raises_store_unavailable_quickly(clean_env):
    url = f"redis://127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        await Memory.connect(url, connect_timeout=0.5, retries=2)
    assert time.monotonic() - started < 10
    assert isinstance(info.value, RedisMemError)
    assert "127.0.0.1" in str(info.value)


async def test_password_is_masked_in_errors(clean_env):
    url = f"redis://user:s3cret-pw@127.0.0.1:{free_port()}/0"
    with pytest.raises(BackendUnavailable) as info:
        await Memory.connect(url, connect_timeout=0.5, retries=0)
    assert "s3cret-pw" not in str(info.value)


async def test_server_killed_mid_use_raises_store_unavailable(redis_server_factory, memory_factory):
    server = redis_server_factory()
    mem = await memory_factory(server.url, connect_timeout=0.5, socket_timeout=1, retries=2)
    await mem.write([user("before")], session_id="s")
    assert len(await mem.read(session_id="s")) == 1
    server.kill()
    for call in (
        lambda: mem.write([user("after")], session_id="s"),
        lambda: mem.read(session_id="s"),
        lambda: mem.sessions(),
        lambda: mem.clear_user("default"),
    ):
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            await call()
        assert time.monotonic() - started < 10


async def test_connect_retries_until_a_starting_server_answers(redis_server_factory, clean_env):
    port = free_port()

    def start_soon() -> None:
        time.sleep(0.3)
        redis_server_factory(port=port)

    starting = asyncio.create_task(asyncio.to_thread(start_soon))
    try:
        mem = await Memory.connect(f"redis://127.0.0.1:{port}/0", retries=8, connect_timeout=0.5)
        await mem.aclose()
    finally:
        await starting
