"""Seams between features: a clear racing the workers' commits, writes
racing a clear, a new session meeting the queue.

Real ``redis-server`` and real worker processes (``redismem worker``
extracting with the rule extractor). After every race, once the workers are
idle: nothing cleared is readable anywhere (sessions, index, summaries,
memories, store) and no key of the user is left; every write acknowledged
after the last clear is readable and indexed exactly once.
"""

from __future__ import annotations

import asyncio
import random
import signal
from typing import Any

import pytest
from helpers import key_values, keys_matching
from worker_support import eventually, wait_ready, worker_env

from redismem import Memory
from redismem.core.keys import user_digest
from redismem.core.queue import QueueStats, user_jobs

FACTS = [
    "My name is Dana and I live in Lisbon.",
    "I work at Acme as an engineer.",
    "I prefer trains over planes.",
    "My sister is called Eva.",
    "I moved to Porto.",
]


async def connect(url: str, namespace: str, queue_name: str, **options: Any) -> Memory:
    return await Memory.connect(
        url,
        namespace=namespace,
        queue_name=queue_name,
        index=True,
        summarize_batch=None,
        **options,
    )


async def user_keys(raw: Any, mem: Memory, user_id: str) -> list[bytes]:
    return [k async for k in raw.scan_iter(match=mem.layout.user_pattern(user_id), count=1000)]


async def indexed_copies(mem: Memory, user_id: str) -> dict[tuple[str, str], list[str]]:
    """(session, message id) -> the contents of the search hits naming it."""
    found: dict[tuple[str, str], list[str]] = {}
    for info in await mem.sessions(user_id=user_id):
        hits = await mem.search(None, user_id=user_id, session_id=info.session_id, limit=1000)
        for hit in hits:
            found.setdefault((hit.session_id, hit.message.id or ""), []).append(hit.message.content)
    return found


async def stored(mem: Memory, user_id: str) -> dict[tuple[str, str], str]:
    out = {}
    for info in await mem.sessions(user_id=user_id):
        for message in await mem.read(session_id=info.session_id, user_id=user_id):
            out[info.session_id, message.id or ""] = message.content
    return out


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8])
async def test_clear_user_while_workers_extract_leaves_nothing(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str, delay: float
) -> None:
    """Defect 1: memories and store keys created by extraction commits that
    land after clear_user listed the user's keys survived, readable."""
    raw = await raw_factory(redis_url)
    env = worker_env(redis_url, namespace, queue_name, EXTRACTOR="rules", EXTRACT_QUIET=0.2)
    for _ in range(2):
        await wait_ready(raw, workers.start(env))
    mem = await connect(redis_url, namespace, queue_name)
    try:
        for round_ in range(2):
            uid = f"dana{round_}"
            for s in range(120):
                await mem.write(
                    [{"role": "user", "content": FACTS[s % len(FACTS)]}],
                    session_id=f"s{s}",
                    user_id=uid,
                )
            # Extraction is under way (or about to be) when the user goes.
            await asyncio.sleep(delay + 0.2)
            await mem.clear_user(uid)
            # Let every job that was running or queued end.
            await mem.flush(user_id=uid, timeout=30)
            await asyncio.sleep(1.5)
            assert await user_keys(raw, mem, uid) == []
            assert await mem.memories.search(user_id=uid, status="any", limit=100) == []
            assert await mem.sessions(user_id=uid) == []
            assert await mem.search(None, user_id=uid, limit=100) == []
    finally:
        await mem.aclose()


