"""``SyncMemory``: the calls of ``Memory``, blocking, on one background loop per process.

From a plain thread, from inside a running event loop (an ``async def`` test
calling the blocking API, as a notebook cell does), from several threads at
once, and in a forked child; on a real Redis and on ``memory://``.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REDISMEM_ENV, MemoryFactory

from redismem import (
    BackendUnavailable,
    ClientClosed,
    Fact,
    InvalidInput,
    Knowledge,
    LongTermStore,
    Memory,
    SyncMemory,
)
from redismem import sync as sync_module
from redismem.recall import index as recall
from redismem.sync import SyncKnowledge, SyncStore

SyncFactory = Callable[..., SyncMemory]
HI = [{"role": "user", "content": "flight to Oslo on May 3"}]


@pytest.fixture
def make_sync(backend_url: str, namespace: str, clean_env: None) -> Iterator[SyncFactory]:
    """``make_sync(**options)``: a ``SyncMemory`` on the test's backend and
    namespace, closed at teardown."""
    made: list[SyncMemory] = []

    def make(**options: Any) -> SyncMemory:
        options.setdefault("namespace", namespace)
        memory = SyncMemory.connect(backend_url, **options)
        made.append(memory)
        return memory

    yield make
    for memory in made:
        memory.close()


async def _itself(memory: Memory) -> Memory:
    return memory


def _say(text: str, role: str = "user") -> list[dict[str, str]]:
    return [{"role": role, "content": text}]


# -- the calls ------------------------------------------------------------------------------


def test_the_session_calls_from_a_plain_thread(make_sync: SyncFactory) -> None:
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # no loop in this thread
    mem = make_sync()
    entry = mem.write(HI, session_id="s", user_id="alice", tags={"topic": "travel"})
    mem.write(_say("Two direct flights.", "assistant"), session_id="s", user_id="alice")
    assert [m.id for m in entry.messages] == ["000000000001"]
    read = mem.read(session_id="s", user_id="alice")
    assert [m.content for m in read] == ["flight to Oslo on May 3", "Two direct flights."]
    assert mem.read(session_id="s", user_id="alice", limit=1) == read[1:]
    assert mem.read(session_id="s", user_id="alice", tags={"topic": "travel"}) == read[:1]
    assert mem.summary(session_id="s", user_id="alice") is None
    assert mem.context(session_id="s", user_id="alice").messages == read
    entries = mem.entries(session_id="s", user_id="alice")
    assert [e.metadata.tags for e in entries] == [{"topic": "travel"}, {}]
    [info] = mem.sessions(user_id="alice")
    assert (info.session_id, info.message_count) == ("s", 2)
    built = mem.build_context(session_id="s", user_id="alice", request="and back?", max_tokens=200)
    assert built.messages[-1].content == "and back?"
    mem.ping()

    # Recall: indexed here (what the workers do), then searched.
    mem.run(lambda m: recall.catch_up(m.backend, user_id="alice", session_id="s"))
    [hit, *_] = mem.search("Oslo flight", user_id="alice")
    assert hit.message.content == "flight to Oslo on May 3"
    assert mem.flush(user_id="alice", timeout=5) is True

    assert mem.clear(session_id="s", user_id="alice") > 0
    assert mem.read(session_id="s", user_id="alice") == []
    mem.write(HI, session_id="t", user_id="bob")
    assert mem.clear_user("bob") > 0
    assert mem.sessions(user_id="bob") == []


def test_the_store_and_the_memories_views(make_sync: SyncFactory) -> None:
    mem = make_sync()
    store = mem.store
    assert isinstance(store, SyncStore) and isinstance(mem.memories, SyncKnowledge)
    item = store.put(("alice", "prefs"), "drink", {"text": "tea, no sugar"})
    assert item.version == 1
    store.put(("alice", "prefs"), "seat", {"text": "aisle seat"})
    got = store.get(("alice", "prefs"), "drink")
    assert got is not None and got.value == {"text": "tea, no sugar"}
    assert [i.key for i in store.search(("alice",), query="tea")] == ["drink"]
    assert store.list_namespaces(prefix=("alice",)) == [("alice", "prefs")]
    store.delete(("alice", "prefs"), "seat")
    assert store.get(("alice", "prefs"), "seat") is None
    assert [v.version for v in store.history(("alice", "prefs"), "seat")] == [1, 2]
    assert store.purge_item(("alice", "prefs"), "seat") is True
    assert store.purge(("alice",)) > 0
    assert store.get(("alice", "prefs"), "drink") is None

    memories = mem.memories
    fact = Fact(text="The user lives in Lisbn.", subject="user", predicate="lives_in", object="X")
    added = memories.add(fact, user_id="alice")
    mid = added.record.id
    fixed = memories.update(mid, user_id="alice", text="The user lives in Lisbon.", reason="typo")
    assert isinstance(fixed, Fact) and fixed.text == "The user lives in Lisbon."
    assert [h.record.id for h in memories.search("Lisbon", user_id="alice")] == [mid]
    assert [f.id for f in memories.profile(user_id="alice")] == [mid]
    assert memories.delete(mid, user_id="alice", reason="asked") is True
    assert memories.restore(mid, user_id="alice") is True
    assert [c.change for c in memories.history(mid, user_id="alice")][:2] == ["added", "updated"]
    got_fact = memories.get(mid, user_id="alice")
    assert got_fact is not None and got_fact.status == "active"
    assert memories.purge(user_id="alice") >= 1
    assert memories.get(mid, user_id="alice") is None


async def test_the_blocking_calls_inside_a_running_loop(
    make_sync: SyncFactory, make_memory: MemoryFactory
) -> None:
    # A notebook cell: this thread runs an event loop, and calls the sync API.
    asyncio.get_running_loop()
    mem = make_sync()
    mem.write(HI, session_id="s")
    assert [m.content for m in mem.read(session_id="s")] == ["flight to Oslo on May 3"]
    assert mem.store.put(("alice",), "k", {"v": 1}).version == 1
    # An async Memory on this loop, same backend and namespace, sees the same data.
    other = await make_memory()
    assert await other.read(session_id="s") == mem.read(session_id="s")
    await other.write(_say("and back?"), session_id="s")
    assert len(mem.read(session_id="s")) == 2
    # The loop goes on running between calls (nothing of it is blocked for good).
    assert await asyncio.wait_for(asyncio.sleep(0, "tick"), 1) == "tick"
    # A sync framework API called from async code, in another thread with its own loop.
    assert await asyncio.to_thread(lambda: asyncio.run(_read_in_a_loop(mem))) == 2
    assert mem.store.purge(("alice",)) == 1


async def _read_in_a_loop(mem: SyncMemory) -> int:
    return len(mem.read(session_id="s"))


def test_concurrent_calls_from_several_threads(make_sync: SyncFactory) -> None:
    mem = make_sync()
    threads, writes = 8, 20
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        try:
            start.wait()
            for i in range(writes):
                mem.write(_say(f"{n}:{i}"), session_id=f"own-{n}")
                mem.write(_say(f"{n}:{i}"), session_id="shared")
                assert len(mem.read(session_id=f"own-{n}", limit=3)) == min(i + 1, 3)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)
    assert errors == []
    for n in range(threads):
        own = [m.content for m in mem.read(session_id=f"own-{n}")]
        assert own == [f"{n}:{i}" for i in range(writes)]
    shared = [m.content or "" for m in mem.read(session_id="shared")]
    assert sorted(shared) == sorted(f"{n}:{i}" for n in range(threads) for i in range(writes))
    for n in range(threads):  # each thread's writes in the order it made them
        mine = [c for c in shared if c.startswith(f"{n}:")]
        assert mine == [f"{n}:{i}" for i in range(writes)]


# -- errors ---------------------------------------------------------------------------------


def test_errors_are_the_librarys_raised_in_the_callers_thread(make_sync: SyncFactory) -> None:
    mem = make_sync()
    with pytest.raises(InvalidInput, match="messages must not be empty") as caught:
        mem.write([], session_id="s")
    frames = traceback.extract_tb(caught.value.__traceback__)
    # The caller's frame, and the frame in the library that raised it.
    assert frames[0].name == "test_errors_are_the_librarys_raised_in_the_callers_thread"
    assert frames[-1].filename.endswith(os.path.join("redismem", "client.py"))
    with pytest.raises(InvalidInput):
        mem.read(session_id="")
    with pytest.raises(InvalidInput, match="unknown option"):
        SyncMemory.connect("memory://", no_such_option=1)
    with pytest.raises(BackendUnavailable):
        SyncMemory.connect("redis://127.0.0.1:1/0", retries=0, connect_timeout=0.2)
    mem.write(HI, session_id="s")  # the client is fine after errors
    assert len(mem.read(session_id="s")) == 1


def test_a_call_on_the_background_loop_raises_instead_of_deadlocking(
    make_sync: SyncFactory,
) -> None:
    seen: list[str] = []
    holder: list[SyncMemory] = []

    def hook(**_: Any) -> None:  # runs on the background loop, where the Memory lives
        for call in (
            lambda: holder[0].read(session_id="s"),
            lambda: holder[0].store.get(("alice",), "k"),
            lambda: holder[0].run(_itself),
            lambda: SyncMemory.connect("memory://"),
        ):
            try:
                call()
            except RuntimeError as exc:
                seen.append(str(exc))

    mem = make_sync(on_write=hook)
    holder.append(mem)
    mem.write(HI, session_id="s")
    assert len(seen) == 4
    assert all("background event loop" in text for text in seen)
    assert "SyncMemory.read()" in seen[0] and "await memory.read(" in seen[0]
    assert "SyncMemory.store.get()" in seen[1] and "await memory.store.get(" in seen[1]
    assert "await Memory.connect()" in seen[3]
    assert len(mem.read(session_id="s")) == 1  # and nothing is stuck


# -- lifecycle ------------------------------------------------------------------------------


def test_closing_is_idempotent(make_sync: SyncFactory) -> None:
    mem = make_sync()
    inner = mem.run(_itself)
    with mem as same:
        assert same is mem
        mem.write(HI, session_id="s")
    assert mem.closed and inner.closed
    mem.close()
    with mem:
        pass
    asyncio.run(mem.aclose())
    with pytest.raises(ClientClosed):
        mem.read(session_id="s")
    with pytest.raises(ClientClosed):
        mem.store.get(("alice",), "k")
    assert "SyncMemory(url=" in repr(mem)


async def test_aclose_does_not_block_the_callers_loop(make_sync: SyncFactory) -> None:
    mem = make_sync()
    inner = mem.run(_itself)
    await mem.aclose()
    await mem.aclose()
    assert mem.closed and inner.closed


def test_a_client_made_from_a_config_connects_on_first_use(
    make_sync: SyncFactory, backend_url: str
) -> None:
    first = make_sync()
    second = SyncMemory(first.config)
    try:
        first.write(HI, session_id="s")
        assert second.read(session_id="s") == first.read(session_id="s")
    finally:
        second.close()


def test_a_dropped_client_is_closed_in_the_background(backend_url: str, namespace: str) -> None:
    mem = SyncMemory.connect(backend_url, namespace=namespace)
    mem.ping()  # no write: its job, enqueued while the client closes, could outlive the test
    inner = mem.run(_itself)
    del mem
    gc.collect()
    deadline = time.monotonic() + 5
    while not inner.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inner.closed


# -- fork and exit --------------------------------------------------------------------------


def _in_child(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child; its JSON result (or error) comes back."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # 3.12+: forking a process with threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        code = 0
        try:
            os.close(read_end)
            try:
                out: Any = {"result": work()}
            except BaseException as exc:
                out = {"error": "".join(traceback.format_exception(exc))}
                code = 1
            with os.fdopen(write_end, "w") as pipe:
                json.dump(out, pipe)
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    found = json.loads(text)
    assert "error" not in found, found["error"]
    assert os.waitstatus_to_exitcode(status) == 0
    return found["result"]


def test_a_forked_child_gets_its_own_loop(
    make_sync: SyncFactory, backend_url: str, is_embedded: bool
) -> None:
    mem = make_sync()
    mem.write(_say("before the fork"), session_id="s")
    parent_loop = sync_module.background_loop()

    def child() -> dict[str, Any]:
        loop = sync_module.background_loop()
        # The parent's client works here, on a connection of its own.
        before = [m.content for m in mem.read(session_id="s")]
        mem.write(_say("from the child"), session_id="s")
        fresh = SyncMemory.connect(backend_url, namespace=mem.layout.namespace)
        seen = [m.content for m in fresh.read(session_id="s")]
        fresh.close()
        mem.close()  # the child's connection; the parent's stays open
        return {
            "new_loop": loop is not parent_loop and loop.pid == os.getpid(),
            "thread": loop.in_loop_thread() is False and loop.loop.is_running(),
            "before": before,
            "seen": seen,
        }

    got = _in_child(child)
    assert got == {
        "new_loop": True,
        "thread": True,
        "before": ["before the fork"],
        "seen": ["before the fork", "from the child"],
    }
    # The parent goes on with its own loop and connection; on a real Redis it
    # sees the child's write (memory:// data is the process's own).
    assert sync_module.background_loop() is parent_loop and not mem.closed
    contents = [m.content for m in mem.read(session_id="s")]
    expected = ["before the fork"] if is_embedded else ["before the fork", "from the child"]
    assert contents == expected


EXIT_SCRIPT = """
import sys, threading, time
from redismem import SyncMemory

