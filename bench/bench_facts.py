"""Knowledge benchmark: typed long-term memories extracted by the workers.

Everything is written through ``Memory.write`` (``index=True``), extracted by
real ``arq workers.WorkerSettings`` processes configured by ``REDISMEM_*``
variables, and read back through ``mem.memories.search`` and ``mem.search``:

1. Extraction throughput of one worker process: N sessions (200; 20 with
   ``--quick``; 4 sessions per user) of 10 user messages each, one write per
   message, realistic sentences of which about 60 % state something a user
   says about themselves ("I live in Porto", "I work at ...", "my favorite
   color is ...", "I prefer trains ...", plans with dates). They are written
   while the worker is stopped (SIGSTOP); the clock runs from SIGCONT until
   the workers' counter (``redismem stats``) covers every message, i.e. its
   memories are stored (``flush()`` can return earlier: the report says when
   it did). Median of 3 rounds (1 with ``--quick``), each on a fresh namespace
   and worker. ``REDISMEM_EXTRACT_QUIET=0`` (a session is extracted as soon as
   it is indexed). Three workers: ``off`` (indexing only, for comparison),
   ``rules`` (``RuleExtractor``) and ``llm`` (``LLMExtractor`` against a local
   chat-completions stub in this process that answers after 200 ms with one
   fact per "I live in X", "I work at X" and "my favorite color is X" it finds
   in the conversation sent). The figures include the indexing every job
   does first.
2. Lag from ``write`` returning to the fact being found by
   ``mem.memories.search(city, user_id=user)`` (polled every 10 ms), one idle
   ``rules`` worker, one message "I live in <city>." in a fresh user's fresh
   session per sample (30; 10 with ``--quick``): with ``REDISMEM_EXTRACT_QUIET``
   0 and with its default 2 s, the client at its default ``summarize_delay``
   (1 s, the jobs' coalescing delay); and quiet 0 with ``summarize_delay``
   0.05 s (the workers' own time).
3. LoCoMo (``--data``, default ``../shared/data/locomo``; skipped with a
   message when absent), written as ``bench_recall.py`` writes it (one user per
   conversation, one session per LoCoMo session, one write per turn: role
   "user" for speaker_a, "assistant" with ``name`` for speaker_b, the turn's
   ``dia_id`` in the metadata), 2 ``rules`` workers (quiet 0), flushed. Every
   question of categories 1-4 with evidence is asked three ways: the top 10
   messages (``mem.search``), the top 10 memories
   (``mem.memories.search(question, user_id=user)``) and both fused by reciprocal rank
   (k=60) into a top 10. A question counts when its answer (a non-empty
   string; lower-cased, punctuation turned into spaces, on word boundaries)
   appears in the text of one of the 10 results. Also the evidence recall@10
   of the messages (any evidence ``dia_id`` among the top 10, as in
   ``bench_recall.py``). The rule extractor reads **user** messages only: the
   second speaker's turns yield no memories.

By default a throwaway ``redis-server`` is started on a free loopback port;
``--url`` (or ``$REDISMEM_BENCH_URL``) uses an existing server, writing only
under namespaces ``benchfacts-*`` (cleared at the end) and queues
``redismem/bench-facts-*``.

    .venv/bin/python bench/bench_facts.py            # full run, ~3 min on 2 cores
    .venv/bin/python bench/bench_facts.py --quick    # smoke run, < 1 min
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from _locomo import CATEGORIES, DEFAULT_DATA, Conversation, Turn, load
from _util import Table, package_version, percentile

from redismem import Memory
from redismem.core.keys import QUEUE_KEY_PREFIX

ROOT = Path(__file__).resolve().parents[1]

PREFIX = "benchfacts"
QUEUE_PREFIX = "redismem/bench-facts"
FILL_DELAY = 0.05  # the clients' summarize_delay where the lag is not measured
LLM_DELAY = 0.2  # seconds the chat-completions stub takes per call

Log = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    sessions: int  # throughput: sessions written
    per_session: int  # throughput: user messages per session
    sessions_per_user: int
    tp_rounds: int
    lag_samples: int
    smoke: bool = False


FULL = Plan(sessions=200, per_session=10, sessions_per_user=4, tp_rounds=3, lag_samples=30)
QUICK = Plan(
    sessions=20, per_session=10, sessions_per_user=4, tp_rounds=1, lag_samples=10, smoke=True
)
#: The namespaces this run wrote (cleared at the end with --url).
NAMESPACES: list[str] = []


def used(namespace: str) -> str:
    if namespace not in NAMESPACES:
        NAMESPACES.append(namespace)
    return namespace


class Failure(Exception):
    """The run cannot go on (a flush that never ended, workers that did not start)."""


# -- the workers ------------------------------------------------------------------


class Workers:
    """``count`` worker processes on one namespace and queue, configured by
    ``REDISMEM_*`` variables (``extra`` names them without the prefix);
    stopped (SIGCONT, SIGTERM, then SIGKILL) when the ``async with`` ends."""

    def __init__(
        self, url: str, namespace: str, queue: str, count: int = 1, **extra: str | float
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.queue = queue
        self.count = count
        self.extra = extra
        self.processes: list[asyncio.subprocess.Process] = []
        self.logdir = tempfile.TemporaryDirectory(prefix="bench-facts-workers-")

    async def __aenter__(self) -> Workers:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self, probe: Memory) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
        env.update(
            PYTHONUNBUFFERED="1",
            REDISMEM_URL=self.url,
            REDISMEM_NAMESPACE=self.namespace,
            REDISMEM_QUEUE_NAME=self.queue,
        )
        env.update({f"REDISMEM_{k.upper()}": str(v) for k, v in self.extra.items()})
        for i in range(self.count):
            log = open(Path(self.logdir.name) / f"worker{i}.log", "wb")  # noqa: SIM115, ASYNC230
            try:
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
            finally:
                log.close()
        deadline = time.monotonic() + 30
        while await probe.redis.zcard(f"{self.queue}:workers") < self.count:
            dead = [p for p in self.processes if p.returncode is not None]
            if dead or time.monotonic() > deadline:
                raise Failure(f"the workers did not start:\n{self.logs()}")
            await asyncio.sleep(0.05)

    def pause(self, paused: bool) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def logs(self) -> str:
        out = []
        for path in sorted(Path(self.logdir.name).glob("*.log")):
            out.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    async def stop(self) -> None:
        self.pause(False)  # a stopped process would not act on SIGTERM
        for process in self.processes:
            if process.returncode is None:
                process.terminate()
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        self.processes.clear()
        self.logdir.cleanup()


async def counters(mem: Memory) -> dict[str, int]:
    """The workers' counters of ``mem``'s namespace (``redismem stats``)."""
    raw = await mem.redis.hgetall(mem.layout.queue_key("stats"))
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in (raw or {}).items()
    }


async def flushed(mem: Memory, workers: Workers, within: float, **kwargs: Any) -> float:
    """Seconds ``flush`` took; ``Failure`` with the worker logs on a timeout."""
    started = time.perf_counter()
    if not await mem.flush(timeout=within, **kwargs):
        raise Failure(f"flush() timed out after {within} s\n{workers.logs()}")
    return time.perf_counter() - started


# -- the chat-completions stub ----------------------------------------------------

_LINE = re.compile(r"\[(\d+)\] \S+ user: ([^\n]*)")
_STUB_FACTS = (
    (
        re.compile(r"\bI live in ([A-Z][a-z]+(?: [A-Z][a-z]+)*)"),
        "lives_in",
        "The user lives in {}.",
    ),
    (
        re.compile(r"\bI work at ([A-Z][\w&]*(?: [A-Z][\w&]*)*)"),
        "works_at",
        "The user works at {}.",
    ),
    (
        re.compile(r"\b[Mm]y favorite color is ([a-z]+)"),
        "favorite_color",
        "The user's favorite color is {}.",
    ),
)


def stub_memories(transcript: str) -> list[dict[str, Any]]:
    """What the stub model finds in the user message it was sent: one fact
    per statement of a home, an employer or a favorite color."""
    found = []
    for n, text in _LINE.findall(transcript):
        for pattern, predicate, sentence in _STUB_FACTS:
            for value in pattern.findall(text):
                found.append(
                    {
                        "kind": "fact",
                        "subject": "user",
                        "predicate": predicate,
                        "object": value,
                        "text": sentence.format(value),
                        "messages": [int(n)],
                    }
                )
    return found


class ChatStub:
    """A local OpenAI-compatible ``/chat/completions`` endpoint answering
    every call after ``delay`` seconds (stdlib threaded HTTP server)."""

    def __init__(self, delay: float = LLM_DELAY) -> None:
        self.delay = delay
        self.calls = 0
        self.messages_sent = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                transcript = "\n".join(
                    str(m.get("content", ""))
                    for m in body.get("messages", [])
                    if m["role"] == "user"
                )
                with stub.lock:
                    stub.calls += 1
                    stub.messages_sent += len(re.findall(r"\[\d+\] \S+ \w+", transcript))
                time.sleep(stub.delay)
                content = json.dumps({"memories": stub_memories(transcript)})
                answer = json.dumps(
                    {
                        "id": "stub",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ChatStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


# -- realistic user messages ---------------------------------------------------------

# fmt: off
CITIES = (
    "Lisbon", "Porto", "Berlin", "Munich", "Paris", "Lyon", "Madrid", "Seville", "Rome",
    "Milan", "Vienna", "Prague", "Warsaw", "Krakow", "Oslo", "Bergen", "Stockholm",
    "Copenhagen", "Helsinki", "Dublin", "Edinburgh", "Manchester", "Amsterdam", "Utrecht",
    "Brussels", "Zurich", "Geneva", "Athens", "Istanbul", "Boston", "Chicago", "Denver",
    "Seattle", "Toronto", "Montreal", "Austin", "Nairobi", "Lagos", "Kyoto", "Osaka",
    "Melbourne", "Auckland", "Santiago", "Lima", "Bogota", "Valencia", "Bilbao", "Hamburg",
)
COMPANIES = (
    "Acme Robotics", "Globex", "Initech", "Northwind Traders", "Contoso", "Umbrella Health",
    "Stark Logistics", "Wayne Foods", "Hooli", "Vandelay Industries", "Blue Harbor Bank",
    "Tyrell Labs", "Cyberdyne Systems", "Soylent Energy", "Oceanic Airlines", "Pied Piper",
)
COLORS = ("teal", "green", "blue", "orange", "purple", "red", "yellow", "black", "navy")
JOBS = ("nurse", "data analyst", "teacher", "software engineer", "architect", "chef", "pilot")
HOBBIES = (
    "hiking in the mountains", "baking sourdough bread", "playing chess", "long bike rides",
    "jazz concerts", "gardening", "watching old films", "swimming in the sea",
)
FOODS = ("spicy food", "mushrooms", "olives", "blue cheese", "seafood", "coriander")
ALLERGIES = ("peanuts", "shellfish", "pollen", "penicillin", "cats")
MODES = (
    ("trains", "planes"), ("window seats", "aisle seats"), ("buses", "cars"),
    ("morning flights", "evening flights"), ("tea", "coffee"), ("emails", "phone calls"),
)
NAMES = ("Maria", "Ana", "Tom", "Lena", "Sam", "Noah", "Priya", "Jonas", "Ines", "Omar")
RELATIONS = ("sister", "brother", "wife", "husband", "friend", "colleague", "daughter")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "March", "April", "May", "June", "July", "September", "October")
APPOINTMENTS = ("dentist appointment", "job interview", "doctor's appointment", "team offsite")
TODOS = ("call the bank", "renew my passport", "pay the rent", "book the car service")
GOALS = ("run a marathon", "learn Spanish", "visit Japan", "save for a house")
FACTS: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"I live in {r.choice(CITIES)}.",
    lambda r: f"Hi! I live in {r.choice(CITIES)} and I work at {r.choice(COMPANIES)}.",
    lambda r: f"I work at {r.choice(COMPANIES)}.",
    lambda r: f"I work as a {r.choice(JOBS)} at {r.choice(COMPANIES)}.",
    lambda r: f"My favorite color is {r.choice(COLORS)}.",
    lambda r: "I prefer {} over {}.".format(*r.choice(MODES)),
    lambda r: f"I'm going to {r.choice(CITIES)} next {r.choice(WEEKDAYS)}.",
    lambda r: f"I have a {r.choice(APPOINTMENTS)} on {r.choice(MONTHS)} {r.randint(1, 28)}.",
    lambda r: f"I'm allergic to {r.choice(ALLERGIES)}.",
    lambda r: f"I really love {r.choice(HOBBIES)}.",
    lambda r: f"I don't like {r.choice(FOODS)}.",
    lambda r: f"My {r.choice(RELATIONS)} {r.choice(NAMES)} is visiting next week.",
    lambda r: f"Remind me to {r.choice(TODOS)} on {r.choice(WEEKDAYS)}.",
    lambda r: f"I plan to {r.choice(GOALS)} in {r.choice(MONTHS)}.",
)
CHATTER: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"Can you find me a cheap hotel near the old town in {r.choice(CITIES)}?",
    lambda r: f"What's the weather like in {r.choice(CITIES)} tomorrow?",
    lambda r: "Thanks, that looks great.",
    lambda r: "Could you summarize the report from yesterday in three bullet points?",
    lambda r: "Please compare the two options again, I could not decide.",
    lambda r: "Let's move on to the next item on the list.",
    lambda r: f"How long does the train from {r.choice(CITIES)} to {r.choice(CITIES)} take?",
    lambda r: "Sure, go ahead and send the email to the whole team.",
)
# fmt: on


def user_messages(rng: random.Random, count: int, facts: float = 0.6) -> list[str]:
    """``count`` user messages, each a statable fact with probability ``facts``."""
    return [rng.choice(FACTS if rng.random() < facts else CHATTER)(rng) for _ in range(count)]


# -- 1. extraction throughput --------------------------------------------------------


@dataclass
class ThroughputResult:
    extractor: str
    messages: int
    flush_seconds: float  # SIGCONT -> flush() returned
    done_seconds: float  # SIGCONT -> the workers' counter says every message is done
    at_flush: int  # messages done (extracted; indexed with "off") when flush() returned
    memories: int  # memories added (or merged), the workers' counter
    active: int  # records found afterwards, active ones
    stored: int  # records found afterwards, any status (superseded included)
    users: int
    llm_calls: int = 0
    llm_messages: int = 0

    @property
    def rate(self) -> float:
        return self.messages / self.done_seconds


async def throughput_round(
    url: str, plan: Plan, extractor: str, round_: int, stub: ChatStub | None, log: Log
) -> ThroughputResult:
    namespace = used(f"{PREFIX}-tp-{extractor}-{round_}")
    queue = f"{QUEUE_PREFIX}-tp-{extractor}-{round_}"
    mem = await Memory.connect(
        url, namespace=namespace, queue_name=queue, index=True, summarize_delay=FILL_DELAY
    )
    extra: dict[str, str | float] = {"EXTRACTOR": extractor, "EXTRACT_QUIET": 0}
    if stub is not None:
        extra.update(LLM_BASE_URL=stub.base_url, LLM_MODEL="fake")
    calls, sent = (stub.calls, stub.messages_sent) if stub else (0, 0)
    key = "messages_indexed" if extractor == "off" else "messages_extracted"
    try:
        async with Workers(url, namespace, queue, 1, **extra) as workers:
            await workers.start(mem)
            workers.pause(True)
            rng = random.Random(round_)
            users = -(-plan.sessions // plan.sessions_per_user)
            todo = [
                (f"u{s // plan.sessions_per_user}", f"s{s}", user_messages(rng, plan.per_session))
                for s in range(plan.sessions)
            ]
            total = plan.sessions * plan.per_session

            async def writer() -> None:
                while todo:
                    uid, sid, texts = todo.pop()
                    for text in texts:
                        await mem.write(
                            [{"role": "user", "content": text}], session_id=sid, user_id=uid
                        )

            await asyncio.gather(*(writer() for _ in range(16)))
            await asyncio.sleep(FILL_DELAY + 0.2)  # every job due
            if (await counters(mem)).get("messages_indexed", 0):
                raise Failure("the stopped worker indexed messages")

            async def until_done() -> float:
                while (await counters(mem)).get(key, 0) < total:
                    if time.perf_counter() - started > 600:
                        raise Failure(f"{extractor}: not done after 600 s\n{workers.logs()}")
                    await asyncio.sleep(0.01)
                return time.perf_counter() - started

            started = time.perf_counter()
            workers.pause(False)
            done = asyncio.create_task(until_done())
            flush_seconds = await flushed(mem, workers, 600)
            at_flush = (await counters(mem)).get(key, 0)
            done_seconds = await done
            after = await counters(mem)
            if after.get("failures", 0):
                raise Failure(f"{extractor}: jobs failed\n{workers.logs()}")
        active = stored = 0
        for u in range(users):
            active += len(await mem.memories.search(user_id=f"u{u}", limit=100_000))
            stored += len(await mem.memories.search(user_id=f"u{u}", status="any", limit=100_000))
        log(
            f"throughput {extractor}, round {round_ + 1}: {total:,} messages done in "
            f"{done_seconds:.2f} s (flush() returned after {flush_seconds:.2f} s)"
        )
        return ThroughputResult(
            extractor=extractor,
            messages=total,
            flush_seconds=flush_seconds,
            done_seconds=done_seconds,
            at_flush=at_flush,
            memories=after.get("memories_added", 0),
            active=active,
            stored=stored,
            users=users,
            llm_calls=stub.calls - calls if stub else 0,
            llm_messages=stub.messages_sent - sent if stub else 0,
        )
    finally:
        await mem.aclose()


async def throughput(url: str, plan: Plan, extractor: str, log: Log) -> list[ThroughputResult]:
    """``plan.tp_rounds`` rounds, each on a fresh namespace and worker."""
    log(
        f"throughput {extractor}: {plan.tp_rounds} round(s) of {plan.sessions} sessions x "
        f"{plan.per_session} messages, written while the worker is stopped"
    )
    with contextlib.ExitStack() as stack:
        stub = stack.enter_context(ChatStub()) if extractor == "llm" else None
        return [
            await throughput_round(url, plan, extractor, r, stub, log)
            for r in range(plan.tp_rounds)
        ]


# -- 2. lag ------------------------------------------------------------------------------


@dataclass
class LagResult:
    label: str
    lags_ms: list[float]
    lost: int


async def lag_samples(
    mem: Memory, workers: Workers, tag: str, samples: int, rng: random.Random
) -> tuple[list[float], int]:
    lags: list[float] = []
    lost = 0
    for i in range(samples):
        uid, city = f"lag-{tag}-{i}", rng.choice(CITIES)
        await mem.write(
            [{"role": "user", "content": f"I live in {city}."}], session_id="s", user_id=uid
        )
        written = time.perf_counter()
        while True:
            hits = await mem.memories.search(city, user_id=uid, limit=5)
            now = time.perf_counter()
            if any(city in h.record.text for h in hits):
                lags.append((now - written) * 1000)
                break
            if now - written > 30:
                lost += 1
                break
            await asyncio.sleep(0.01)
        await flushed(mem, workers, 30, user_id=uid)  # idle again before the next sample
    return lags, lost


async def lag(url: str, plan: Plan, log: Log) -> list[LagResult]:
    out = []
    rng = random.Random(3)
    for quiet in (0.0, 2.0):
        namespace, queue = used(f"{PREFIX}-lag{quiet:g}"), f"{QUEUE_PREFIX}-lag{quiet:g}"
        delays = (1.0, FILL_DELAY) if quiet == 0 else (1.0,)
        clients = [
            await Memory.connect(
                url, namespace=namespace, queue_name=queue, index=True, summarize_delay=d
            )
            for d in delays
        ]
        try:
            async with Workers(
                url, namespace, queue, 1, EXTRACTOR="rules", EXTRACT_QUIET=quiet
            ) as workers:
                await workers.start(clients[0])
                for delay, mem in zip(delays, clients, strict=True):
                    log(
                        f"lag: quiet {quiet:g} s, summarize_delay {delay:g} s, "
                        f"{plan.lag_samples} samples"
                    )
                    lags, lost = await lag_samples(
                        mem, workers, f"{quiet:g}-{delay:g}", plan.lag_samples, rng
                    )
                    default = " (defaults)" if quiet == 2 and delay == 1 else ""
                    out.append(
                        LagResult(
                            f"quiet {quiet:g} s, summarize_delay {delay:g} s{default}", lags, lost
                        )
                    )
        finally:
            for mem in clients:
                await mem.aclose()
    return out


# -- 3. LoCoMo --------------------------------------------------------------------------

_PUNCT = re.compile(r"[^\w\s]")


def normalized(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces, padded with spaces
    (so ``" x " in normalized(t)`` matches on word boundaries)."""
    return " " + " ".join(_PUNCT.sub(" ", text.lower()).split()) + " "


