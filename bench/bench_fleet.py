"""Fleet-scale run: what a fleet of agents costs in Redis memory and CPU.

Two throwaway ``redis-server`` processes, one for memory and one for the work
queue (as on a cluster, where the queue cannot live; ``--one-server`` puts
both on one), no RDB, AOF off unless ``--aof`` (``everysec``); 4 client
processes writing as agents do and 2 real worker processes (``python -m arq
workers.WorkerSettings``), every feature on:

- clients: ``Memory.connect(url, queue_url=..., keep_recent=20)`` (summaries
  with compaction, the recall index), every write with an explicit write id,
  two tags and an agent name; each agent turn (a user message and what
  answers it, tool calls included) written either in one multi-message write
  or message by message (half each); about one user message in ten a
  statement the rule extractor keeps ("I live in Porto.");
- workers: ``REDISMEM_SUMMARIZER=truncate`` (no LLM),
  ``REDISMEM_EXTRACTOR=rules`` (typed memories, stored under ``kv:``),
  indexing (always on with ``index=True``).

``--users`` users x ``--sessions`` sessions x ``--messages`` messages (default
200 x 20 x 50 = 200,000 messages; each message's text drawn from a Zipf
vocabulary of 30,000 words, 100-600 characters, as ``bench_recall.py``'s).
Sessions are written session-major (every user's first session, then every
user's second ...), by 16 concurrent agents per client process, as fast as
they go unless ``--rate`` caps the messages/s. The clients start together
once all have set up; their time runs from then.

Phases and what each measures:

1. **Write path, workers paused** (SIGSTOP): every user's first session.
   ``used_cpu_sys + used_cpu_user`` of each server over the phase / writes is
   its CPU per write (the write script, the job enqueues, whatever else the
   server did), and ``INFO commandstats``'s ``evalsha`` usec / calls the write
   script alone (wall time inside the server: preemption inflates it).
2. **Fleet**: workers resumed, the other sessions written; client writes/s;
   write -> indexed lag (a write every 0.25 s per client is sampled; the
   bench reads the session's index watermark ``iwm`` every 100 ms, at most
   200 a round, oldest first); then the drain until ``flush()`` returns
   (everything due is indexed, extracted and summarized). The workers' Redis
   CPU is each server's CPU from phase 1's start to the drain's end minus
   writes x the phase-1 cost per write, per message written. Write ->
   summarized: the workers' own samples (``redismem/q:<ns>:lag``, their last
   2,000: from the write that made a session due to its summary's commit).
3. **Memory**: ``used_memory`` after the drain minus before the run (both
   servers), and a census: SCAN of every key, ``MEMORY USAGE key SAMPLES 0``
   per key (every key up to ``--max-keys``, else a deterministic 1-in-k
   sample by CRC32 of the key, scaled by k: the report says which), by key
   family.
4. **Search**: ``--search-users`` users x ``--queries`` queries of 1-3 words
   (Zipf-drawn, stop words skipped), ``mem.search(q, user_id=u, limit=10)``
   one after another: p50 / p99 of one user's search over its messages.
5. **Steady lag**: one new session for as many users as ``--lag-seconds`` of
   writes take at ``--lag-rate`` messages/s (default: half the workers' drain
   rate), every write sampled as in phase 2; then drained.

The report ends with the parameters of ``docs/capacity.md``'s cost model,
by the names used there, to paste into it after a re-run (e.g. once the
recall index format 2 is merged).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_fleet.py            # 200k messages
    PYTHONPATH=$PWD nice -n 10 .venv/bin/python bench/bench_fleet.py --users 1000   # 1M
    PYTHONPATH=$PWD .venv/bin/python bench/bench_fleet.py --users 8 --sessions 2 --messages 30
    PYTHONPATH=$PWD .venv/bin/python bench/bench_fleet.py --json > fleet.json  # machine-readable
    PYTHONPATH=$PWD .venv/bin/python bench/bench_fleet.py --json bench/results/fleet.json

Always its own servers: the run reads server-wide counters (``INFO``), which
another tenant's traffic would spoil.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _util import package_version, percentile, turns, write_json
from bench_facts import FACTS
from bench_recall import vocabulary
from redis.asyncio import Redis

from redismem import Memory
from redismem.core.keys import QUEUE_KEY_PREFIX, KeyLayout
from redismem.recall.terms import STOP_WORDS

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[1]
NAMESPACE = "fleet"
QUEUE = "redismem/fleet"
AGENTS = ("planner", "researcher", "booker", "support")
CHANNELS = ("web", "slack", "email", "api")
TOOLS = ("search_flights", "get_weather", "lookup_order", "run_sql", "send_email")
AGENTS_PER_CLIENT = 16
POOL = 64  # conversations each client draws its sessions from
FACT_SHARE = 0.1  # user messages that state a fact the rule extractor keeps
SAMPLE_SECONDS = 0.25  # a lag sample per client this often
POLL_SECONDS = 0.1  # the lag sampler's poll of the index watermarks
POLL_KEYS = 200  # watermarks read per poll at most

Log = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    users: int = 200
    sessions: int = 20
    messages: int = 50
    clients: int = 4
    workers: int = 2
    keep_recent: int = 20
    batch: int = 20
    rate: float = 0.0  # messages/s of all clients together; 0: as fast as they go
    aof: bool = False
    one_server: bool = False  # the queue on the memory server (the default deployment)
    lag_rate: float = 0.0  # phase 3's messages/s; 0: half the workers' drain rate
    lag_seconds: float = 30.0
    search_users: int = 20
    queries: int = 25
    max_keys: int = 300_000
    seed: int = 7

    @property
    def total_messages(self) -> int:
        return self.users * self.sessions * self.messages


# -- the text ---------------------------------------------------------------------


class Corpus:
    """Agent conversations over a Zipf(1.07) vocabulary of 30,000 words (the
    same in every process): user and assistant alternating, 100-600
    characters each, about one reply in ten a tool call and its result."""

    def __init__(self, size: int = 30_000) -> None:
        self.words = vocabulary(size, random.Random(11))
        self.cum = list(itertools.accumulate(1.0 / (r**1.07) for r in range(1, size + 1)))

    def text(self, rng: random.Random, lo: int = 100, hi: int = 600) -> str:
        target = rng.randint(lo, hi)
        text = " ".join(rng.choices(self.words, cum_weights=self.cum, k=target // 4))
        return text[:target].rstrip().capitalize() + "."

    def conversation(self, rng: random.Random, count: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < count:
            out.append({"role": "user", "content": self.text(rng)})
            if rng.random() < 0.1:
                call_id = f"call_{rng.getrandbits(40):x}"
                args = json.dumps({"query": self.text(rng, 20, 60), "limit": rng.randint(1, 20)})
                call = {"id": call_id, "name": rng.choice(TOOLS), "arguments": args}
                out.append(
                    {"role": "assistant", "content": self.text(rng, 100, 200), "tool_calls": [call]}
                )
                out.append({"role": "tool", "tool_call_id": call_id, "content": self.text(rng)})
            out.append({"role": "assistant", "content": self.text(rng)})
        return out[:count]

    def query(self, rng: random.Random) -> str:
        picked: list[str] = []
        while len(picked) < rng.randint(1, 3):
            word = rng.choices(self.words, cum_weights=self.cum, k=1)[0]
            if word not in STOP_WORDS:
                picked.append(word)
        return " ".join(picked)


# -- a client process -------------------------------------------------------------


@dataclass(frozen=True)
class ClientJob:
    url: str
    index: int
    clients: int
    users: int
    first_session: int
    end_session: int
    messages: int
    keep_recent: int
    batch: int
    rate: float  # this client's messages/s; 0: no cap
    sample: bool  # report lag samples on stdout
    seed: int
    queue_url: str
    user_limit: int  # only users below this one


@dataclass
class ClientResult:
    writes: int = 0
    messages: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def session_messages(
    corpus: Corpus, pool: list[list[dict[str, Any]]], rng: random.Random
) -> list[dict[str, Any]]:
    out = []
    for message in rng.choice(pool):
        if message["role"] == "user" and rng.random() < FACT_SHARE:
            message = {"role": "user", "content": rng.choice(FACTS)(rng)}
        out.append(message)
    return out


async def client_main(job: ClientJob) -> None:
    """Write this client's share (users ``index``, ``index + clients``, ...)
    of sessions ``first_session .. end_session - 1``; print ``S <meta key>
    <seq> <ms>`` per lag sample and a last line ``R <json ClientResult>``."""
    corpus = Corpus()
    pool_rng = random.Random(job.seed * 1000 + job.index)
    pool = [corpus.conversation(pool_rng, job.messages) for _ in range(POOL)]
    work = deque(
        (user, session)
        for session in range(job.first_session, job.end_session)
        for user in range(job.index, min(job.users, job.user_limit), job.clients)
    )
    result = ClientResult()
    mem = await Memory.connect(
        job.url,
        namespace=NAMESPACE,
        queue_url=job.queue_url,
        queue_name=QUEUE,
        keep_recent=job.keep_recent,
        summarize_batch=job.batch,
    )
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # GO: every client starts at once
    cpu_before = time.process_time()
    clock = time.perf_counter()
    next_slot = clock  # the rate cap: the time the next message may go
    next_sample = clock

    async def agent() -> None:
        nonlocal next_slot, next_sample
        while work:
            user, session = work.popleft()
            rng = random.Random(hash((job.seed, user, session)))
            uid, sid = f"u{user}", f"s{session}"
            tags = {"channel": CHANNELS[user % len(CHANNELS)], "project": f"p{session % 5}"}
            meta_key = mem.layout.session(uid, sid).meta
            seq = 0
            for n, turn in enumerate(turns(session_messages(corpus, pool, rng))):
                writes = [turn] if rng.random() < 0.5 else [[m] for m in turn]
                for i, batch in enumerate(writes):
                    if job.rate:
                        next_slot = max(next_slot, time.perf_counter()) + len(batch) / job.rate
                        await asyncio.sleep(max(0.0, next_slot - time.perf_counter()))
                    await mem.write(
                        batch,
                        session_id=sid,
                        user_id=uid,
                        tags=tags,
                        agent_name=AGENTS[(user + n) % len(AGENTS)],
                        write_id=f"w.{uid}.{sid}.{n}.{i}",
                    )
                    seq += len(batch)
                    result.writes += 1
                    result.messages += len(batch)
                    now = time.perf_counter()
                    if job.sample and now >= next_sample:
                        next_sample = now + SAMPLE_SECONDS
                        print(f"S {meta_key} {seq} {time.time() * 1000:.1f}", flush=True)

    try:
        await asyncio.gather(*(agent() for _ in range(AGENTS_PER_CLIENT)))
        result.seconds = time.perf_counter() - clock
    finally:
        await mem.aclose()
    result.cpu_seconds = time.process_time() - cpu_before
    print("R " + json.dumps(asdict(result)), flush=True)


# -- the server and the workers ---------------------------------------------------


class RedisServer:
    """A throwaway ``redis-server`` on a free loopback port, no RDB, AOF
    (``appendfsync everysec``) only when asked."""

    def __init__(self, aof: bool) -> None:
        binary = shutil.which("redis-server") or shutil.which("valkey-server")
        if binary is None:
            raise SystemExit("redis-server is not on PATH: run `bash scripts/setup` as root")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port: int = sock.getsockname()[1]
        self.directory = tempfile.TemporaryDirectory(prefix="bench-fleet-redis-")
        appendonly = ["--appendonly", "yes", "--appendfsync", "everysec"] if aof else []
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + (appendonly or ["--appendonly", "no"])
            + ["--dir", self.directory.name],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.directory.cleanup()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Workers:
    """``count`` ``python -m arq workers.WorkerSettings`` processes, every
    feature on; stopped (SIGCONT, SIGTERM, then SIGKILL) by ``stop``."""

    def __init__(self, url: str, queue_url: str, count: int) -> None:
        self.url = url
        self.queue_url = queue_url
        self.count = count
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logdir = tempfile.TemporaryDirectory(prefix="bench-fleet-workers-")

    async def start(self, redis: Any) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
        env.update(
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(ROOT),
            REDISMEM_URL=self.url,
            REDISMEM_QUEUE_URL=self.queue_url,
            REDISMEM_NAMESPACE=NAMESPACE,
            REDISMEM_QUEUE_NAME=QUEUE,
            REDISMEM_SUMMARIZER="truncate",
            REDISMEM_EXTRACTOR="rules",
        )
        self.processes = [self._spawn(env, i) for i in range(self.count)]
        deadline = time.monotonic() + 180
        while await redis.zcard(f"{QUEUE}:workers") < self.count:
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                raise SystemExit(f"the workers did not start:\n{self.logs()}")
            await asyncio.sleep(0.1)

    def _spawn(self, env: dict[str, str], i: int) -> subprocess.Popen[bytes]:
        with open(Path(self.logdir.name) / f"worker{i}.log", "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "arq", "workers.WorkerSettings"],
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def pause(self, paused: bool) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.processes)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(Path(self.logdir.name).glob("*.log"))
        )

    def stop(self) -> None:
        self.pause(False)  # a stopped process would not act on SIGTERM
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.logdir.cleanup()


# -- measuring ------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSnapshot:
    at: float
    cpu: float  # used_cpu_sys + used_cpu_user, seconds
    commands: dict[str, tuple[int, int]]  # command -> (calls, usec)


async def snapshot(redis: Any) -> ServerSnapshot:
    cpu = await redis.info("cpu")
    stats = await redis.info("commandstats")
    commands = {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }
    return ServerSnapshot(
        time.perf_counter(), float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), commands
    )


def command_delta(a: ServerSnapshot, b: ServerSnapshot, name: str) -> tuple[int, int]:
    calls0, usec0 = a.commands.get(name, (0, 0))
    calls1, usec1 = b.commands.get(name, (0, 0))
    return calls1 - calls0, usec1 - usec0


class LagSampler:
    """Write -> indexed: each sample (a session's meta key, the seq its write
    reached, the time the write returned) is done when the session's index
    watermark ``iwm`` reaches that seq; watermarks are read every
    ``POLL_SECONDS``."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.waiting: list[tuple[str, int, float]] = []
        self.lags_ms: list[float] = []

    def add(self, line: str) -> None:
        _, key, seq, at = line.split()
        self.waiting.append((key, int(seq), float(at)))

    async def poll(self) -> None:
        if not self.waiting:
            return
        # The oldest first, at most POLL_KEYS a round: a backlog of samples
        # must not load the server it measures.
        polled, self.waiting = self.waiting[:POLL_KEYS], self.waiting[POLL_KEYS:]
        pipe = self.redis.pipeline(transaction=False)
        for key, _, _ in polled:
            pipe.hget(key, "iwm")
        marks = await pipe.execute()
        now = time.time() * 1000
        still = []
        for (key, seq, at), mark in zip(polled, marks, strict=True):
            if mark is not None and int(mark) >= seq:
                self.lags_ms.append(now - at)
            else:
                still.append((key, seq, at))
        self.waiting = still + self.waiting

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set and every sample is done."""
        while True:
            await self.poll()
            if stop.is_set() and not self.waiting:
                return
            await asyncio.sleep(POLL_SECONDS)


@dataclass(frozen=True)
class Snapshots:
    """The memory server's and the queue server's counters at one moment
    (``queue`` is None when the queue lives on the memory server)."""

    memory: ServerSnapshot
    queue: ServerSnapshot | None
    indexed: int  # the workers' counter of messages indexed


@dataclass
class Cluster:
    """What a run talks to: the servers, their clients, the workers."""

    plan: Plan
    url: str
    queue_url: str
    redis: Any  # the memory server
    queue: Any  # the queue server (the memory server's client with --one-server)
    shared: bool
    log: Log

    async def snapshot(self) -> Snapshots:
        return Snapshots(
            await snapshot(self.redis),
            None if self.shared else await snapshot(self.queue),
            await indexed(self),
        )


async def run_clients(
    run: Cluster,
    first: int,
    end: int,
    *,
    sampler: LagSampler | None = None,
    rate: float = 0.0,
    user_limit: int | None = None,
) -> tuple[ClientResult, Snapshots]:
    """The clients writing sessions ``first .. end - 1`` of every user (below
    ``user_limit``), started together once every one has set up; their summed
    result (``seconds``: the slowest one's, from the start) and the servers'
    counters at the start."""
    plan = run.plan
    processes = []
    try:
        for index in range(plan.clients):
            job = ClientJob(
                url=run.url,
                index=index,
                clients=plan.clients,
                users=plan.users,
                first_session=first,
                end_session=end,
                messages=plan.messages,
                keep_recent=plan.keep_recent,
                batch=plan.batch,
                rate=rate / plan.clients,
                sample=sampler is not None,
                seed=plan.seed,
                queue_url=run.queue_url,
                user_limit=plan.users if user_limit is None else user_limit,
            )
            processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(SCRIPT),
                    "--client",
                    json.dumps(asdict(job)),
                    cwd=ROOT,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        for process in processes:
            assert process.stdout is not None
            if (await process.stdout.readline()).strip() != b"READY":
                raise SystemExit(f"a client failed to start (exit {await process.wait()})")
        start = await run.snapshot()
        for process in processes:
            assert process.stdin is not None
            process.stdin.write(b"GO\n")
            await process.stdin.drain()

        async def result(index: int, process: asyncio.subprocess.Process) -> ClientResult:
            assert process.stdout is not None
            out: ClientResult | None = None
            async for raw in process.stdout:
                line = raw.decode().rstrip("\n")
                if line.startswith("S ") and sampler is not None:
                    sampler.add(line)
                elif line.startswith("R "):
                    out = ClientResult(**json.loads(line[2:]))
            if await process.wait() != 0 or out is None:
                raise SystemExit(f"client {index} failed (exit {process.returncode})")
            return out

        results = await asyncio.gather(*(result(i, p) for i, p in enumerate(processes)))
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    total = ClientResult(seconds=max(r.seconds for r in results))
    for r in results:
        total.writes += r.writes
        total.messages += r.messages
        total.cpu_seconds += r.cpu_seconds
    run.log(f"  {total.writes:,} writes, {total.messages:,} messages in {total.seconds:.1f} s")
    return total, start


async def indexed(run: Cluster) -> int:
    """The workers' counter of messages indexed."""
    stats = KeyLayout(NAMESPACE).queue_key("stats")
    return int(await run.queue.hget(stats, "messages_indexed") or 0)


async def drained(run: Cluster, probe: Memory, within: float) -> bool:
    """Wait until ``flush()`` returns: the workers have done everything due
    (indexing, extraction, summaries) for every write made so far."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        if await probe.flush(timeout=min(30.0, left)):
            return True
        run.log(f"  draining: {await indexed(run):,} messages indexed so far")
    return False


# -- the memory census -------------------------------------------------------------

#: Family -> what it is counted per ("message", "session", "user", "run").
SCOPES = {
    "session list (s:S:msgs)": "session",
    "entries (s:S:entries)": "session",
    "write ids (s:S:writes)": "session",
    "meta (s:S:meta)": "session",
    "session tags (s:S:tags)": "session",
    "summary (s:S:summary)": "session",
    "user indexes (sessions, tagidx, pending, guard)": "user",
    "index: docs (r:docs)": "message",
    "index: links (r:links)": "message",
    "index: dkeys (r:dkeys)": "message",
    "index: postings (r:t:*)": "message",
    "index: filters (r:f:*)": "message",
    "index: time, exp, stats (r:*)": "message",
    "index format 2 (i:*)": "message",
    "memories (kv:*)": "user",
    "queue: arq jobs and workers (arq:*, queue)": "run",
    "queue: stats, lag, leases (redismem/q:*)": "run",
    "other": "run",
}
INDEX_FAMILIES = tuple(f for f in SCOPES if f.startswith("index"))
SESSION_KINDS = {
    "msgs": "session list (s:S:msgs)",
    "entries": "entries (s:S:entries)",
    "writes": "write ids (s:S:writes)",
    "meta": "meta (s:S:meta)",
    "tags": "session tags (s:S:tags)",
    "summary": "summary (s:S:summary)",
}
INDEX_KINDS = {
    "r:docs": "index: docs (r:docs)",
    "r:links": "index: links (r:links)",
    "r:dkeys": "index: dkeys (r:dkeys)",
}


def family(key: str, layout: KeyLayout) -> str:
    if key.startswith(QUEUE_KEY_PREFIX):
        return "queue: stats, lag, leases (redismem/q:*)"
    if key.startswith(("arq:", QUEUE)):
        return "queue: arq jobs and workers (arq:*, queue)"
    if not key.startswith(f"{layout.namespace}:{{u:"):
        return "other"
    parsed = layout.parse_key(key)
    kind = parsed.kind
    if parsed.session_id is not None:
        return SESSION_KINDS.get(kind, "other")
    if kind in INDEX_KINDS:
        return INDEX_KINDS[kind]
    if kind.startswith("r:t:"):
        return "index: postings (r:t:*)"
    if kind.startswith("r:f:"):
        return "index: filters (r:f:*)"
    if kind.startswith("r:"):
        return "index: time, exp, stats (r:*)"
    if kind.startswith("i:"):
        return "index format 2 (i:*)"
    if kind.startswith("kv:"):
        return "memories (kv:*)"
    return "user indexes (sessions, tagidx, pending, guard)"


@dataclass
class Census:
    keys: int = 0
    step: int = 1  # MEMORY USAGE of 1 key in `step` (CRC32 of the key), scaled by `step`
    bytes: dict[str, float] = field(default_factory=dict)
    key_counts: dict[str, int] = field(default_factory=dict)
    stored_messages: int = 0  # LLEN of the session lists (sampled likewise)
    stored_entries: int = 0
    indexed_docs: int = 0  # docs in the recall index (every user's r:stats / i:meta n)
    seconds: float = 0.0

    def add(self, other: Census) -> None:
        """Another server's census (the queue's) into this one."""
        self.keys += other.keys
        for fam, size in other.bytes.items():
            self.bytes[fam] = self.bytes.get(fam, 0.0) + size
        for fam, count in other.key_counts.items():
            self.key_counts[fam] = self.key_counts.get(fam, 0) + count
        self.seconds += other.seconds
        self.indexed_docs += other.indexed_docs


async def census(redis: Any, layout: KeyLayout, max_keys: int, log: Log) -> Census:
    started = time.perf_counter()
    out = Census(keys=int(await redis.dbsize()))
    out.step = max(1, math.ceil(out.keys / max_keys))
    sizes: dict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    batch: list[tuple[str, str]] = []

    async def measure() -> None:
        pipe = redis.pipeline(transaction=False)
        for key, fam in batch:
            pipe.memory_usage(key, samples=0)
            if fam in ("session list (s:S:msgs)", "entries (s:S:entries)"):
                pipe.llen(key)
        replies = iter(await pipe.execute())
        for _key, fam in batch:
            sizes[fam] += (next(replies) or 0) * out.step
            if fam == "session list (s:S:msgs)":
                out.stored_messages += next(replies) * out.step
            elif fam == "entries (s:S:entries)":
                out.stored_entries += next(replies) * out.step
        batch.clear()

    doc_counts: list[str] = []
    async for raw in redis.scan_iter(count=2000):
        key = raw.decode()
        fam = family(key, layout)
        counts[fam] += 1
        if key.endswith((":r:stats", ":i:meta")):  # format 1's and format 2's doc count, "n"
            doc_counts.append(key)
        if out.step == 1 or zlib.crc32(raw) % out.step == 0:
            batch.append((key, fam))
            if len(batch) >= 1000:
                await measure()
    if batch:
        await measure()
    for i in range(0, len(doc_counts), 1000):
        pipe = redis.pipeline(transaction=False)
        for key in doc_counts[i : i + 1000]:
            pipe.hget(key, "n")
        out.indexed_docs += sum(int(n or 0) for n in await pipe.execute())
    out.bytes = dict(sizes)
    out.key_counts = dict(counts)
    out.seconds = time.perf_counter() - started
    log(f"  census: {out.keys:,} keys, 1 in {out.step} measured, {out.seconds:.0f} s")
    return out


# -- the run --------------------------------------------------------------------------


async def search_latencies(plan: Plan, probe: Memory) -> tuple[list[float], float]:
    """Milliseconds of each query, and the hits per query."""
    corpus = Corpus()
    rng = random.Random(plan.seed)
    step = max(1, plan.users // plan.search_users)
    users = [f"u{u}" for u in range(0, plan.users, step)][: plan.search_users]
    out: list[float] = []
    hits = 0
    for uid in users:
        for _ in range(plan.queries):
            query = corpus.query(rng)
            start = time.perf_counter()
            found = await probe.search(query, user_id=uid, limit=10)
            out.append((time.perf_counter() - start) * 1000)
            hits += len(found)
    return out, hits / max(1, len(out))


def cpu_delta(a: Snapshots, b: Snapshots) -> tuple[float, float]:
    """Seconds of CPU the memory server and the queue server used between two
    snapshots (the queue's 0 when it shares the memory server)."""
    queue = b.queue.cpu - a.queue.cpu if a.queue and b.queue else 0.0
    return b.memory.cpu - a.memory.cpu, queue


async def bench(plan: Plan, log: Log) -> dict[str, Any]:
    server = RedisServer(plan.aof)
    queue_server = server if plan.one_server else RedisServer(plan.aof)
    workers = Workers(server.url, queue_server.url, plan.workers)
    out: dict[str, Any] = {"plan": asdict(plan)}
    try:
        probe = await Memory.connect(
            server.url,
            namespace=NAMESPACE,
            queue_url=queue_server.url,
            queue_name=QUEUE,
            keep_recent=plan.keep_recent,
        )
        queue = probe.redis if plan.one_server else Redis.from_url(queue_server.url)
        run = Cluster(plan, server.url, queue_server.url, probe.redis, queue, plan.one_server, log)
        version = (await run.redis.info("server"))["redis_version"]
        used_before = [int((await r.info("memory"))["used_memory"]) for r in {run.redis, queue}]
        await workers.start(queue)
        where = "on the memory server" if plan.one_server else f"on {queue_server.url}"
        log(f"redis {version} on {server.url}, queue {where}, {plan.workers} workers up")

        log("phase 1: write path, workers paused (every user's first session)")
        workers.pause(True)
        phase1, s0 = await run_clients(run, 0, 1)
        s1 = await run.snapshot()
        workers.pause(False)
        worker_cpu0 = workers.cpu_seconds()

        log("phase 2: the fleet, workers running")
        sampler = LagSampler(run.redis)
        stop = asyncio.Event()
        sampling = asyncio.create_task(sampler.run(stop))
        phase2, s_go = await run_clients(run, 1, plan.sessions, sampler=sampler, rate=plan.rate)
        s2 = await run.snapshot()
        messages = phase1.messages + phase2.messages
        at_drain = await indexed(run)
        drain_started = time.perf_counter()
        is_drained = await drained(run, probe, max(600.0, messages / 100))
        drain_seconds = time.perf_counter() - drain_started
        drain_rate = (await indexed(run) - at_drain) / drain_seconds if drain_seconds else 0.0
        s3 = await run.snapshot()
        worker_cpu = workers.cpu_seconds() - worker_cpu0
        stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sampling, 30)
        log(f"  drained: {is_drained} after {drain_seconds:.1f} s ({drain_rate:,.0f} messages/s)")
        stats_key = probe.layout.queue_key("stats")
        lag_key = probe.layout.queue_key("lag")
        counters = {k.decode(): int(v) for k, v in (await queue.hgetall(stats_key)).items()}
        summarize_lags = [float(x) for x in await queue.lrange(lag_key, 0, -1)]
        used_after = [int((await r.info("memory"))["used_memory"]) for r in {run.redis, queue}]

        log("memory census")
        counted = await census(run.redis, probe.layout, plan.max_keys, log)
        if not plan.one_server:
            counted.add(await census(queue, probe.layout, plan.max_keys, log))
        log("search")
        searches, hits = await search_latencies(plan, probe)

        # Phase 3: the lag at a rate the workers sustain, on a fresh session of
        # as many users as `lag_seconds` of writes need.
        steady_rate = plan.lag_rate or max(20.0, 0.5 * drain_rate)
        steady_users = max(plan.clients, round(steady_rate * plan.lag_seconds / plan.messages))
        steady_users = min(plan.users, steady_users)
        log(f"phase 3: lag at {steady_rate:,.0f} messages/s ({steady_users} new sessions)")
        await queue.delete(lag_key)
        steady = LagSampler(run.redis)
        stop3 = asyncio.Event()
        sampling3 = asyncio.create_task(steady.run(stop3))
        phase3, _ = await run_clients(
            run,
            plan.sessions,
            plan.sessions + 1,
            sampler=steady,
            rate=steady_rate,
            user_limit=steady_users,
        )
        await drained(run, probe, 600.0)
        stop3.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sampling3, 30)
        steady_summarize = [float(x) for x in await queue.lrange(lag_key, 0, -1)]
        await probe.aclose()
        if not plan.one_server:
            await queue.aclose()
    finally:
        workers.stop()
        server.stop()
        if queue_server is not server:
            queue_server.stop()

    writes = phase1.writes + phase2.writes
    write_cpu, write_cpu_queue = cpu_delta(s0, s1)
    total_cpu, total_cpu_queue = cpu_delta(s0, s3)
    fleet_cpu, fleet_cpu_queue = cpu_delta(s_go, s2)
    fleet_wall = s2.memory.at - s_go.memory.at
    evalsha_calls, evalsha_us = command_delta(s0.memory, s1.memory, "evalsha")
    top = sorted(
        ((name, *command_delta(s0.memory, s3.memory, name)) for name in s3.memory.commands),
        key=lambda row: -row[2],
    )[:8]
    out.update(
        {
            "environment": {
                "redis": version,
                "python": platform.python_version(),
                "redis_py": package_version("redis"),
                "arq": package_version("arq"),
                "cpus": os.cpu_count(),
                "aof": plan.aof,
                "load_average": os.getloadavg(),
            },
            "written": {
                "writes": writes,
                "messages": messages,
                "users": plan.users,
                "sessions": plan.users * plan.sessions,
            },
            "throughput": {
                "phase1_writes_per_s": phase1.writes / phase1.seconds,
                "phase1_messages_per_s": phase1.messages / phase1.seconds,
                "fleet_writes_per_s": phase2.writes / phase2.seconds,
                "fleet_messages_per_s": phase2.messages / phase2.seconds,
                "fleet_write_seconds": phase2.seconds,
                "drain_seconds": drain_seconds,
                "drained": is_drained,
                "drain_messages_per_s": drain_rate,
                "fleet_indexed": s2.indexed - s_go.indexed,
                "workers_messages_per_s": phase2.messages / (phase2.seconds + drain_seconds),
                "client_cpu_us_per_write": (phase1.cpu_seconds + phase2.cpu_seconds) / writes * 1e6,
            },
            "cpu": {
                "redis_us_per_write": write_cpu / phase1.writes * 1e6,
                "queue_us_per_write": write_cpu_queue / phase1.writes * 1e6,
                "write_script_us": evalsha_us / max(1, evalsha_calls),
                "write_script_calls": evalsha_calls,
                "phase1_writes": phase1.writes,
                "redis_total_s": total_cpu,
                "queue_total_s": total_cpu_queue,
                "redis_workers_us_per_message": (total_cpu - writes * write_cpu / phase1.writes)
                / messages
                * 1e6,
                "queue_workers_us_per_message": (
                    total_cpu_queue - writes * write_cpu_queue / phase1.writes
                )
                / messages
                * 1e6,
                "redis_all_in_us_per_message": total_cpu / messages * 1e6,
                "queue_all_in_us_per_message": total_cpu_queue / messages * 1e6,
                "redis_fleet_utilization": fleet_cpu / fleet_wall,
                "queue_fleet_utilization": fleet_cpu_queue / fleet_wall,
                "worker_process_cpu_us_per_message": worker_cpu / messages * 1e6,
                "top_commands": [{"command": n, "calls": c, "usec": u} for n, c, u in top],
            },
            "lag": {
                "indexed_ms": _pcts(sampler.lags_ms),
                "indexed_unresolved": len(sampler.waiting),
                "summarized_ms": _pcts(summarize_lags),
                "steady_rate": steady_rate,
                "steady_messages": phase3.messages,
                "steady_achieved_rate": phase3.messages / phase3.seconds,
                "steady_indexed_ms": _pcts(steady.lags_ms),
                "steady_summarized_ms": _pcts(steady_summarize),
                # The samples themselves, for bench/plots.py's CDF.
                "indexed_samples_ms": _rounded(sampler.lags_ms),
                "steady_indexed_samples_ms": _rounded(steady.lags_ms),
            },
            "workers": counters,
            "memory": {
                "used_memory_delta": sum(used_after) - sum(used_before),
                "used_memory": sum(used_after),
                "census": asdict(counted),
            },
            "search": {"queries": len(searches), "hits_per_query": hits, **_pcts(searches)},
        }
    )
    return out