url, namespace = sys.argv[1], sys.argv[2]
closed = SyncMemory.connect(url, namespace=namespace)
left_open = SyncMemory.connect(url, namespace=namespace)
left_open.write([{"role": "user", "content": "hi"}], session_id="s")

def in_flight():
    try:
        left_open.flush(timeout=60)  # nothing flushes: still waiting at exit
    except BaseException as exc:
        print("in flight:", type(exc).__name__, flush=True)

threading.Thread(target=in_flight, daemon=True).start()
time.sleep(0.3)
closed.close()
print("exiting", flush=True)
"""


@pytest.mark.processes
def test_process_exit_does_not_hang(
    backend_url: str, namespace: str, clean_env: None, tmp_path: Path
) -> None:
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in REDISMEM_ENV}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(script), backend_url, namespace],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "exiting" in result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert took < 15, took


# -- the API is Memory's --------------------------------------------------------------------


def _async_methods(obj: object) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(obj, name))
        for name in dir(obj)
        if not name.startswith("_") and inspect.iscoroutinefunction(getattr(obj, name))
    }


def _sync_methods(obj: object) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(obj, name))
        for name in dir(obj)
        if not name.startswith("_")
        and inspect.ismethod(getattr(obj, name))
        and not inspect.iscoroutinefunction(getattr(obj, name))
    }


def test_every_async_call_has_a_blocking_twin_with_its_parameters() -> None:
    # A new public async method of Memory, its store or its memories cannot
    # be forgotten here silently.
    mem = SyncMemory.connect("memory://signatures")
    try:
        memory = mem.run(_itself)
        pairs: list[tuple[object, object, set[str]]] = [
            # (async object, its sync view, what the sync side adds)
            (memory, mem, {"close", "run"}),
            (memory.store, mem.store, set()),
            (memory.memories, mem.memories, set()),
        ]
        for async_side, sync_side, extra in pairs:
            wanted = _async_methods(async_side)
            have = _sync_methods(sync_side)
            if async_side is memory:
                # The lifecycle: connect is a classmethod returning the sync
                # client; aclose is close() (aclose too, for async callers).
                assert list(wanted.pop("connect").parameters.values()) == list(
                    have.pop("connect").parameters.values()
                )
                wanted.pop("aclose")
                assert inspect.iscoroutinefunction(mem.aclose)
            assert set(have) - set(wanted) == extra, type(sync_side)
            for name, signature in wanted.items():
                assert name in have, f"{type(sync_side).__name__}.{name} is missing"
                assert have[name] == signature, name
                method = getattr(type(sync_side), name)
                assert method.__doc__ == getattr(async_side, name).__doc__, name
                assert method.__qualname__ == f"{type(sync_side).__name__}.{name}"
        assert {"put", "search"} <= set(_async_methods(memory.store))
        assert isinstance(memory.store, LongTermStore)
        assert isinstance(memory.memories, Knowledge)
    finally:
        mem.close()


def test_help_shows_the_real_parameters() -> None:
    signature = inspect.signature(SyncMemory.write)
    assert list(signature.parameters)[:3] == ["self", "messages", "session_id"]
    assert signature.return_annotation == "MemoryEntry"
    assert inspect.signature(SyncMemory.search).return_annotation == "list[Hit]"
    assert SyncMemory.search.__doc__ == recall.search.__doc__
