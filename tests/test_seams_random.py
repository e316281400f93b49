"""The seams under fire: a randomized run of every writer at once.

Writes, reads, session clears, ``clear_user``, store puts, and the workers'
indexing, extraction (rule extractor) and summarization, all together, on a
disposable ``redis-server``, while worker processes are SIGKILLed and
restarted and every connection is killed (``CLIENT KILL``) again and again.
After quiescence:

* nothing cleared is readable anywhere: a write (or store put) that ended
  before the last clear covering it began is in no session, no search hit,
  no memory and no store item; no key of a cleared epoch is left;
* every write acknowledged after the last clear covering it is readable, and
  every stored message is indexed exactly once, with its own text;
* at most one active value per single-valued predicate.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from helpers import client_kill_storm
from worker_support import wait_ready, worker_env

from redismem import Memory
from redismem.errors import BackendUnavailable

USERS = ["ann", "bo", "cy"]
SESSIONS = [f"s{i}" for i in range(5)]
RUN_SECONDS = 12.0
TOWN = re.compile(r"Town(\d+)")


@dataclass
class Counters:
    """Clears of one scope (a user, or a session): begun and ended."""

    begun: int = 0
    ended: int = 0


@dataclass
class Done:
    """An acknowledged write or put, and the clears around it."""

    user: str
    session: str | None
    n: int
    #: Clears of the user / the session that had ended when it began.
    user_ended_before: int
    session_ended_before: int
    #: Clears of the user / the session that had begun when it ended.
    user_begun_after: int
    session_begun_after: int


@dataclass
class Run:
    seed: int
    rng: random.Random = field(init=False)
    user_clears: dict[str, Counters] = field(default_factory=dict)
    session_clears: dict[tuple[str, str], Counters] = field(default_factory=dict)
    writes: list[Done] = field(default_factory=list)
    puts: list[Done] = field(default_factory=list)
    counter: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.user_clears = {u: Counters() for u in USERS}
        self.session_clears = {(u, s): Counters() for u in USERS for s in SESSIONS}

    def next(self) -> int:
        self.counter += 1
        return self.counter

    def begin(self, user: str, session: str | None) -> tuple[int, int]:
        sc = self.session_clears[user, session].ended if session else 0
        return self.user_clears[user].ended, sc

    def end(self, user: str, session: str | None, n: int, before: tuple[int, int]) -> Done:
        sc = self.session_clears[user, session].begun if session else 0
        return Done(user, session, n, before[0], before[1], self.user_clears[user].begun, sc)

    def must_be_gone(self, done: Done) -> bool:
        """It ended before the last clear covering it began."""
        if done.user_begun_after < self.user_clears[done.user].begun:
            return True
        if done.session is None:
            return False
        return done.session_begun_after < self.session_clears[done.user, done.session].begun

    def must_be_kept(self, done: Done) -> bool:
        """It began after every clear covering it had ended."""
        if done.user_ended_before != self.user_clears[done.user].ended:
            return False
        if done.session is None:
            return True
        return done.session_ended_before == self.session_clears[done.user, done.session].ended


async def retrying(call: Any) -> Any:
    """A call retried through outages with the same arguments (writes carry
    a write id, so a retried one lands once)."""
    for _ in range(20):
        try:
            return await call()
        except BackendUnavailable:
            await asyncio.sleep(0.05)
    raise AssertionError("the server stayed unreachable")


async def test_every_writer_at_once_under_kills(
    redis_server_factory: Any, workers: Any, raw_factory: Any, namespace: str
) -> None:
    server = redis_server_factory()
    url = f"redis://127.0.0.1:{server.port}/0"
    queue = f"redismem/queue-{namespace}"
    raw = await raw_factory(url)
    env = worker_env(url, namespace, queue, EXTRACTOR="rules", EXTRACT_QUIET=0.2)
    pool = [workers.start(env) for _ in range(2)]
    for worker in pool:
        await wait_ready(raw, worker)
    mem = await Memory.connect(
        url,
        namespace=namespace,
        queue_name=queue,
        index=True,
        keep_recent=4,
        summarize_batch=4,
        compact=False,
        summarize_delay=0.1,
    )
    run = Run(seed=int(time.time()))
    stop = asyncio.Event()

    async def writer() -> None:
        while not stop.is_set():
            user, session = run.rng.choice(USERS), run.rng.choice(SESSIONS)
            n = run.next()
            text = f"w{n} I live in Town{n}." if run.rng.random() < 0.3 else f"w{n} talk of kites"
            before = run.begin(user, session)
            wid = f"rw-{n}"
            await retrying(
                lambda text=text, session=session, user=user, wid=wid: mem.write(
                    [{"role": "user", "content": text}],
                    session_id=session,
                    user_id=user,
                    write_id=wid,
                )
            )
            run.writes.append(run.end(user, session, n, before))
            await asyncio.sleep(run.rng.random() * 0.02)

    async def reader() -> None:
        while not stop.is_set():
            user, session = run.rng.choice(USERS), run.rng.choice(SESSIONS)
            await retrying(
                lambda session=session, user=user: mem.read(
                    session_id=session, user_id=user, limit=5
                )
            )
            await retrying(lambda user=user: mem.search("kites", user_id=user, limit=5))
            await asyncio.sleep(0.01)

    async def putter() -> None:
        while not stop.is_set():
            user = run.rng.choice(USERS)
            n = run.next()
            before = run.begin(user, None)
            await retrying(
                lambda user=user, n=n: mem.store.put(
                    (user, "notes"), f"k{n}", {"n": n}, write_id=f"rp-{n}"
                )
            )
            run.puts.append(run.end(user, None, n, before))
            await asyncio.sleep(run.rng.random() * 0.05)

    checkpoints: list[tuple[str, str]] = []  # (thread, checkpoint id) acknowledged

    async def checkpointer() -> None:
        from redismem.adapters.langgraph import RedisMemSaver

        saver = RedisMemSaver(mem)
        while not stop.is_set():
            thread, n = f"thread-{run.rng.randrange(3)}", run.next()
            checkpoint: Any = {
                "v": 1,
                "id": f"{n:08d}",
                "ts": "",
                "channel_values": {"n": n},
                "channel_versions": {"n": n},
                "versions_seen": {},
                "updated_channels": None,
            }
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            await retrying(
                lambda config=config, checkpoint=checkpoint, n=n: saver.aput(
                    config, checkpoint, {"step": n}, {"n": n}
                )
            )
            checkpoints.append((thread, checkpoint["id"]))
            await asyncio.sleep(run.rng.random() * 0.05)

    async def session_clearer() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.2 + run.rng.random() * 0.4)
            user, session = run.rng.choice(USERS), run.rng.choice(SESSIONS)
            counters = run.session_clears[user, session]
            counters.begun += 1
            await retrying(
                lambda session=session, user=user: mem.clear(session_id=session, user_id=user)
            )
            counters.ended += 1

    async def user_clearer() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.6 + run.rng.random() * 0.8)
            user = run.rng.choice(USERS)
            counters = run.user_clears[user]
            counters.begun += 1
            await retrying(lambda user=user: mem.clear_user(user))
            counters.ended += 1

    async def chaos() -> None:
        while not stop.is_set():
            await asyncio.sleep(1.0 + run.rng.random())
            victim = run.rng.randrange(len(pool))
            pool[victim].process.send_signal(signal.SIGKILL)
            pool[victim].process.wait(timeout=10)
            pool[victim] = workers.start(env)

    async def timer() -> None:
        await asyncio.sleep(RUN_SECONDS)
        stop.set()

    try:
        async with client_kill_storm(url, every=0.4) as kills:
            await asyncio.gather(
                timer(),
                chaos(),
                user_clearer(),
                session_clearer(),
                putter(),
                checkpointer(),
                reader(),
                *(writer() for _ in range(4)),
            )
        assert kills[0] > 0
        # Quiescence: live workers, and every user's due work done.
        for worker in pool:
            await wait_ready(raw, worker)
        for user in USERS:
            assert await mem.flush(user_id=user, timeout=90), f"flush of {user} (seed {run.seed})"
        await check(run, mem, raw)
        # Threads are not users: clear_user leaves them, and every
        # acknowledged checkpoint is there, its values whole.
        from redismem.adapters.langgraph import RedisMemSaver

        saver = RedisMemSaver(mem)
        assert checkpoints
        for thread, checkpoint_id in checkpoints:
            config: Any = {
                "configurable": {
                    "thread_id": thread,
                    "checkpoint_ns": "",
                    "checkpoint_id": checkpoint_id,
                }
            }
            found = await saver.aget_tuple(config)
            assert found is not None, (thread, checkpoint_id, run.seed)
            assert found.checkpoint["channel_values"] == {"n": int(checkpoint_id)}
        await mem.clear_all()
    finally:
        await mem.aclose()


async def check(run: Run, mem: Memory, raw: Any) -> None:
    why = f"(seed {run.seed})"
    assert any(run.must_be_kept(w) for w in run.writes), why
    assert sum(c.ended for c in run.user_clears.values()) > 0, why
    for user in USERS:
        stored: dict[tuple[str, str], str] = {}
        for info in await mem.sessions(user_id=user):
            for message in await mem.read(session_id=info.session_id, user_id=user):
                stored[info.session_id, message.id or ""] = message.content
        texts = {text.split(" ", 1)[0]: ident for ident, text in stored.items()}
        indexed: dict[tuple[str, str], list[str]] = {}
        for session in SESSIONS:
            for hit in await mem.search(None, user_id=user, session_id=session, limit=1000):
                ident = (hit.session_id, hit.message.id or "")
                indexed.setdefault(ident, []).append(hit.message.content)
        for done in (w for w in run.writes if w.user == user):
            key = f"w{done.n}"
            if run.must_be_kept(done):
                assert key in texts, f"acknowledged write {key} of {user} lost {why}"
            if run.must_be_gone(done):
                assert key not in texts, f"cleared write {key} of {user} still stored {why}"
                hits = await mem.search(key, user_id=user, limit=5)
                assert all(not h.message.content.startswith(key + " ") for h in hits), why
        assert set(indexed) == set(stored), f"stored vs indexed differ for {user} {why}"
        for ident, contents in indexed.items():
            assert contents == [stored[ident]], f"{ident} indexed as {contents} {why}"
        # Knowledge: none from a cleared write; one current home at most.
        records = await mem.memories.search(user_id=user, status="any", limit=1000)
        gone = {f"Town{w.n}" for w in run.writes if w.user == user and run.must_be_gone(w)}
        for hit in records:
            assert not (set(TOWN.findall(hit.record.text)) & {g[4:] for g in gone}), (
                f"memory {hit.record.text!r} of {user} outlived its clear {why}"
            )
        active_homes = [
            h
            for h in records
            if h.record.status == "active" and getattr(h.record, "predicate", "") == "lives_in"
        ]
        assert len(active_homes) <= 1, f"{len(active_homes)} active homes for {user} {why}"
        # Store items: kept after the last clear, gone before it.
        for done in (p for p in run.puts if p.user == user):
            item = await mem.store.get((user, "notes"), f"k{done.n}")
            if run.must_be_kept(done):
                assert item is not None and item.value == {"n": done.n}, why
            if run.must_be_gone(done):
                assert item is None, f"store item k{done.n} of {user} outlived its clear {why}"
        # No key of a cleared epoch is left.
        epoch = mem.backend.epochs.get(user)
        async for raw_key in raw.scan_iter(match=mem.layout.user_pattern(user), count=1000):
            parsed = mem.layout.parse_key(raw_key.decode())
            assert parsed.kind == "guard" or parsed.epoch == epoch, f"{raw_key!r} left {why}"
