"""Recall benchmark: ``Memory.search`` over what the workers index.

Everything is written through ``Memory.write`` as agents would, indexed by
real workers (two ``arq workers.WorkerSettings`` processes; with
``--embedded``, two ``InProcessWorker`` on the embedded backend), and read
back through ``Memory.search``:

a. LoCoMo evidence recall@5/10/20 (``--data``, default ``../shared/data/locomo``;
   skipped with a message when absent). One user per conversation, one session
   per LoCoMo session, one write per turn: role "user" for speaker_a and
   "assistant" for speaker_b, ``name`` = the speaker, content = the text (plus
   `` [shares: <blip_caption>]`` when an image was shared), ``metadata`` =
   ``{"dia_id": ...}``, each write dated with its session's ``date_time``
   (``created_at``: the conversation happened then; the time of day is read
   as UTC). Every question of categories 1-4 with evidence is asked
   with ``search(question, user_id=conversation, limit=20)``; it counts at k
   when any evidence turn is among the top k.
b. Search latency p50/p99 for one user holding 10,000 and (not with
   ``--quick``) 100,000 indexed messages: synthetic text over a Zipf-distributed
   vocabulary, written 100 messages per write over many sessions; queries of
   1-4 words from the corpus vocabulary, half drawn by corpus frequency, half
   uniformly over its distinct words.
c. Index lag p50/p95 under ~500 writes/s for 20 s (5 s with ``--quick``) with
   the two workers: from ``write`` returning to ``search`` finding the
   message's unique token (every 5th write is followed; a poller asks for the
   followed tokens every 20 ms). The clients use the default quiet period of
   the jobs (``summarize_delay``, 1 s) unless ``--lag-delay`` says otherwise.
d. Write throughput of 16 tasks with ``index=True`` against ``index=False``,
   in the same run, rounds alternating, workers running; after each phase the
   background work is flushed (untimed), so no phase shares the CPU with the
   indexing of the one before.
e. Redis memory (``MEMORY USAGE``) per indexed message (the user's recall
   index keys, via SCAN: format 1's ``:r:``, format 2's ``:i:`` with its parts),
   the session copy (``:s:`` keys outside the index, whose session filters
   ``r:f:s:``/``i:f:s:`` match ``:s:`` too) and per stored item of the
   long-term store (1,000 small ``mem.store.put``; its ``:kv:`` keys).

``--sizes 10000,100000,1000000`` sets the latency users' sizes (1,000,000
messages: ~0.5 GB of Redis and tens of minutes of writing and indexing);
``--only latency`` skips the LoCoMo, lag, throughput and store parts.

By default a throwaway ``redis-server`` is started on a free loopback port;
``--url`` (or ``$REDISMEM_BENCH_URL``) uses an existing server, writing only
under the namespace ``benchrecall`` (cleared at the end) and the queue
``redismem/bench-recall``.

    .venv/bin/python bench/bench_recall.py             # full run, ~5 min on 2 cores
    .venv/bin/python bench/bench_recall.py --quick     # smoke run, < 1.5 min
    .venv/bin/python bench/bench_recall.py --embedded  # embedded backend, in-process workers
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC
from pathlib import Path
from typing import Any

import msgpack
from _locomo import CATEGORIES, DEFAULT_DATA, KS, Conversation, Turn, load
from _util import (
    WORDS,
    Table,
    conversation,
    median,
    package_version,
    percentile,
    throughput,
    write_json,
)
from locomo_offline import run_baseline

from redismem import Memory, Message
from redismem.core.codec import ROLE_CODE, encode_message, ms_to_datetime
from redismem.recall import postings, ranking
from redismem.recall.terms import STOP_WORDS

ROOT = Path(__file__).resolve().parents[1]

NAMESPACE = "benchrecall"
QUEUE = "redismem/bench-recall"
WORKERS = 2
FILL_DELAY = 0.05  # quiet period of the jobs while filling (not measured)

Log = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # messages of the latency users
    queries: int  # timed queries per size
    lag_seconds: float
    lag_rate: float  # writes/s
    tp_ops: int  # writes per task and round (throughput)
    tp_rounds: int
    store_items: int
    smoke: bool = False


FULL = Plan(
    sizes=(10_000, 100_000),
    queries=1000,
    lag_seconds=20,
    lag_rate=500,
    tp_ops=300,
    tp_rounds=5,
    store_items=1000,
)
QUICK = Plan(
    sizes=(10_000,),
    queries=500,
    lag_seconds=5,
    lag_rate=500,
    tp_ops=60,
    tp_rounds=2,
    store_items=1000,
    smoke=True,
)


# -- the workers ------------------------------------------------------------------


class Background:
    """Two workers on the namespace: processes on a Redis server, or
    ``InProcessWorker`` tasks on the embedded backend."""

    def __init__(self, url: str, count: int = WORKERS, embedder: str | None = None) -> None:
        self.url = url
        self.count = count
        self.embedder = embedder
        self.processes: list[asyncio.subprocess.Process] = []
        self.in_process: list[Any] = []
        self.logdir = tempfile.TemporaryDirectory(prefix="bench-recall-workers-")

    @property
    def embedded(self) -> bool:
        return self.url.startswith("memory://")

    async def start(self, probe: Memory) -> None:
        if self.embedded:
            from redismem.config import WorkerConfig
            from redismem.summarization.summarizers import TruncationSummarizer
            from redismem.workers.inprocess import InProcessWorker

            for _ in range(self.count):
                worker = InProcessWorker(
                    config=WorkerConfig(
                        url=self.url,
                        summarizer=TruncationSummarizer(),
                        namespaces=(NAMESPACE,),
                        queue_name=QUEUE,
                        embedder=self.embedder,
                    )
                )
                await worker.start()
                self.in_process.append(worker)
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
        env.update(
            PYTHONUNBUFFERED="1",
            REDISMEM_URL=self.url,
            REDISMEM_NAMESPACE=NAMESPACE,
            REDISMEM_QUEUE_NAME=QUEUE,
            REDISMEM_SUMMARIZER="truncate",
        )
        if self.embedder:
            env["REDISMEM_EMBEDDER"] = self.embedder
        for i in range(self.count):
            log = open(Path(self.logdir.name) / f"worker{i}.log", "wb")  # noqa: SIM115, ASYNC230
            self.processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "arq",
                    "workers.WorkerSettings",
                    env=env,
                    cwd=ROOT,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                )
            )
            log.close()
        deadline = time.monotonic() + 30
        while await probe.redis.zcard(f"{QUEUE}:workers") < self.count:
            dead = [p for p in self.processes if p.returncode is not None]
            if dead or time.monotonic() > deadline:
                raise SystemExit(f"the workers did not start:\n{self.logs()}")
            await asyncio.sleep(0.1)

    def pause(self, paused: bool) -> bool:
        """SIGSTOP (or SIGCONT) the worker processes; False on the embedded
        backend, whose workers run in this process."""
        if not self.processes:
            return False
        for process in self.processes:
            if process.returncode is None:
                process.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)
        return True

    def logs(self) -> str:
        out = []
        for path in sorted(Path(self.logdir.name).glob("*.log")):
            out.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    async def stop(self) -> None:
        for worker in self.in_process:
            await worker.aclose()
        for process in self.processes:
            if process.returncode is None:
                process.terminate()
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        self.logdir.cleanup()


async def flushed(mem: Memory, background: Background, within: float, **kwargs: Any) -> float:
    """Seconds ``flush`` took; exits with the worker logs when it times out."""
    started = time.perf_counter()
    if not await mem.flush(timeout=within, **kwargs):
        raise SystemExit(f"flush() timed out after {within} s\n{background.logs()}")
    return time.perf_counter() - started


# -- (a) LoCoMo ---------------------------------------------------------------------


def _message(turn: Turn) -> dict[str, Any]:
    """A LoCoMo turn as an agent writes it: its dia_id in the metadata."""
    return {
        "role": turn.role,
        "name": turn.name,
        "content": turn.content,
        "metadata": {"dia_id": turn.dia_id},
    }


@dataclass
class LocomoResult:
    first_hits: dict[str, list[tuple[int, int]]]  # conversation -> (category, position)
    turns: int
    index_seconds: float
    #: conversation -> position of the first evidence turn, plain BM25 over single
    #: turns (``locomo_offline.run_baseline``, the data README's baseline), same questions
    baseline: dict[str, list[int]] = field(default_factory=dict)


async def locomo(mem: Memory, background: Background, data: Path, log: Log) -> LocomoResult | str:
    if not data.is_dir() or not any(data.glob("*.json")):  # noqa: ASYNC240 - before timing
        return f"skipped: no LoCoMo data at {data} (pass --data DIR)"
    convs = load(data)
    log(f"LoCoMo: writing {sum(len(c.turns) for c in convs)} turns of {len(convs)} conversations")

    async def write_conv(conv: Conversation) -> None:
        by_session: dict[int, list[Turn]] = defaultdict(list)
        for turn in conv.turns:
            by_session[turn.session].append(turn)

        async def one_session(n: int, turns: list[Turn]) -> None:
            for turn in turns:  # one write per turn, in order, dated as it was said
                await mem.write(
                    [_message(turn)],
                    session_id=f"session_{n}",
                    user_id=f"locomo-{conv.sample}",
                    created_at=turn.created and turn.created.replace(tzinfo=UTC),
                )

        await asyncio.gather(*(one_session(n, t) for n, t in by_session.items()))

    await asyncio.gather(*(write_conv(c) for c in convs))
    seconds = await flushed(mem, background, 300)
    log(f"LoCoMo: indexed ({seconds:.1f} s after the last write); asking the questions")
    first: dict[str, list[tuple[int, int]]] = {}
    for conv in convs:
        found = []
        for q in conv.questions:
            hits = await mem.search(q.text, user_id=f"locomo-{conv.sample}", limit=max(KS))
            dia = [h.message.metadata.get("dia_id") for h in hits]
            pos = next((i for i, d in enumerate(dia, start=1) if d in q.evidence), 10**9)
            found.append((q.category, pos))
        first[conv.sample] = found
    baseline = {conv.sample: run_baseline(conv) for conv in convs}
    return LocomoResult(first, sum(len(c.turns) for c in convs), seconds, baseline)


def recall_at(positions: Sequence[int], k: int) -> float:
    return sum(p <= k for p in positions) / len(positions) if positions else float("nan")


# -- (b) latency ---------------------------------------------------------------------

_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """``size`` words: real English first (the frequent ones), then made-up
    words of 2-4 syllables; rank order = Zipf rank."""
    words = list(dict.fromkeys(WORDS))
    seen = set(words)
    while len(words) < size:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Corpus:
    """Synthetic messages over a Zipf(1.07) vocabulary of 30,000 words."""

    def __init__(self, seed: int = 11, size: int = 30_000) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(size, self.rng)
        self.cum = list(itertools.accumulate(1.0 / (r**1.07) for r in range(1, size + 1)))

    def text(self) -> str:
        n = self.rng.randint(6, 40)
        words = self.rng.choices(self.words, cum_weights=self.cum, k=n)
        return " ".join(words).capitalize() + "."

    def queries(self, count: int, used: set[str]) -> list[str]:
        """1-4 content words each; half by frequency, half uniform over ``used``."""
        content = sorted(w for w in used if w not in STOP_WORDS)
        out = []
        for i in range(count):
            n = self.rng.randint(1, 4)
            if i % 2 == 0:
                picked: list[str] = []
                while len(picked) < n:
                    word = self.rng.choices(self.words, cum_weights=self.cum, k=1)[0]
                    if word not in STOP_WORDS:
                        picked.append(word)
            else:
                picked = self.rng.sample(content, n)
            out.append(" ".join(picked))
        return out


async def direct_fill(mem: Memory, uid: str, texts: list[str], log: Log) -> None:
    """The user's format-2 index written straight into Redis, as the workers
    would write it for ``fill_user``'s sessions (``ranking.doc_weights`` with
    the session's previous messages, ``postings``' layouts), without the
    session copies: search latency at sizes the indexing pass takes too long
    to fill on a shared machine (``--fill direct``)."""
    prefix = mem.layout.user_prefix(uid)
    lists: dict[str, bytearray] = {}
    last: dict[str, int] = {}
    tables: dict[int, bytearray] = {}
    blocks: dict[str, bytes] = {}
    block: list[bytes | None] = [None]  # docid 0 is never given
    sess: dict[str, bytes] = {}
    start_ms = int(time.time() * 1000) - len(texts) * 1000
    docid = 0

    def post(key: str, doc: int, level: int) -> None:
        lists.setdefault(key, bytearray()).extend(
            postings.encode_varint(((doc - last.get(key, 0)) << 6) | level)
        )
        last[key] = doc

    sessions = [texts[i : i + 500] for i in range(0, len(texts), 500)]
    for n, session in enumerate(sessions):
        ordinal = n + 1
        previous: list[str] = []
        prev_doc = None
        for j, text in enumerate(session):
            docid += 1
            role = "user" if j % 2 == 0 else "assistant"
            created = start_ms + docid * 1000
            weights = ranking.doc_weights(
                text, None, previous[-ranking.CONTEXT_TURNS :], created=ms_to_datetime(created)
            )
            previous.append(text)
            for term, weight in weights.items():
                post("i:t:" + term, docid, ranking.quantize_weight(weight))
            post(f"i:f:s:{ordinal}", docid, 0)
            chunk, off = postings.slot_at(docid)
            table = tables.setdefault(chunk, bytearray())
            table.extend(bytes(off + postings.SLOT - len(table)))
            slot = postings.Slot(created, 0, prev_doc, None, ordinal, ROLE_CODE[role], 0)
            table[off : off + postings.SLOT] = postings.encode_slot(docid, slot)
            if prev_doc is not None:
                p_chunk, p_off = postings.slot_at(prev_doc)
                tables[p_chunk][p_off + 13 : p_off + 16] = (docid - prev_doc).to_bytes(3, "big")
            prev_doc = docid
            element = encode_message(Message(role=role, content=text), 0)
            payload = msgpack.packb([1, f"s{n}", j + 1, None, {}, element], use_bin_type=True)
            block.append(f"{ROLE_CODE[role]}||".encode() + payload)
            if len(block) == postings.BLOCK:
                blocks[str(docid // postings.BLOCK)] = postings.encode_block(block)
                block = []
        sess[f"s{n}"] = str(ordinal).encode()
        sess[f"#{ordinal}"] = f"s{n},{len(session)}".encode()
        if n % 20 == 19:
            log(f"latency: direct fill, {docid:,} docs encoded")
    open_records = {
        str(docid - len(block) + 1 + i): r for i, r in enumerate(block) if r is not None
    }
    pipe = mem.redis.pipeline(transaction=False)
    queued = 0

    async def queue(*command: Any) -> None:
        nonlocal pipe, queued
        pipe.execute_command(*command)
        queued += 1
        if queued % 2000 == 0:
            await pipe.execute()
            pipe = mem.redis.pipeline(transaction=False)

    for key, body in lists.items():
        await queue("SET", prefix + key, last[key].to_bytes(postings.HEADER, "big") + bytes(body))
    for chunk, table in tables.items():
        await queue("SET", prefix + f"i:dt:{chunk}", bytes(table))
    items = list(blocks.items())
    for lo in range(0, len(items), 500):
        await queue("HSET", prefix + "i:docs", *itertools.chain(*items[lo : lo + 500]))
    for field_, value in open_records.items():
        await queue("HSET", prefix + "i:rec", field_, value)
    await queue("HSET", prefix + "i:sess", *itertools.chain(*sess.items()))
    meta = {"v": 2, "n": docid, "next": docid, "sords": len(sessions), "spords": 0, "dead": 0}
    meta["sealed"] = (docid + 1) // postings.BLOCK
    await queue("HSET", prefix + "i:meta", *itertools.chain(*meta.items()))
    await pipe.execute()


async def fill_user(mem: Memory, uid: str, texts: list[str], per_write: int = 100) -> None:
    """``texts`` as alternating user/assistant messages, ``per_write`` per
    write, 500 per session, 16 sessions written at a time."""
    sessions = [texts[i : i + 500] for i in range(0, len(texts), 500)]
    todo = list(enumerate(sessions))

    async def worker() -> None:
        while todo:
            n, session = todo.pop()
            for lo in range(0, len(session), per_write):
                batch = [
                    {"role": "user" if (lo + j) % 2 == 0 else "assistant", "content": text}
                    for j, text in enumerate(session[lo : lo + per_write])
                ]
                await mem.write(batch, session_id=f"s{n}", user_id=uid)

    await asyncio.gather(*(worker() for _ in range(16)))


@dataclass
class LatencyResult:
    size: int
    p50: float
    p99: float
    p50_freq: float
    p50_uniform: float
    fill_seconds: float
    index_seconds: float
    hits_per_query: float


async def latency(
    mem: Memory, background: Background, size: int, queries: int, log: Log, direct: bool = False
) -> LatencyResult:
    corpus = Corpus(seed=size)
    texts = [corpus.text() for _ in range(size)]
    used = {w.strip(".").lower() for t in texts for w in t.split()}
    uid = f"lat-{size}"
    log(f"latency: writing {size:,} messages for one user")
    started = time.perf_counter()
    if direct:
        await direct_fill(mem, uid, texts, log)
        filled, index_seconds = time.perf_counter() - started, 0.0
    else:
        await fill_user(mem, uid, texts)
        filled = time.perf_counter() - started
        index_seconds = await flushed(mem, background, max(900, size / 200), user_id=uid)
    log(f"latency: indexed {size:,} ({filled:.1f} s writing, {index_seconds:.1f} s more to index)")
    qs = corpus.queries(queries, used)
    for q in qs[:50]:  # warm up: scripts loaded, pools filled
        await mem.search(q, user_id=uid)
    samples: list[float] = []
    hits = 0
    for q in qs:
        t0 = time.perf_counter()
        found = await mem.search(q, user_id=uid, limit=10)
        samples.append((time.perf_counter() - t0) * 1000)
        hits += len(found)
    return LatencyResult(
        size,
        percentile(samples, 50),
        percentile(samples, 99),
        percentile(samples[0::2], 50),
        percentile(samples[1::2], 50),
        filled,
        index_seconds,
        hits / len(qs),
    )


# -- (c) index lag -------------------------------------------------------------------


@dataclass
class LagResult:
    rate: float
    followed: int
    lags_ms: list[float]
    lost: int
    delay: float


async def index_lag(mem: Memory, plan: Plan, delay: float, log: Log) -> LagResult:
    uid = "lag"
    writers = 8
    total = int(plan.lag_rate * plan.lag_seconds)
    returned: dict[str, float] = {}  # followed token -> when its write returned
    found: dict[str, float] = {}
    writing = True
    log(f"lag: {plan.lag_rate:.0f} writes/s for {plan.lag_seconds:.0f} s, 50 sessions")
    started = time.perf_counter()

    async def writer(w: int) -> None:
        for n in range(w, total, writers):
            wait = started + n / plan.lag_rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            token = f"lagtok{n}"
            await mem.write(
                [
                    {
                        "role": "user",
                        "content": f"{token} a note about order {n % 97} and its ticket",
                    }
                ],
                session_id=f"lag{n % 50}",
                user_id=uid,
            )
            if n % 5 == 0:
                returned[token] = time.perf_counter()

    async def poller() -> None:
        deadline = None
        while True:
            outstanding = [t for t in returned if t not in found]
            if not writing:
                deadline = deadline or time.perf_counter() + 30 + delay
                if not outstanding or time.perf_counter() > deadline:
                    return
            for lo in range(0, len(outstanding), 16):
                chunk = outstanding[lo : lo + 16]
                hits = await mem.search(" ".join(chunk), user_id=uid, limit=100)
                now = time.perf_counter()
                wanted = set(chunk)
                for h in hits:
                    first = h.message.content.split(" ", 1)[0]
                    if first in wanted and first not in found:
                        found[first] = now
            await asyncio.sleep(0.02)

    polling = asyncio.create_task(poller())
    await asyncio.gather(*(writer(w) for w in range(writers)))
    elapsed = time.perf_counter() - started
    writing = False
    await polling
    lags = [(found[t] - returned[t]) * 1000 for t in found]
    return LagResult(total / elapsed, len(returned), lags, len(returned) - len(found), delay)


# -- (d) write throughput --------------------------------------------------------------


async def write_throughput(
    on: Memory, off: Memory, background: Background, plan: Plan, log: Log
) -> dict[str, float]:
    """Median writes/s of each side: ``on``/``off`` with the workers running,
    ``on-paused``/``off-paused`` with them stopped while the clock runs (the
    write path alone, no CPU shared with the indexing on a small machine)."""
    tasks = 16
    streams = [conversation(seed=t, count=plan.tp_ops) for t in range(tasks)]
    rates: dict[str, list[float]] = {"on": [], "off": []}
    sides = [("on", on), ("off", off)]
    log(f"throughput: {tasks} tasks x {plan.tp_ops} writes, {plan.tp_rounds} rounds per side")
    for name, mem in sides:  # warm up

        async def warm(t: int, i: int, mem: Memory = mem, name: str = name) -> None:
            await mem.write([streams[t][i]], session_id=f"warm{t}", user_id=f"tp-{name}")

        await throughput(tasks, 20, warm)
    for paused in (False, True):
        if paused and not background.pause(False):
            break  # in-process workers cannot be paused
        for r in range(plan.tp_rounds):
            for name, mem in sides if r % 2 == 0 else sides[::-1]:

                async def op(
                    t: int, i: int, mem: Memory = mem, name: str = name, tag: str = f"{paused}{r}"
                ) -> None:
                    await mem.write([streams[t][i]], session_id=f"r{tag}t{t}", user_id=f"tp-{name}")

                if paused:
                    background.pause(True)
                rate = await throughput(tasks, plan.tp_ops, op)
                background.pause(False)
                rates.setdefault(f"{name}-paused" if paused else name, []).append(rate)
                # The indexing of this phase runs off the write path: let it
                # end (untimed) so the next phase does not share the CPU with it.
                await on.flush(timeout=300)
    return {name: median(values) for name, values in rates.items()}


# -- (e) memory ------------------------------------------------------------------------


async def memory_usage(
    mem: Memory, pattern: str, marker: bytes, *, unless: Sequence[bytes] = ()
) -> tuple[int, int]:
    """(bytes, keys) of the keys matching ``pattern`` whose name holds
    ``marker`` and none of ``unless``."""
    total = keys = 0
    async for key in mem.redis.scan_iter(match=pattern, count=1000):
        if marker in key and not any(u in key for u in unless):
            total += await mem.redis.memory_usage(key, samples=0) or 0
            keys += 1
    return total, keys


#: Format 2's key kinds (``E i:<kind>...``), for the byte breakdown.
INDEX2_PARTS = (
    ("postings", b":i:t:"),
    ("filter lists", b":i:f:"),
    ("doc table", b":i:dt:"),
    ("record blocks", b":i:docs"),
    ("open records", b":i:rec"),
)


async def index2_parts(mem: Memory, pattern: str) -> dict[str, tuple[int, int]]:
    """(bytes, keys) per part of a format-2 index (the rest: "other")."""
    parts: dict[str, tuple[int, int]] = {}
    async for key in mem.redis.scan_iter(match=pattern, count=1000):
        if b":i:" not in key:
            continue
        name = next((n for n, m in INDEX2_PARTS if m in key), "other")
        size = await mem.redis.memory_usage(key, samples=0) or 0
        b, k = parts.get(name, (0, 0))
        parts[name] = (b + size, k + 1)
    return parts


async def store_memory(mem: Memory, items: int) -> tuple[float, int]:
    tenant = "bench-store"
    for i in range(items):
        await mem.store.put(
            (tenant, "notes"),
            f"k{i}",
            {"text": f"note {i}: the customer prefers window seats", "n": i},
        )
    total, keys = await memory_usage(mem, mem.layout.user_pattern(tenant), b":kv:")
    return total / items, keys


# -- the run ----------------------------------------------------------------------------


@dataclass
class Results:
    redis_version: str = "?"
    locomo: LocomoResult | str | None = None
    latency: list[LatencyResult] = field(default_factory=list)
    lag: LagResult | None = None
    tp: dict[str, float] = field(default_factory=dict)
    #: size -> (format-1 index B/msg, format-2 index B/msg, session copy B/msg, index keys)
    index_bytes: dict[int, tuple[float, float, float, int]] = field(default_factory=dict)
    #: size -> format 2's parts: name -> (B/msg, keys)
    index2_bytes: dict[int, dict[str, tuple[float, int]]] = field(default_factory=dict)
    store_bytes: tuple[float, int] | None = None
    memory_note: str = ""
    embedder: str | None = None


async def bench(
    url: str,
    plan: Plan,
    data: Path,
    lag_delay: float,
    log: Log,
    *,
    cleanup: bool = False,
    embedder: str | None = None,
    only: str | None = None,
    direct: bool = False,
) -> Results:
    res = Results(embedder=embedder)
    mem = await Memory.connect(
        url, namespace=NAMESPACE, queue_name=QUEUE, summarize_delay=FILL_DELAY, embedder=embedder
    )
    lag_mem = await Memory.connect(
        url, namespace=NAMESPACE, queue_name=QUEUE, summarize_delay=lag_delay
    )
    on = await Memory.connect(url, namespace=NAMESPACE, queue_name=QUEUE)
    off = await Memory.connect(url, namespace=NAMESPACE, queue_name=QUEUE, index=False)
    background = Background(url, embedder=embedder)
    try:
        if not background.embedded:
            res.redis_version = (await mem.redis.info("server")).get("redis_version", "?")
        else:
            res.redis_version = "embedded"
        if cleanup:
            await mem.clear_all()
        await background.start(mem)
        log(f"{background.count} workers running")

        if only != "latency":
            res.locomo = await locomo(mem, background, data, log)
        for size in plan.sizes:
            res.latency.append(await latency(mem, background, size, plan.queries, log, direct))
            pattern = mem.layout.user_pattern(f"lat-{size}")
            try:
                r_bytes, r_keys = await memory_usage(mem, pattern, b":r:")
                i_bytes, i_keys = await memory_usage(mem, pattern, b":i:")
                s_bytes, _ = await memory_usage(mem, pattern, b":s:", unless=(b":r:", b":i:"))
                res.index_bytes[size] = (
                    r_bytes / size,
                    i_bytes / size,
                    s_bytes / size,
                    r_keys + i_keys,
                )
                res.index2_bytes[size] = {
                    name: (b / size, k)
                    for name, (b, k) in (await index2_parts(mem, pattern)).items()
                }
            except Exception as exc:  # the embedded backend has no MEMORY USAGE
                res.memory_note = f"memory not measured: {type(exc).__name__}: {exc}"
            if size >= 1_000_000 and cleanup:
                log(f"latency: clearing the {size:,}-message user")
                await mem.clear_user(f"lat-{size}")
        if only is not None:
            return res
        res.lag = await index_lag(lag_mem, plan, lag_delay, log)
        res.tp = await write_throughput(on, off, background, plan, log)
        if not res.memory_note:
            log(f"store: {plan.store_items:,} puts")
            res.store_bytes = await store_memory(mem, plan.store_items)
            log("store: measured")
    finally:
        log("stopping the workers")
        await background.stop()
        try:
            if cleanup:  # a throwaway server just goes away
                log("clearing the namespace")
                await asyncio.wait_for(mem.clear_all(), 120)
        finally:
            for client in (mem, lag_mem, on, off):
                await client.aclose()
    return res


# -- results as JSON (bench/plots.py) ----------------------------------------------------


def _position(p: int) -> int | None:
    return p if p <= max(KS) else None  # not in the top max(KS)


def results_json(res: Results) -> dict[str, Any]:
    """Everything the report shows, raw: LoCoMo positions, lag samples, sizes."""
    out: dict[str, Any] = {"redis": res.redis_version, "embedder": res.embedder}
    if isinstance(res.locomo, LocomoResult):
        lr = res.locomo
        out["locomo"] = {
            "turns": lr.turns,
            "index_seconds": round(lr.index_seconds, 2),
            "conversations": list(lr.first_hits),
            "categories": [c for found in lr.first_hits.values() for c, _ in found],
            # 1-based position of the first evidence turn in the results, or null
            "positions": {
                "redismem": [_position(p) for found in lr.first_hits.values() for _, p in found],
                "plain BM25": [_position(p) for found in lr.baseline.values() for p in found],
            },
        }
    out["latency"] = [
        {
            "size": lat.size,
            "p50_ms": lat.p50,
            "p99_ms": lat.p99,
            "p50_frequent_ms": lat.p50_freq,
            "p50_uniform_ms": lat.p50_uniform,
            "fill_seconds": lat.fill_seconds,
            "index_seconds": lat.index_seconds,
            "hits_per_query": lat.hits_per_query,
        }
        for lat in res.latency
    ]
    if res.lag is not None:
        out["lag"] = {
            "rate": res.lag.rate,
            "delay_s": res.lag.delay,
            "followed": res.lag.followed,
            "lost": res.lag.lost,
            "samples_ms": [round(x, 1) for x in sorted(res.lag.lags_ms)],
        }
    out["throughput"] = res.tp
    out["index_bytes"] = {
        str(size): {
            "format1_per_msg": f1,
            "format2_per_msg": f2,
            "session_per_msg": session,
            "keys": keys,
            "format2_parts_per_msg": {
                name: per for name, (per, _) in res.index2_bytes.get(size, {}).items()
            },
        }
        for size, (f1, f2, session, keys) in res.index_bytes.items()
    }
    if res.store_bytes is not None:
        out["store_bytes_per_item"] = res.store_bytes[0]
    return out


# -- report ------------------------------------------------------------------------------


def report_locomo(t: Table, res: Results) -> None:
    if res.locomo is None:
        return
    if isinstance(res.locomo, str):
        t.note(f"LoCoMo evidence recall: {res.locomo}")
        return
    lr = res.locomo
    every = [p for found in lr.first_hits.values() for _, p in found]
    t.header(
        f"LoCoMo evidence recall ({len(every)} questions, {lr.turns:,} turns)",
        "@5",
        "@10",
        "@20",
    )

    def row(label: str, positions: list[int], goal: str = "") -> None:
        a, b, c = (recall_at(positions, k) for k in KS)
        t.row(label, f"{a:.3f}", f"{b:.3f}", f"{c:.3f}", goal)

    at10 = recall_at(every, 10)
    # The goals: 0.75 keyword-only, 0.85 with the minilm embedder.
    if res.embedder == "minilm":
        row("overall", every, t.goal(">= 0.85 @10 (minilm)", at10 >= 0.85))
    elif res.embedder is None:
        row("overall", every, t.goal(">= 0.75 @10", at10 >= 0.75))
    else:
        row("overall", every)
    by_cat: dict[int, list[int]] = defaultdict(list)
    for found in lr.first_hits.values():
        for cat, p in found:
            by_cat[cat].append(p)
    for cat in sorted(by_cat):
        row(f"  category {cat} {CATEGORIES[cat]} (n={len(by_cat[cat])})", by_cat[cat])
    for sample, found in lr.first_hits.items():
        row(f"  {sample} (n={len(found)})", [p for _, p in found])
    base = [p for found in lr.baseline.values() for p in found]
    if base:
        row("plain BM25 over single turns (baseline, same questions)", base)


def report_latency(t: Table, res: Results, plan: Plan) -> None:
    if not res.latency:
        return
    t.header(f"search, one user, {plan.queries} queries of 1-4 words", "p50 (ms)", "p99 (ms)", "")
    goals = {10_000: 2.0, 100_000: 10.0, 1_000_000: 50.0}
    for lat in res.latency:
        goal = goals.get(lat.size)
        t.row(
            f"{lat.size:,} indexed messages",
            f"{lat.p50:.3f}",
            f"{lat.p99:.3f}",
            "",
            t.goal(f"p50 <= {goal:g} ms", lat.p50 <= goal) if goal else "",
        )
        t.row(
            "  p50 frequent-word / uniform-word queries (ms)",
            f"{lat.p50_freq:.3f}",
            f"{lat.p50_uniform:.3f}",
        )
        t.row(
            f"  writing / then indexing {lat.size:,} messages (s)",
            f"{lat.fill_seconds:.1f}",
            f"{lat.index_seconds:.1f}",
            f"{lat.hits_per_query:.1f} hits/q",
        )
    if res.latency and 100_000 not in {lat.size for lat in res.latency}:
        t.note("(100,000 messages: full run only; goal p50 <= 10 ms)")


def report_lag(t: Table, res: Results) -> None:
    if res.lag is None:
        return
    lag = res.lag
    t.header(f"index lag, {lag.rate:,.0f} writes/s, {WORKERS} workers", "p50 (ms)", "p95 (ms)", "")
    if lag.lags_ms:
        t.row(
            f"write returned -> found by search (n={len(lag.lags_ms)})",
            f"{percentile(lag.lags_ms, 50):,.0f}",
            f"{percentile(lag.lags_ms, 95):,.0f}",
            f"max {max(lag.lags_ms):,.0f}",
        )
    t.note(
        f"jobs' quiet period summarize_delay={lag.delay:g} s (part of the lag); "
        f"{lag.followed} writes followed, {lag.lost} never found"
    )


def report_tp(t: Table, res: Results, plan: Plan) -> None:
    if not res.tp:
        return
    t.header("write throughput, 16 tasks (writes/s)", "index=True", "index=False", "on/off")
    rows = [("workers paused while timed (write path)", "-paused", True)]
    rows.append(("workers running (sharing the CPUs)", "", "on-paused" not in res.tp))
    for label, suffix, judged in rows:
        if f"on{suffix}" not in res.tp:
            continue
        on, off = res.tp[f"on{suffix}"], res.tp[f"off{suffix}"]
        t.row(
            f"{label}, medians of {plan.tp_rounds}",
            f"{on:,.0f}",
            f"{off:,.0f}",
            f"{on / off:.2f}x",
            t.goal(">= 0.95x", on / off >= 0.95) if judged else "",
        )


def report_memory(t: Table, res: Results) -> None:
    if res.memory_note:
        t.note("")
        t.note(res.memory_note)
        return
    if not res.index_bytes and res.store_bytes is None:
        return
    t.header("Redis memory (MEMORY USAGE)", "bytes", "", "index/session")
    for size, (index1, index2, session, keys) in res.index_bytes.items():
        index = index1 + index2
        label = f"recall index per message, {size:,} msgs ({keys:,} keys)"
        t.row(label, f"{index:,.0f}", "", t.goal("<= 250 B", index <= 250) if index2 else "")
        if index1 and index2:
            t.row("  of which format 1 (:r:) / format 2 (:i:)", f"{index1:,.0f}", f"{index2:,.0f}")
        for name, (per, count) in sorted(res.index2_bytes.get(size, {}).items()):
            t.row(f"  format 2: {name} ({count:,} keys)", f"{per:,.1f}")
        t.row(
            "  the session copy per message (:s: keys outside the index)",
            f"{session:,.0f}",
            "",
            f"{index / session:.2f}x" if session else "(not written)",
        )
    if res.store_bytes is not None:
        per_item, keys = res.store_bytes
        t.row(f"store, per small item (1,000 puts, {keys:,} :kv: keys)", f"{per_item:,.0f}")


def report(res: Results, plan: Plan, where: str) -> str:
    t = Table(label_width=60)
    t.note(
        f"redismem recall benchmark: Redis {res.redis_version} ({where}), "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {WORKERS} workers"
    )
    hiredis = package_version("hiredis")
    t.note(f"redis-py {package_version('redis')}" + (f" (hiredis {hiredis})" if hiredis else ""))
    report_locomo(t, res)
    report_latency(t, res, plan)
    report_lag(t, res)
    report_tp(t, res, plan)
    report_memory(t, res)
    t.note("")
    if plan.smoke:
        t.note("smoke run (--quick): smaller sizes and shorter runs than the goals are set for")
    else:
        t.note("all goals met" if t.all_pass else "some goals MISSED")
    return t.text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("REDISMEM_BENCH_URL"),
        help="use this Redis instead of a throwaway redis-server (default: $REDISMEM_BENCH_URL)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    parser.add_argument(
        "--embedded", action="store_true", help="the embedded backend, in-process workers"
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo folder")
    parser.add_argument(
        "--embedder",
        choices=("hashing", "minilm"),
        help="workers store vectors (REDISMEM_EMBEDDER) and the LoCoMo and latency searches "
        "fuse keyword and vector ranks",
    )
    parser.add_argument(
        "--lag-delay",
        type=float,
        default=1.0,
        help="summarize_delay of the clients in the lag run (default: the library's 1.0 s)",
    )
    parser.add_argument(
        "--sizes",
        help="messages of the latency users, comma-separated (e.g. 10000,100000,1000000)",
    )
    parser.add_argument(
        "--only",
        choices=("latency", "locomo"),
        help="only the latency users (search p50/p99 and memory per size), or only LoCoMo",
    )
    parser.add_argument(
        "--fill",
        choices=("workers", "direct"),
        default="workers",
        help="how the latency users are indexed: written and indexed by the workers, or "
        "their format-2 index written straight into Redis (no session copies)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the raw results as JSON (e.g. bench/results/recall.json, what "
        "bench/plots.py reads)",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.sizes:
        sizes = tuple(int(x.replace("_", "")) for x in args.sizes.split(","))
        plan = replace(plan, sizes=sizes)
    if args.only == "locomo":
        plan = replace(plan, sizes=())
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.embedded:
        url, where = f"memory://bench-recall-{uuid.uuid4().hex[:8]}", "embedded backend"
        res = asyncio.run(
            bench(
                url,
                plan,
                args.data,
                args.lag_delay,
                log,
                embedder=args.embedder,
                only=args.only,
                direct=args.fill == "direct",
            )
        )
    elif args.url:
        res = asyncio.run(
            bench(
                args.url,
                plan,
                args.data,
                args.lag_delay,
                log,
                cleanup=True,
                embedder=args.embedder,
                only=args.only,
                direct=args.fill == "direct",
            )
        )
        where = "given by --url"
    else:
        from _util import throwaway_redis

        with throwaway_redis() as url:
            log(f"started throwaway redis-server at {url}")
            res = asyncio.run(
                bench(
                    url,
                    plan,
                    args.data,
                    args.lag_delay,
                    log,
                    embedder=args.embedder,
                    only=args.only,
                    direct=args.fill == "direct",
                )
            )
        where = "throwaway redis-server on loopback"
    if args.embedder:
        where += f"; embedder {args.embedder} (searches fuse keyword and vector ranks)"
    print(report(res, plan, where))
    if args.json:
        write_json(args.json, "recall", {"where": where, **results_json(res)})
    log("done")
    return 0  # a benchmark: missed goals are reported, not an error


if __name__ == "__main__":
    sys.exit(main())