def contains(answer: str, texts: Sequence[str]) -> bool:
    return any(answer in normalized(t) for t in texts)


def fused(messages: Sequence[str], memories: Sequence[str], k: int = 60, n: int = 10) -> list[str]:
    """Reciprocal rank fusion of two ranked lists of different items: the top ``n``."""
    scored = [(1 / (k + r), 0, r, t) for r, t in enumerate(messages, start=1)]
    scored += [(1 / (k + r), 1, r, t) for r, t in enumerate(memories, start=1)]
    scored.sort(key=lambda s: (-s[0], s[1], s[2]))
    return [t for *_, t in scored[:n]]


@dataclass
class Asked:
    category: int
    evidence_at_10: bool  # any evidence dia_id among the top 10 messages
    answer: str | None  # normalized, None when not a non-empty string
    in_messages: bool = False
    in_memories: bool = False
    in_fused: bool = False
    in_both: bool = False  # in the 10 messages or the 10 memories (20 texts)
    memory_hits: int = 0


@dataclass
class LocomoResult:
    asked: list[Asked]
    turns: int
    user_turns: int
    index_seconds: float
    counters: dict[str, int]
    memories: dict[str, int]  # conversation -> active records
    kinds: dict[str, int]  # kind -> records, all conversations


def answers(data: Path, conv: Conversation) -> list[Any]:
    """The answers of ``conv.questions``, read from the raw file (``_locomo``
    does not load them), filtered as ``_locomo.load`` filters the questions."""
    raw = json.loads((data / f"{conv.sample}.json").read_text())
    qa = [q for q in raw["qa"] if int(q["category"]) in CATEGORIES and q["evidence"]]
    if [q["question"] for q in qa] != [q.text for q in conv.questions]:
        raise Failure(f"{conv.sample}: the questions do not line up with _locomo.load")
    return [q.get("answer") for q in qa]