def _rounded(samples: list[float]) -> list[float]:
    return [round(x, 1) for x in sorted(samples)]


def _pcts(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "p50": percentile(samples, 50),
        "p95": percentile(samples, 95),
        "p99": percentile(samples, 99),
        "max": max(samples),
    }


# -- the report -----------------------------------------------------------------------


def parameters(res: dict[str, Any]) -> dict[str, float]:
    """The cost model's parameters (docs/capacity.md, same names) from a run."""
    w, cpu = res["written"], res["cpu"]
    c = res["memory"]["census"]
    b: dict[str, float] = c["bytes"]

    def scoped(scope: str) -> float:
        return sum(v for f, v in b.items() if SCOPES.get(f) == scope and f not in INDEX_FAMILIES)

    stored = b.get("session list (s:S:msgs)", 0.0) + b.get("entries (s:S:entries)", 0.0)
    write_ids = b.get("write ids (s:S:writes)", 0.0)
    # Per message in the index: a census taken before the drain ended (a
    # timed-out drain) divides by the docs indexed, not the messages written.
    indexed = c.get("indexed_docs") or w["messages"]
    return {
        "B_index": sum(b.get(f, 0.0) for f in INDEX_FAMILIES) / indexed,
        "B_stored": stored / max(1, c["stored_messages"]),
        "k_stored": c["stored_messages"] / w["sessions"],
        "B_session": (scoped("session") - stored - write_ids) / w["sessions"],
        "B_write_id": write_ids / w["writes"],
        "B_user": scoped("user") / w["users"],
        "B_queue": scoped("run") / w["messages"],
        "overhead": res["memory"]["used_memory_delta"] / max(1.0, sum(b.values())),
        "c_write_us": cpu["redis_us_per_write"],
        "c_worker_us": cpu["redis_workers_us_per_message"],
        "q_write_us": cpu["queue_us_per_write"],
        "q_worker_us": cpu["queue_workers_us_per_message"],
        "write_script_us": cpu["write_script_us"],
        "worker_cpu_us": cpu["worker_process_cpu_us_per_message"],
        "worker_msgs_per_s": res["throughput"]["drain_messages_per_s"] / res["plan"]["workers"],
        "messages_per_write": w["messages"] / w["writes"],
    }


