"""Knowledge extracted by real worker processes, off the write path.

The rule extractor end to end (a write, then the fact searchable, and used by
``build_context`` in another session); and the LLM extractor against a fake
chat-completions server answering in 200 ms while worker processes are
SIGKILLed mid-extraction and restarted: every message's memory is added
exactly once (nothing skipped, nothing doubled), and a session cleared while
its extraction runs gets none. On the embedded backend the same jobs run in
an ``InProcessWorker``.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from typing import Any

from helpers import client_kill_storm
from worker_support import (
    FakeChatServer,
    RecordedRequest,
    Reply,
    eventually,
    wait_ready,
    worker_env,
)

from redismem import Memory, RuleExtractor
from redismem.config import WorkerConfig
from redismem.core.queue import QueueStats
from redismem.workers.inprocess import InProcessWorker
from redismem.workers.jobs import MAX_TRIES

NOTE = re.compile(r"\[(\d+)\] \S+ user: remember note (\w+)")


def note_memories(index: int, request: RecordedRequest) -> Reply:
    """One goal per "remember note X" line of the conversation it was sent."""
    found = [
        {"kind": "goal", "text": f"Remember note {word}.", "messages": [int(n)]}
        for n, word in NOTE.findall(request.transcript)
    ]
    return Reply(content=json.dumps({"memories": found}), delay=0.2)


def llm_env(
    url: str, namespace: str, queue_name: str, llm: FakeChatServer, **extra: Any
) -> dict[str, str]:
    """A worker extracting with the LLM extractor on ``llm``, without a quiet period."""
    return worker_env(
        url,
        namespace,
        queue_name,
        EXTRACTOR="llm",
        EXTRACT_QUIET=0,
        LLM_BASE_URL=llm.base_url,
        LLM_MODEL="fake",
        **extra,
    )


async def connect(url: str, namespace: str, queue_name: str) -> Memory:
    return await Memory.connect(
        url, namespace=namespace, queue_name=queue_name, index=True, summarize_batch=None
    )


async def test_rule_extraction_in_a_worker_process_feeds_the_next_session(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    raw = await raw_factory(redis_url)
    env = worker_env(redis_url, namespace, queue_name, EXTRACTOR="rules", EXTRACT_QUIET=0.2)
    await wait_ready(raw, workers.start(env))
    mem = await connect(redis_url, namespace, queue_name)
    try:
        await mem.write(
            [
                {"role": "user", "content": "Hi, my name is Dana and I live in Lisbon."},
                {"role": "assistant", "content": "Nice to meet you, Dana!"},
                {"role": "user", "content": "I prefer trains over planes."},
            ],
            session_id="monday",
            user_id="dana",
        )
        assert await mem.flush(user_id="dana", timeout=30)
        facts = await mem.memories.search(user_id="dana", kinds="fact")
        found = {(f.record.predicate, f.record.object) for f in facts}  # type: ignore[union-attr]
        assert ("lives_in", "Lisbon") in found and ("name", "Dana") in found
        assert all(h.record.sources[0].session_id == "monday" for h in facts)
        await mem.write(
            [{"role": "user", "content": "Actually, I live in Porto now."}],
            session_id="tuesday",
            user_id="dana",
        )
        assert await mem.flush(user_id="dana", timeout=30)
        homes = await mem.memories.search("lives", user_id="dana", kinds="fact", status="any")
        by_object = {h.record.object: h.record for h in homes}  # type: ignore[union-attr]
        assert by_object["Porto"].status == "active"
        assert by_object["Lisbon"].status == "superseded"
        assert by_object["Lisbon"].superseded_by == by_object["Porto"].id
        built = await mem.build_context(
            session_id="wednesday",
            user_id="dana",
            request="Book my trip home",
            max_tokens=1000,
            user_profile=True,
        )
        assert "| lives in: Porto" in built.messages[0].content
        assert "Lisbon" not in built.messages[0].content
    finally:
        await mem.aclose()


async def test_rule_extraction_in_process_on_the_embedded_backend(namespace: str) -> None:
    url = f"memory://extract-{namespace}"
    queue = f"q-{namespace}"
    mem = await connect(url, namespace, queue)
    config = WorkerConfig(
        url=url,
        queue_url=url,
        namespaces=(namespace,),
        queue_name=queue,
        extractor=RuleExtractor(),
        extract_quiet=0,
    )
    try:
        async with InProcessWorker(config=config):
            await mem.write(
                [{"role": "user", "content": "My favorite color is green."}],
                session_id="s1",
                user_id="eve",
            )
            assert await mem.flush(user_id="eve", timeout=30)
            hits = await mem.memories.search("color", user_id="eve")
            assert [(h.record.predicate, h.record.object) for h in hits] == [  # type: ignore[union-attr]
                ("favorite_color", "green")
            ]
    finally:
        await mem.aclose()


async def test_sigkill_mid_extraction_skips_and_doubles_nothing(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    raw = await raw_factory(redis_url)
    sessions, per_session = 12, 4
    with FakeChatServer(note_memories) as llm:
        env = llm_env(redis_url, namespace, queue_name, llm, SWEEP_SECONDS=1, SWEEP_GRACE=1)
        first = workers.start(env)
        await wait_ready(raw, first)
        mem = await connect(redis_url, namespace, queue_name)
        try:
            for s in range(sessions):
                for m in range(per_session):
                    await mem.write(
                        [{"role": "user", "content": f"remember note s{s}m{m}"}],
                        session_id=f"s{s}",
                        user_id="kim",
                    )
            # Kill workers while requests are in flight, twice.
            await llm.wait_requests(3)
            first.kill()
            second = workers.start(env)
            await wait_ready(raw, second)
            await llm.wait_requests(llm.count + 3)
            second.kill()
            await wait_ready(raw, workers.start(env))
            deadline = time.monotonic() + 90
            while not await mem.flush(user_id="kim", timeout=5):
                assert time.monotonic() < deadline, workers.logs()[-3000:]
            hits = await mem.memories.search(user_id="kim", status="any", limit=1000)
            texts = sorted(h.record.text for h in hits)
            # On failure: each session's watermarks and outbox, and the marks.
            diag: list[Any] = []
            for n in range(sessions):
                meta = mem.layout.session("kim", f"s{n}").meta
                diag.append((n, await raw.hmget(meta, "seq", "iwm", "xwm", "xbox")))
            diag.append(await raw.zrange(mem.layout.pending("kim"), 0, -1, withscores=True))
            expected = sorted(
                f"Remember note s{s}m{m}." for s in range(sessions) for m in range(per_session)
            )
            assert texts == expected, diag  # none skipped, none doubled
            for hit in hits:
                assert len(hit.record.sources) == 1
                assert hit.record.sources[0].origin == "llm"
                assert len(await mem.memories.history(hit.record.id, user_id="kim")) == 1
        finally:
            await mem.aclose()


async def test_clearing_a_session_while_it_is_extracted_leaves_no_memory(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    raw = await raw_factory(redis_url)
    release = threading.Event()

    def slow(index: int, request: RecordedRequest) -> Reply:
        reply = note_memories(index, request)
        reply.hold = release
        return reply

    with FakeChatServer(slow) as llm:
        env = llm_env(redis_url, namespace, queue_name, llm)
        await wait_ready(raw, workers.start(env))
        mem = await connect(redis_url, namespace, queue_name)
        try:
            await mem.write(
                [{"role": "user", "content": "remember note secret"}],
                session_id="s1",
                user_id="lee",
            )
            await llm.wait_requests(1)
            await mem.clear(session_id="s1", user_id="lee")
            release.set()
            await asyncio.sleep(1.0)
            assert await mem.flush(user_id="lee", timeout=30)
            assert await mem.memories.search(user_id="lee", status="any") == []
        finally:
            await mem.aclose()


async def test_a_failing_extractor_is_retried_then_shown_in_stats_and_loses_nothing(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    raw = await raw_factory(redis_url)
    broken = {"on": True}

    def flaky(index: int, request: RecordedRequest) -> Reply:
        if broken["on"]:
            return Reply(status=500, body=b'{"error": "overloaded"}')
        return note_memories(index, request)

    with FakeChatServer(flaky) as llm:
        env = llm_env(redis_url, namespace, queue_name, llm)
        await wait_ready(raw, workers.start(env))
        mem = await connect(redis_url, namespace, queue_name)
        try:
            await mem.write(
                [{"role": "user", "content": "remember note first"}],
                session_id="s1",
                user_id="max",
            )
            stats = QueueStats(raw, mem.layout)

            async def given_up() -> bool:
                return bool((await stats.snapshot())["failures"])

            await eventually(given_up, within=30, what="a recorded failure")
            [failure] = (await stats.snapshot())["failures"]
            assert "ExtractorError" in failure["error"] and failure["tries"] == MAX_TRIES
            assert llm.count == MAX_TRIES
            assert await mem.memories.search(user_id="max", status="any") == []
            # The endpoint is back: the session's next write extracts both messages.
            broken["on"] = False
            await mem.write(
                [{"role": "user", "content": "remember note second"}],
                session_id="s1",
                user_id="max",
            )
            assert await mem.flush(user_id="max", timeout=30)
            hits = await mem.memories.search(user_id="max", limit=10)
            assert sorted(h.record.text for h in hits) == [
                "Remember note first.",
                "Remember note second.",
            ]
        finally:
            await mem.aclose()


async def test_extraction_under_a_client_kill_storm_adds_each_memory_once(
    redis_server_factory: Any,
    raw_factory: Any,
    memory_factory: Any,
    namespace: str,
    queue_name: str,
    workers: Any,
) -> None:
    """redis-py and the call policy re-send commands whose connection was
    reset: re-sent extraction commits, outbox applies and memory puts must
    land once."""
    server = redis_server_factory()
    raw = await raw_factory(server.url)
    mem = await memory_factory(
        server.url,
        namespace=namespace,
        queue_name=queue_name,
        summarize_batch=None,
        socket_timeout=1.0,
        retries=20,
    )
    sessions, per_session = 10, 6
    for s in range(sessions):
        await mem.write(
            [{"role": "user", "content": f"I live in Town{s}x{m}"} for m in range(per_session)],
            session_id=f"s{s}",
            user_id="ivy",
        )
    env = worker_env(server.url, namespace, queue_name, EXTRACTOR="rules", EXTRACT_QUIET=0)
    await wait_ready(raw, workers.start(env))
    async with client_kill_storm(server.url, every=0.03) as kills:
        await asyncio.sleep(3.0)
    assert kills[0] > 10
    deadline = time.monotonic() + 90
    while not await mem.flush(user_id="ivy", timeout=5):
        assert time.monotonic() < deadline, workers.logs()[-3000:]
    hits = await mem.memories.search(user_id="ivy", kinds="fact", status="any", limit=1000)
    towns = sorted(h.record.object for h in hits)  # type: ignore[union-attr]
    assert towns == sorted(f"Town{s}x{m}" for s in range(sessions) for m in range(per_session))
    for hit in hits:
        assert len(hit.record.sources) == 1
    # The user lives in one place: the one said last (a session's last
    # message, of the sessions written last), whatever order the sessions
    # were extracted in; every other fact leads to it.
    by_id = {h.record.id: h.record for h in hits}
    [current] = await mem.memories.search(user_id="ivy", kinds="fact", limit=1000)
    said = {}
    for s in range(sessions):
        last = (await mem.read(session_id=f"s{s}", user_id="ivy"))[-1]
        said[f"Town{s}x{per_session - 1}"] = last.created_at
    assert current.record.object in {t for t, at in said.items() if at == max(said.values())}
    for record in by_id.values():
        node, hops = record, 0
        while node.superseded_by is not None and hops <= len(by_id):
            node, hops = by_id[node.superseded_by], hops + 1
        assert node.id == current.record.id