async def locomo(url: str, data: Path, log: Log) -> LocomoResult | str:
    if not data.is_dir() or not any(data.glob("*.json")):  # noqa: ASYNC240 - before timing
        return f"skipped: no LoCoMo data at {data} (pass --data DIR)"
    convs = load(data)
    namespace, queue = used(f"{PREFIX}-locomo"), f"{QUEUE_PREFIX}-locomo"
    mem = await Memory.connect(
        url, namespace=namespace, queue_name=queue, index=True, summarize_delay=FILL_DELAY
    )
    try:
        async with Workers(url, namespace, queue, 2, EXTRACTOR="rules", EXTRACT_QUIET=0) as workers:
            await workers.start(mem)
            turns = sum(len(c.turns) for c in convs)
            log(f"LoCoMo: writing {turns:,} turns of {len(convs)} conversations, 2 rules workers")

            async def write_conv(conv: Conversation) -> None:
                by_session: dict[int, list[Turn]] = defaultdict(list)
                for turn in conv.turns:
                    by_session[turn.session].append(turn)

                async def one_session(n: int, turns: list[Turn]) -> None:
                    for turn in turns:  # one write per turn, in order
                        message = {
                            "role": turn.role,
                            "name": turn.name,
                            "content": turn.content,
                            "metadata": {"dia_id": turn.dia_id},
                        }
                        await mem.write(
                            [message], session_id=f"session_{n}", user_id=f"locomo-{conv.sample}"
                        )

                await asyncio.gather(*(one_session(n, t) for n, t in by_session.items()))

            await asyncio.gather(*(write_conv(c) for c in convs))
            started = time.perf_counter()
            seconds = await flushed(mem, workers, 600)
            # flush() can return before the last memories are stored (see the
            # report): wait for the workers' counter to cover every turn.
            while (stats := await counters(mem)).get("messages_extracted", 0) < turns:
                if time.perf_counter() - started > 600:
                    raise Failure(f"LoCoMo: extraction not done\n{workers.logs()}")
                await asyncio.sleep(0.05)
            seconds = max(seconds, time.perf_counter() - started)
        log(f"LoCoMo: indexed and extracted ({seconds:.1f} s after the last write); asking")
        memories: dict[str, int] = {}
        kinds: dict[str, int] = defaultdict(int)
        asked: list[Asked] = []
        for conv in convs:
            uid = f"locomo-{conv.sample}"
            records = await mem.memories.search(user_id=uid, limit=100_000)
            memories[conv.sample] = len(records)
            for hit in records:
                kinds[hit.record.kind] += 1
            for q, answer in zip(conv.questions, answers(data, conv), strict=True):
                msg_hits = await mem.search(q.text, user_id=uid, limit=10)
                mem_hits = await mem.memories.search(q.text, user_id=uid, limit=10)
                dia = {h.message.metadata.get("dia_id") for h in msg_hits}
                one = Asked(q.category, bool(dia & q.evidence), None, memory_hits=len(mem_hits))
                if isinstance(answer, str) and normalized(answer).strip():
                    one.answer = normalized(answer)
                    msg_texts = [h.message.content for h in msg_hits]
                    mem_texts = [h.record.text for h in mem_hits]
                    one.in_messages = contains(one.answer, msg_texts)
                    one.in_memories = contains(one.answer, mem_texts)
                    one.in_fused = contains(one.answer, fused(msg_texts, mem_texts))
                    one.in_both = one.in_messages or one.in_memories
                asked.append(one)
        user_turns = sum(t.role == "user" for c in convs for t in c.turns)
        return LocomoResult(asked, turns, user_turns, seconds, stats, memories, dict(kinds))
    finally:
        await mem.aclose()