def predicted_memory(
    p: dict[str, float], users: int, sessions: int, messages: int, writes: int
) -> float:
    """docs/capacity.md's memory model: ``used_memory`` of ``users`` users
    holding ``sessions`` live sessions of ``messages`` indexed messages written
    in ``writes`` writes."""
    dataset = (
        messages * (p["B_index"] + p["B_queue"])
        + sessions * (p["B_session"] + p["k_stored"] * p["B_stored"])
        + writes * p["B_write_id"]
        + users * p["B_user"]
    )
    return dataset * p["overhead"]


def model_check(res: dict[str, Any], p: dict[str, float]) -> list[str]:
    """docs/capacity.md's model against this run: memory (from ``p``, which
    may come from another run) and the servers' CPU while the fleet wrote."""
    w, tp, cpu = res["written"], res["throughput"], res["cpu"]
    memory = predicted_memory(p, w["users"], w["sessions"], w["messages"], w["writes"])
    measured = res["memory"]["used_memory_delta"]
    # Messages the workers indexed while the clients wrote: the counter at the
    # end of the drain less what the drain indexed.
    indexed = (
        res["workers"].get("messages_indexed", 0) - tp["drain_messages_per_s"] * tp["drain_seconds"]
    )
    seconds = tp["fleet_write_seconds"]
    writes_per_s = tp["fleet_writes_per_s"]
    lines = [
        f"  memory: predicted {memory / 2**20:,.0f} MiB, measured (used_memory change) "
        f"{measured / 2**20:,.0f} MiB ({memory / max(1, measured):.2f}x)"
    ]
    for label, per_write, per_msg, util in (
        ("memory server", p["c_write_us"], p["c_worker_us"], cpu["redis_fleet_utilization"]),
        ("queue server", p["q_write_us"], p["q_worker_us"], cpu["queue_fleet_utilization"]),
    ):
        guess = (writes_per_s * per_write + indexed / seconds * per_msg) / 1e6
        lines.append(
            f"  {label} CPU while the fleet wrote ({writes_per_s:,.0f} writes/s, "
            f"{indexed / seconds:,.0f} messages/s indexed): predicted {guess:.2f} cores, "
            f"measured {util:.2f}"
        )
    return lines


