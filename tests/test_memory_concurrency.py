"""Concurrent writers to one session: nothing lost, nothing duplicated, each
writer's order kept, ids 1..N without gaps, entry records consistent."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import user

from redismem import Memory, Message

pytestmark = pytest.mark.every_server

WRITER = Path(__file__).parent / "helpers" / "writer.py"
PROCESSES = 4
WRITES_PER_PROCESS = 200


def _parse(message: Message) -> tuple[int, int, int]:
    proc, write, index = message.content.split(":")
    return int(proc), int(write), int(index)


async def _check_log(mem: Memory, session_id: str, writers: int, writes: int) -> list[Message]:
    """Check the session written by `writers` x `writes` writes; return its messages."""
    log = await mem.read(session_id=session_id)
    parsed = [_parse(m) for m in log]

    # Nothing duplicated; ids are 1..N in log order.
    assert len(set(parsed)) == len(parsed)
    assert [int(m.id or "") for m in log] == list(range(1, len(log) + 1))

    # Nothing lost, each writer's order kept, and each write's messages contiguous.
    for proc in range(writers):
        mine = [p for p in parsed if p[0] == proc]
        assert mine == sorted(mine)
        assert {w for _, w, _ in mine} == set(range(writes))
        for write in range(writes):
            indexes = [j for _, w, j in mine if w == write]
            assert indexes == list(range(len(indexes))) and 1 <= len(indexes) <= 3
    positions = {p: i for i, p in enumerate(parsed)}
    for (proc, write, index), at in positions.items():
        if index > 0:
            assert positions[(proc, write, index - 1)] == at - 1

    # One entry record per write, consistent with the messages.
    entries = await mem.entries(session_id=session_id)
    assert len(entries) == writers * writes
    assert [m for e in entries for m in e.messages] == log
    ids = [int(e.id) for e in entries]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for entry in entries:
        owners = {_parse(m)[:2] for m in entry.messages}
        assert len(owners) == 1
        ((proc, _),) = owners
        assert entry.id == entry.messages[0].id
        assert entry.metadata.agent_name == f"p{proc}"
        assert entry.metadata.tags == {"proc": str(proc)}
        assert entry.metadata.token_count == sum(m.token_count or 0 for m in entry.messages)

    (info,) = await mem.sessions()
    assert info.message_count == len(log)
    assert info.token_count == sum(m.token_count or 0 for m in log)
    return log


async def test_concurrent_clients_in_one_process(make_memory):
    clients = [await make_memory() for _ in range(6)]
    writes = 30

    async def writer(proc: int, mem: Memory) -> None:
        for i in range(writes):
            batch = [user(f"{proc}:{i}:{j}") for j in range(1 + (proc + i) % 3)]
            await mem.write(
                batch, session_id="shared", agent_name=f"p{proc}", tags={"proc": str(proc)}
            )

    await asyncio.gather(*(writer(p, mem) for p, mem in enumerate(clients)))
    await _check_log(clients[0], "shared", len(clients), writes)


async def test_concurrent_writer_processes(redis_url, memory_factory, raw_factory, namespace):
    raw = await raw_factory(redis_url)
    ready, go = f"ready-{namespace}", f"go-{namespace}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WRITER),
            redis_url,
            namespace,
            "shared",
            str(proc),
            str(WRITES_PER_PROCESS),
            ready,
            go,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        for proc in range(PROCESSES)
    ]
    try:
        for _ in procs:
            assert await raw.blpop([ready], timeout=60) is not None, "a writer never started"
        await raw.rpush(go, *["go"] * PROCESSES)
        outputs = [await asyncio.wait_for(p.communicate(), timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err.decode(errors="replace")

    mem = await memory_factory(redis_url)
    log = await _check_log(mem, "shared", PROCESSES, WRITES_PER_PROCESS)
    # The ids each writer was handed are where its messages landed.
    where = {m.content: int(m.id or "") for m in log}
    for proc, (out, _) in enumerate(outputs):
        returned = json.loads(out)
        assert len(returned) == WRITES_PER_PROCESS
        for write, ids in enumerate(returned):
            assert ids == [where[f"{proc}:{write}:{j}"] for j in range(len(ids))]
    # The writers really interleaved (otherwise this test proves little).
    owners = [m.content.split(":")[0] for m in log]
    switches = sum(a != b for a, b in itertools.pairwise(owners))
    assert switches > PROCESSES