async def test_an_extraction_answer_released_after_clear_user_is_dropped(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    """The LLM extractor's answer arrives after the clear: nothing is stored."""
    from worker_support import FakeChatServer, RecordedRequest, Reply

    released = asyncio.Event()
    loop = asyncio.get_running_loop()

    def hold(index: int, request: RecordedRequest) -> Reply:
        # Answer one fact per request, 1.5 s late: the clear happens meanwhile.
        loop.call_soon_threadsafe(released.set)
        body = '{"memories": [{"kind": "goal", "text": "Ship the thing.", "messages": [1]}]}'
        return Reply(content=body, delay=1.5)

    raw = await raw_factory(redis_url)
    with FakeChatServer(hold) as llm:
        env = worker_env(
            redis_url,
            namespace,
            queue_name,
            EXTRACTOR="llm",
            EXTRACT_QUIET=0,
            LLM_BASE_URL=llm.base_url,
            LLM_MODEL="fake",
        )
        await wait_ready(raw, workers.start(env))
        mem = await connect(redis_url, namespace, queue_name)
        try:
            for s in range(3):
                await mem.write(
                    [{"role": "user", "content": "remember to ship the thing"}],
                    session_id=f"s{s}",
                    user_id="u",
                )
            await asyncio.wait_for(released.wait(), 30)
            await mem.clear_user("u")
            await asyncio.sleep(3.0)  # every held answer has been released
            await mem.flush(user_id="u", timeout=30)
            assert await user_keys(raw, mem, "u") == []
            assert await mem.memories.search(user_id="u", status="any") == []
        finally:
            await mem.aclose()


async def test_writes_racing_clear_user_are_kept_and_indexed_exactly_once(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    """Defect 2: messages of sessions recreated after a clear were stored but
    never indexed, or indexed twice, or hits showed another message's text."""
    raw = await raw_factory(redis_url)
    env = worker_env(redis_url, namespace, queue_name)
    for _ in range(2):
        await wait_ready(raw, workers.start(env))
    mem = await connect(redis_url, namespace, queue_name)
    rng = random.Random(7)
    stop = asyncio.Event()
    after_last_clear: list[tuple[str, str]] = []  # (session, content) written after it
    clears_done = [0]

    async def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            sid = f"s{rng.randrange(12)}"
            text = f"w{n} message {i} about kites"
            clears_before = clears_done[0]
            await mem.write([{"role": "user", "content": text}], session_id=sid, user_id="u")
            if clears_before == 5:  # started after the last clear returned
                after_last_clear.append((sid, text))
            i += 1
            await asyncio.sleep(rng.random() * 0.01)

    async def clearer() -> None:
        for _ in range(5):
            await asyncio.sleep(0.15 + rng.random() * 0.2)
            await mem.clear_user("u")
            clears_done[0] += 1
        await asyncio.sleep(0.5)
        stop.set()

    try:
        await asyncio.gather(clearer(), *(writer(n) for n in range(6)))
        assert after_last_clear
        assert await mem.flush(user_id="u", timeout=60)
        kept = await stored(mem, "u")
        contents = set(kept.values())
        for _sid, text in after_last_clear:
            assert text in contents
        copies = await indexed_copies(mem, "u")
        assert set(copies) == set(kept)  # every stored message indexed...
        for ident, texts in copies.items():
            assert texts == [kept[ident]]  # ...exactly once, with its own text
        epoch = mem.backend.epochs.get("u")
        recall = mem.layout.recall("u", epoch)
        assert int(await raw.hget(recall.i_meta, "n") or 0) == len(kept)
    finally:
        await mem.aclose()


async def test_writes_right_after_clearing_a_session_are_kept_and_indexed(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    """A session cleared while being indexed, written again at once: the new
    messages are indexed, the old ones forgotten, none mixed up."""
    raw = await raw_factory(redis_url)
    await wait_ready(raw, workers.start(worker_env(redis_url, namespace, queue_name)))
    mem = await connect(redis_url, namespace, queue_name)
    try:
        for round_ in range(15):
            for i in range(12):
                await mem.write(
                    [{"role": "user", "content": f"round {round_} old {i}"}],
                    session_id="s",
                    user_id="u",
                )
            await asyncio.sleep(0.02 * (round_ % 4))
            await mem.clear(session_id="s", user_id="u")
            await mem.write(
                [{"role": "user", "content": f"round {round_} new"}], session_id="s", user_id="u"
            )
            assert await mem.flush(user_id="u", timeout=30)
            copies = await indexed_copies(mem, "u")
            kept = await stored(mem, "u")
            assert set(copies) == set(kept)
            assert all(texts == [kept[ident]] for ident, texts in copies.items())
            hits = await mem.search("old", user_id="u", limit=100)
            assert [
                h.message.content for h in hits if f"round {round_} " in h.message.content
            ] == []
            await mem.clear(session_id="s", user_id="u")
    finally:
        await mem.aclose()


async def test_a_new_session_never_waits_on_a_stalled_queue(
    redis_url: str, redis_server_factory: Any, namespace: str, queue_name: str, raw_factory: Any
) -> None:
    """Defect 3: the first write of a session enqueued its job inside the
    call; with the queue's Redis stalled (SIGSTOP) every such write waited
    for the enqueue to time out. Now writes land while the queue is frozen,
    and the jobs arrive once it is back."""
    queue_server = redis_server_factory()
    queue_url = f"redis://127.0.0.1:{queue_server.port}/0"
    mem = await connect(redis_url, namespace, queue_name, queue_url=queue_url)
    queue_raw = await raw_factory(queue_url)
    try:
        await mem.write([{"role": "user", "content": "warm up"}], session_id="w", user_id="u")
        await mem.aclose()  # the warm-up's enqueue has landed
        mem = await connect(redis_url, namespace, queue_name, queue_url=queue_url)
        queue_server.pause()
        try:
            # Far below the ~20 s an enqueue takes to give up on a frozen
            # queue (attempt_timeout x tries), even on a loaded machine.
            async with asyncio.timeout(10):
                for s in range(20):
                    await mem.write(
                        [{"role": "user", "content": f"hello {s}"}], session_id=f"s{s}", user_id="u"
                    )
                    assert len(await mem.read(session_id=f"s{s}", user_id="u")) == 1
        finally:
            queue_server.resume()
        await mem.aclose()  # waits (bounded) for the background enqueues

        async def all_queued() -> bool:
            jobs = await queue_raw.zrange(queue_name, 0, -1)
            return len(jobs) >= 21

        await eventually(all_queued, within=30, what="every session's job queued")
    finally:
        await mem.aclose()
        await queue_raw.delete(queue_name)
        async for key in queue_raw.scan_iter(match="arq:*"):
            await queue_raw.delete(key)


async def test_clear_user_leaves_no_trace_on_the_queue_side(
    redis_url: str, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    """Defect 12: queued job ids and failure records kept the user id after
    clear_user. Job ids name users by digest, and clear_user removes the
    user's waiting jobs and failure records."""
    raw = await raw_factory(redis_url)
    mem = await connect(redis_url, namespace, queue_name)
    try:
        for s in range(5):
            for uid in ("alice@example.com", "bob"):
                await mem.write(
                    [{"role": "user", "content": "hi"}], session_id=f"s{s}", user_id=uid
                )
        stats = QueueStats(raw, mem.layout, redis_url)
        await stats.record_failure("alice@example.com", "s1", "SummarizerError: x", 4)
        await stats.record_failure("bob", "s1", "SummarizerError: x", 4)
        await mem.aclose()  # the background enqueues have landed
        mem = await connect(redis_url, namespace, queue_name)
        queued = await raw.zrange(queue_name, 0, -1)
        assert len(queued) == 10
        assert not any(b"alice" in job or b"bob" in job for job in queued)

        await mem.clear_user("alice@example.com")

        queue_side = [k async for k in raw.scan_iter(match="arq:*")]
        queue_side += [k async for k in raw.scan_iter(match="redismem/*")]
        everything = b" ".join(queue_side)
        for key in queue_side:
            kind = await raw.type(key)
            if kind == b"string":
                everything += await raw.get(key) or b""
            elif kind == b"list":
                everything += b" ".join(await raw.lrange(key, 0, -1))
            elif kind == b"zset":
                everything += b" ".join(await raw.zrange(key, 0, -1))
        assert b"alice" not in everything
        digest = user_digest(namespace, "alice@example.com").encode()
        assert digest not in everything
        assert len(await raw.zrange(queue_name, 0, -1)) == 5  # bob's stay
        assert user_jobs(namespace, "bob").encode() in everything
        failures = (await QueueStats(raw, mem.layout, redis_url).snapshot())["failures"]
        assert [f["user"] for f in failures] == ["bob"]
        assert await user_keys(raw, mem, "alice@example.com") == []
    finally:
        await mem.aclose()


async def test_a_worker_killed_mid_job_after_clear_user_resurrects_nothing(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    """SIGKILL the workers while they extract, clear the user, restart them:
    the retried jobs find the user cleared and write nothing."""
    raw = await raw_factory(redis_url)
    env = worker_env(redis_url, namespace, queue_name, EXTRACTOR="rules", EXTRACT_QUIET=0)
    first = workers.start(env)
    await wait_ready(raw, first)
    mem = await connect(redis_url, namespace, queue_name)
    try:
        for s in range(30):
            await mem.write(
                [{"role": "user", "content": FACTS[s % len(FACTS)]}],
                session_id=f"s{s}",
                user_id="u",
            )
        await asyncio.sleep(0.3)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
        await mem.clear_user("u")
        await wait_ready(raw, workers.start(env))
        await asyncio.sleep(2.0)
        await mem.flush(user_id="u", timeout=30)
        assert await user_keys(raw, mem, "u") == []
        assert await mem.memories.search(user_id="u", status="any") == []
    finally:
        await mem.aclose()


async def test_a_write_meeting_a_key_of_the_wrong_type_writes_nothing(
    make_memory: Any, raw: Any
) -> None:
    """Defect 10: a session whose tags key had the wrong type failed the write
    after its messages and entry were stored. Every key a write will touch is
    checked before it writes anything."""
    from helpers import snapshot

    from redismem import CorruptData

    mem = await make_memory(index=True)
    await mem.write([{"role": "user", "content": "first"}], session_id="s0", tags={"a": "1"})
    for n, kind in enumerate(["tags", "entries", "tagidx", "pending", "sessions"], start=1):
        keys = mem.layout.session("default", f"s{n}")
        victim = getattr(keys, kind)
        saved, ttl = await raw.dump(victim), await raw.pttl(victim)
        await raw.delete(victim)
        await raw.set(victim, b"not mine")
        before = await snapshot(raw, mem.layout.user_pattern("default"))
        with pytest.raises(CorruptData):
            await mem.write(
                [{"role": "user", "content": "second"}], session_id=f"s{n}", tags={"a": "2"}
            )
        assert await snapshot(raw, mem.layout.user_pattern("default")) == before, kind
        await raw.delete(victim)
        if saved is not None:
            await raw.restore(victim, max(ttl, 0), saved)
    assert [m.content for m in await mem.read(session_id="s0")] == ["first"]
    await mem.write([{"role": "user", "content": "again"}], session_id="s1", tags={"a": "2"})
    assert [m.content for m in await mem.read(session_id="s1")] == ["again"]


@pytest.mark.parametrize(
    ("kind", "error"),
    [("msgs", "BackendError"), ("entries", "CorruptData"), ("writes", "BackendError")],
)
async def test_a_write_to_a_session_whose_lists_have_the_wrong_type_writes_nothing(
    make_memory: Any, raw: Any, kind: str, error: str
) -> None:
    """The write checks its messages and entry records from the replies of its
    own pushes (no LLEN, no TYPE before): a key of another type, met after the
    write id was recorded, is undone to the byte. Messages or write ids of
    another type fail with Redis's WRONGTYPE (BackendError), as before."""
    from helpers import snapshot

    import redismem

    mem = await make_memory(index=True)
    for i in range(3):
        await mem.write([{"role": "user", "content": f"m{i}"}], session_id="s")
    victim = getattr(mem.layout.session("default", "s"), kind)
    await raw.delete(victim)
    await raw.set(victim, b"not mine")
    before = await snapshot(raw, mem.layout.user_pattern("default"))
    with pytest.raises(getattr(redismem, error)):
        await mem.write([{"role": "user", "content": "x"}], session_id="s", write_id="w-new")
    assert await snapshot(raw, mem.layout.user_pattern("default")) == before


CLEAR_THEN_DIE = """
import asyncio, os, signal, sys
import redismem.core.guard as guard
from redismem import Memory

async def main() -> None:
    mem = await Memory.connect(sys.argv[1], namespace=sys.argv[2])

    async def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)  # after the new epoch began

    guard.reap = die
    await mem.clear_user("u")

asyncio.run(main())
"""


async def test_a_clear_whose_caller_dies_halfway_is_finished_by_the_workers(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    """The process calling clear_user is SIGKILLed right after the new epoch
    began: nothing of the user is readable at once, and the workers' sweep
    deletes the earlier keys once the clear is overdue."""
    import sys

    raw = await raw_factory(redis_url)
    mem = await connect(redis_url, namespace, queue_name)
    try:
        for s in range(5):
            await mem.write(
                [{"role": "user", "content": f"hi {s}"}], session_id=f"s{s}", user_id="u"
            )
        await mem.store.put(("u", "notes"), "n", {"text": "note"})
        before = await user_keys(raw, mem, "u")
        dead = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLEAR_THEN_DIE, redis_url, namespace
        )
        assert await asyncio.wait_for(dead.wait(), 60) == -signal.SIGKILL
        assert set(await user_keys(raw, mem, "u")) >= set(before)  # not deleted yet...
        assert await mem.sessions(user_id="u") == []  # ...but gone for every reader
        assert await mem.read(session_id="s0", user_id="u") == []
        assert await mem.store.get(("u", "notes"), "n") is None
        # Five minutes later (the guard's clock, moved back), a worker's sweep
        # finishes the clear.
        guard_key = mem.layout.guard("u")
        await raw.hset(guard_key, "at", 1)
        await wait_ready(raw, workers.start(worker_env(redis_url, namespace, queue_name)))

        async def finished() -> bool:
            return await user_keys(raw, mem, "u") == []

        await eventually(finished, within=60, what="the sweep to finish the clear")
    finally:
        await mem.aclose()


async def test_docs_of_a_clear_that_died_before_forgetting_them_are_forgotten_by_the_workers(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    """clear() tombstones the session's docs in its script (format 2: its
    ordinal listed in i:purge), then purges them: a caller that dies in
    between leaves the purge, which the next job of the user's workers
    finishes, leaving no word of the session in any key."""
    from redismem.core.keys import grave_suffix

    raw = await raw_factory(redis_url)
    await wait_ready(raw, workers.start(worker_env(redis_url, namespace, queue_name)))
    mem = await connect(redis_url, namespace, queue_name)
    try:
        await mem.write(
            [{"role": "user", "content": "zebras at dawn"}], session_id="a", user_id="u"
        )
        assert await mem.flush(user_id="u", timeout=30)
        assert [h.message.content for h in await mem.search("zebras", user_id="u")] == [
            "zebras at dawn"
        ]
        # The clear script alone, as if its caller died before forgetting.
        keys, recall_keys = mem.layout.session("u", "a"), mem.layout.recall("u")
        await mem.backend.scripts.clear(
            keys, recall_keys, session_id="a", grave=grave_suffix("a", "t1")
        )
        assert await raw.scard(recall_keys.i_purge) == 1  # format 2: the purge left
        await mem.write([{"role": "user", "content": "another day"}], session_id="b", user_id="u")
        assert await mem.flush(user_id="u", timeout=30)

        async def forgotten() -> bool:
            return not await raw.exists(recall_keys.i_purge)

        await eventually(forgotten, within=30, what="the purge finished by the job")
        assert await mem.search("zebras", user_id="u") == []
        for key in await keys_matching(raw, mem.layout.user_pattern("u")):
            assert b"zebra" not in key
            for value in await key_values(raw, key):  # 2 docs: no sealed block
                assert b"zebra" not in value, key
        assert [h.message.content for h in await mem.search("day", user_id="u")] == ["another day"]
    finally:
        await mem.aclose()