def report(res: dict[str, Any]) -> str:
    plan, env, w = res["plan"], res["environment"], res["written"]
    tp, cpu, lag, mem = res["throughput"], res["cpu"], res["lag"], res["memory"]
    c = mem["census"]
    msgs = w["messages"]
    lines = [
        f"redismem fleet run: Redis {env['redis']} (own redis-server, AOF "
        f"{'on, everysec' if env['aof'] else 'off'}), Python {env['python']}, "
        f"redis-py {env['redis_py']}, arq {env['arq']}, {env['cpus']} CPUs, "
        f"load {env['load_average'][0]:.1f} at the end",
        f"{plan['users']:,} users x {plan['sessions']} sessions x {plan['messages']} messages = "
        f"{msgs:,} messages in {w['writes']:,} writes; {plan['clients']} client processes x "
        f"{AGENTS_PER_CLIENT} agents, {plan['workers']} workers (truncate summarizer, rule "
        f"extractor, index), keep_recent={plan['keep_recent']}, batch={plan['batch']}"
        + (f", capped at {plan['rate']:,.0f} messages/s" if plan["rate"] else ""),
        "",
        "throughput",
        f"  phase 1 (workers paused)        {tp['phase1_writes_per_s']:>10,.0f} writes/s "
        f"{tp['phase1_messages_per_s']:>10,.0f} messages/s",
        f"  fleet (workers running)         {tp['fleet_writes_per_s']:>10,.0f} writes/s "
        f"{tp['fleet_messages_per_s']:>10,.0f} messages/s  ({tp['fleet_write_seconds']:.0f} s)",
        f"  drain after the writers ended   {tp['drain_seconds']:>10.1f} s"
        + ("" if tp["drained"] else "  NOT DRAINED (timed out)"),
        f"  workers alone (the drain)       {tp['drain_messages_per_s']:>10,.0f} messages/s "
        f"({plan['workers']} workers)",
        f"  workers, fleet phase + drain    {tp['workers_messages_per_s']:>10,.0f} messages/s",
        "",
        f"Redis CPU (used_cpu_sys + used_cpu_user){'':12}memory server  queue server",
        f"  per write, phase 1 (workers paused)      {cpu['redis_us_per_write']:>14.1f} us"
        f"{cpu['queue_us_per_write']:>11.1f} us",
        f"  workers, per message written             "
        f"{cpu['redis_workers_us_per_message']:>14.1f} us"
        f"{cpu['queue_workers_us_per_message']:>11.1f} us",
        f"  all in, per message (whole run)          "
        f"{cpu['redis_all_in_us_per_message']:>14.1f} us"
        f"{cpu['queue_all_in_us_per_message']:>11.1f} us",
        f"  utilization while the fleet wrote        {cpu['redis_fleet_utilization']:>14.2f}   "
        f"{cpu['queue_fleet_utilization']:>11.2f}    cores",
        f"  write script, INFO commandstats evalsha: {cpu['write_script_us']:.1f} us "
        f"({cpu['write_script_calls']:,} calls; wall time inside Redis, inflated when the "
        "server is preempted)",
        f"  workers' processes: {cpu['worker_process_cpu_us_per_message']:,.0f} us of their own "
        "CPU per message; workers' Redis CPU = the whole run's - writes x the phase-1 cost",
        "",
        "lag (ms)                                 p50        p95        p99        max        n",
    ]
    steady = f"phase 3, {lag['steady_achieved_rate']:,.0f} msg/s"
    for label, key in (
        ("write -> indexed, fleet", "indexed_ms"),
        ("write -> summarized, fleet", "summarized_ms"),
        (f"write -> indexed, {steady}", "steady_indexed_ms"),
        (f"write -> summarized, {steady}", "steady_summarized_ms"),
    ):
        p = lag[key]
        if p["n"]:
            lines.append(
                f"  {label:36}{p['p50']:>7,.0f}{p['p95']:>11,.0f}{p['p99']:>11,.0f}"
                f"{p['max']:>11,.0f}{p['n']:>9,}"
            )
        else:
            lines.append(f"  {label:36}no samples")
    if lag["indexed_unresolved"]:
        lines.append(f"  {lag['indexed_unresolved']} index samples never seen indexed")
    lines.append(
        f"  (indexed: sampled by the bench, +-{POLL_SECONDS * 1000:.0f} ms; summarized: the "
        "workers' samples, from the write that made the session due)"
    )
    s = res["search"]
    lines += [
        "",
        f"search, one user ({plan['sessions'] * plan['messages']:,} messages), "
        f"{s['queries']} queries of 1-3 words, limit 10: p50 {s.get('p50', 0):.2f} ms, "
        f"p99 {s.get('p99', 0):.2f} ms, {s['hits_per_query']:.1f} hits/query",
        "",
        f"Redis memory: used_memory {mem['used_memory'] / 2**20:,.0f} MiB "
        f"(+{mem['used_memory_delta'] / 2**20:,.0f} MiB = "
        f"{mem['used_memory_delta'] / msgs:,.0f} B/message); census of {c['keys']:,} keys, "
        + (
            "every key"
            if c["step"] == 1
            else f"1 key in {c['step']} measured (CRC32), x{c['step']}"
        )
        + ", MEMORY USAGE SAMPLES 0",
        f"  {'family':48}{'keys':>10}{'MiB':>10}{'B/msg':>10}  {'per':8}{'B/per':>10}",
    ]
    per_count = {"message": msgs, "session": w["sessions"], "user": w["users"], "run": 1}
    total = 0.0
    for fam, scope in SCOPES.items():
        size = c["bytes"].get(fam, 0.0)
        keys = c["key_counts"].get(fam, 0)
        if not keys:
            continue
        total += size
        lines.append(
            f"  {fam:48}{keys:>10,}{size / 2**20:>10,.1f}{size / msgs:>10,.0f}  {scope:8}"
            f"{size / per_count[scope]:>10,.0f}"
        )
    index = sum(c["bytes"].get(f, 0.0) for f in INDEX_FAMILIES)
    lines += [
        f"  {'total (census)':48}{c['keys']:>10,}{total / 2**20:>10,.1f}{total / msgs:>10,.0f}",
        f"  {'of which the recall index':48}{'':>10}{index / 2**20:>10,.1f}{index / msgs:>10,.0f}",
        f"  stored after compaction: {c['stored_messages']:,} messages in the session lists "
        f"({c['stored_messages'] / w['sessions']:.1f} per session), "
        f"{c['stored_entries']:,} entries; {c.get('indexed_docs', 0):,} messages in the index",
        "",
        "docs/capacity.md parameters from this run (paste into its table after a re-run):",
    ]
    params = parameters(res)
    for name, value in params.items():
        lines.append(f"  {name:20} {value:>12,.2f}")
    lines += ["", "docs/capacity.md's model against this run, with these parameters:"]
    lines += model_check(res, params)
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--users", type=int, default=Plan.users)
    p.add_argument("--sessions", type=int, default=Plan.sessions, help="per user")
    p.add_argument("--messages", type=int, default=Plan.messages, help="per session")
    p.add_argument("--clients", type=int, default=Plan.clients, help="client processes")
    p.add_argument("--workers", type=int, default=Plan.workers, help="worker processes")
    p.add_argument("--keep-recent", type=int, default=Plan.keep_recent)
    p.add_argument("--batch", type=int, default=Plan.batch, help="summarize_batch")
    p.add_argument("--rate", type=float, default=0.0, help="messages/s of all clients; 0: no cap")
    p.add_argument("--aof", action="store_true", help="appendonly yes, appendfsync everysec")
    p.add_argument(
        "--one-server", action="store_true", help="the queue on the memory server, not its own"
    )
    p.add_argument(
        "--lag-rate", type=float, default=0.0, help="phase 3 messages/s; 0: half the drain rate"
    )
    p.add_argument("--lag-seconds", type=float, default=Plan.lag_seconds, help="phase 3 length")
    p.add_argument("--search-users", type=int, default=Plan.search_users)
    p.add_argument("--queries", type=int, default=Plan.queries, help="per search user")
    p.add_argument("--max-keys", type=int, default=Plan.max_keys, help="census: sample above")
    p.add_argument("--seed", type=int, default=Plan.seed)
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="the results as JSON: to PATH (e.g. bench/results/fleet.json, what bench/plots.py "
        "reads), or to stdout instead of the report when PATH is left out",
    )
    p.add_argument("--client", help=argparse.SUPPRESS)  # internal: one client process's job
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.client:
        asyncio.run(client_main(ClientJob(**json.loads(args.client))))
        return
    if min(args.users, args.sessions, args.messages, args.clients, args.workers) < 1:
        raise SystemExit("--users, --sessions, --messages, --clients and --workers must be >= 1")
    if args.sessions < 2:
        raise SystemExit("--sessions must be >= 2 (phase 1 writes the first, phase 2 the rest)")
    plan = Plan(
        users=args.users,
        sessions=args.sessions,
        messages=args.messages,
        clients=args.clients,
        workers=args.workers,
        keep_recent=args.keep_recent,
        batch=args.batch,
        rate=args.rate,
        aof=args.aof,
        one_server=args.one_server,
        lag_rate=args.lag_rate,
        lag_seconds=args.lag_seconds,
        search_users=args.search_users,
        queries=args.queries,
        max_keys=args.max_keys,
        seed=args.seed,
    )

    def log(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    res = asyncio.run(bench(plan, log))
    res["seconds"] = time.perf_counter() - started
    log(f"done in {res['seconds']:.0f} s")
    if args.json and args.json != "-":
        write_json(Path(args.json), "fleet", res)
        print(report(res))
    else:
        print(json.dumps(res, indent=2) if args.json else report(res))


if __name__ == "__main__":
    main()