# -- the run ----------------------------------------------------------------------------


@dataclass
class Results:
    redis_version: str = "?"
    throughput: list[list[ThroughputResult]] = field(default_factory=list)
    lag: list[LagResult] = field(default_factory=list)
    locomo: LocomoResult | str | None = None


async def bench(url: str, plan: Plan, data: Path, log: Log, *, cleanup: bool = False) -> Results:
    res = Results()
    probe = await Memory.connect(url, namespace=PREFIX)
    try:
        res.redis_version = (await probe.redis.info("server")).get("redis_version", "?")
        for extractor in ("off", "rules", "llm"):
            res.throughput.append(await throughput(url, plan, extractor, log))
        res.lag = await lag(url, plan, log)
        res.locomo = await locomo(url, data, log)
    finally:
        if cleanup:
            log("clearing the namespaces")
            for namespace in NAMESPACES:
                async with await Memory.connect(url, namespace=namespace) as mem:
                    await asyncio.wait_for(mem.clear_all(), 120)
            # The queue side: the workers' counters, the arq queues and job keys.
            for pattern in (
                f"{QUEUE_KEY_PREFIX}:{PREFIX}-*",
                f"{QUEUE_PREFIX}-*",
                f"arq:*:{QUEUE_PREFIX}-*",
            ):
                async for key in probe.redis.scan_iter(match=pattern, count=1000):
                    await probe.redis.unlink(key)
        await probe.aclose()
    return res


# -- report ------------------------------------------------------------------------------


def report_throughput(t: Table, res: Results, plan: Plan) -> None:
    if not res.throughput:
        return
    rounds = f", median of {plan.tp_rounds} rounds" if plan.tp_rounds > 1 else ""
    t.header(
        f"extraction, 1 worker, quiet 0: {plan.sessions} sessions x {plan.per_session} "
        f"msgs{rounds}",
        "messages/s",
        "memories/s",
        "seconds",
    )
    labels = {
        "off": "indexing only (REDISMEM_EXTRACTOR=off)",
        "rules": "rules (RuleExtractor)",
        "llm": f"llm (stub answering in {LLM_DELAY * 1000:.0f} ms)",
    }
    early = []
    for runs in res.throughput:
        r = sorted(runs, key=lambda x: x.done_seconds)[len(runs) // 2]
        t.row(
            labels[r.extractor],
            f"{r.rate:,.0f}",
            f"{r.memories / r.done_seconds:,.0f}" if r.extractor != "off" else "-",
            f"{r.done_seconds:.2f}",
        )
        if len(runs) > 1:
            rates = sorted(x.rate for x in runs)
            t.note(f"  messages/s of the rounds: {' / '.join(f'{x:,.0f}' for x in rates)}")
        if r.extractor != "off":
            line = (
                f"  {r.memories:,} memories added (or merged) from {r.messages:,} messages; "
                f"{r.stored:,} records of {r.users} users, {r.active:,} active"
            )
            if r.llm_calls:
                line += f"; {r.llm_calls} calls, {r.llm_messages / r.llm_calls:.1f} msgs/call"
            t.note(line)
        for x in runs:
            if x.at_flush < x.messages:
                early.append(
                    f"  {x.extractor}: {x.at_flush:,} of {x.messages:,} messages done when "
                    f"flush() returned ({x.flush_seconds:.2f} s), all {x.done_seconds:.2f} s"
                )
    t.note("timed: SIGCONT of the worker -> its counter covers every message (jobs index,")
    t.note("then extract, then store the memories)")
    if early:
        t.note("flush() returned before the work was done:")
        for line in early:
            t.note(line)


def report_lag(t: Table, res: Results) -> None:
    if not res.lag:
        return
    t.header(
        "lag, write -> fact found by memories.search, 1 idle rules worker",
        "p50 (ms)",
        "p95 (ms)",
        "max (ms)",
    )
    for r in res.lag:
        if r.lags_ms:
            t.row(
                f"{r.label} (n={len(r.lags_ms)})",
                f"{percentile(r.lags_ms, 50):,.0f}",
                f"{percentile(r.lags_ms, 95):,.0f}",
                f"{max(r.lags_ms):,.0f}",
            )
        if r.lost:
            t.note(f"  {r.lost} never found within 30 s")
    t.note("quiet = REDISMEM_EXTRACT_QUIET (workers); summarize_delay = the jobs' delay (client)")


def report_locomo(t: Table, res: Results) -> None:
    if res.locomo is None:
        return
    if isinstance(res.locomo, str):
        t.note("")
        t.note(f"LoCoMo: {res.locomo}")
        return
    lr = res.locomo
    with_answer = [a for a in lr.asked if a.answer is not None]
    t.header(
        f"LoCoMo, answer in the top 10 ({len(with_answer)} questions)",
        "messages",
        "memories",
        "fused (RRF)",
    )

    def rate(items: list[Asked], attr: str) -> str:
        return f"{sum(getattr(a, attr) for a in items) / len(items):.3f}" if items else "-"

    def row(label: str, items: list[Asked]) -> None:
        t.row(
            label, rate(items, "in_messages"), rate(items, "in_memories"), rate(items, "in_fused")
        )

    row("overall", with_answer)
    by_cat: dict[int, list[Asked]] = defaultdict(list)
    for a in with_answer:
        by_cat[a.category].append(a)
    for cat in sorted(by_cat):
        row(f"  category {cat} {CATEGORIES[cat]} (n={len(by_cat[cat])})", by_cat[cat])
    t.row("  in the 10 messages or the 10 memories (20 texts)", rate(with_answer, "in_both"))
    some = sum(a.memory_hits > 0 for a in with_answer)
    t.note(
        f"  questions with any memory found: {some} of {len(with_answer)}; "
        f"{len(lr.asked) - len(with_answer)} questions without a string answer left out"
    )
    ev = [a.evidence_at_10 for a in lr.asked]
    t.row(
        f"evidence recall@10, messages only ({len(ev)} questions)",
        f"{sum(ev) / len(ev):.3f}",
    )
    total = sum(lr.memories.values())
    kinds = ", ".join(f"{n} {k}s" for k, n in sorted(lr.kinds.items(), key=lambda kv: -kv[1]))
    t.row(
        f"memories extracted (active), {lr.turns:,} turns, {lr.user_turns:,} by speaker_a",
        f"{total:,}",
    )
    t.note(f"  {kinds}")
    t.note(
        "  per conversation: "
        + ", ".join(f"{sample} {n}" for sample, n in lr.memories.items())
        + f"; workers' counters: {lr.counters.get('messages_extracted', 0):,} messages "
        f"extracted, {lr.counters.get('memories_added', 0):,} memories added (or merged)"
    )
    t.note("  the rule extractor reads user messages only (speaker_a); speaker_b's turns give none")
    t.note(f"  indexing + extraction, 2 rules workers: {lr.index_seconds:.1f} s after the writes")


def report(res: Results, plan: Plan, where: str) -> str:
    t = Table(label_width=72)
    t.note(
        f"redismem memories benchmark: Redis {res.redis_version} ({where}), "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    hiredis = package_version("hiredis")
    t.note(f"redis-py {package_version('redis')}" + (f" (hiredis {hiredis})" if hiredis else ""))
    report_throughput(t, res, plan)
    report_lag(t, res)
    report_locomo(t, res)
    if plan.smoke:
        t.note("")
        t.note("smoke run (--quick): fewer sessions and lag samples than the full run")
    return t.text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("REDISMEM_BENCH_URL"),
        help="use this Redis instead of a throwaway redis-server (default: $REDISMEM_BENCH_URL)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo folder")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    try:
        if args.url:
            res = asyncio.run(bench(args.url, plan, args.data, log, cleanup=True))
            where = "given by --url"
        else:
            from _util import throwaway_redis

            with throwaway_redis() as url:
                log(f"started throwaway redis-server at {url}")
                res = asyncio.run(bench(url, plan, args.data, log))
            where = "throwaway redis-server on loopback"
    except Failure as exc:
        log(f"FAILED: {exc}")
        return 1
    print(report(res, plan, where))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
