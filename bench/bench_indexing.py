"""Indexing throughput: the Python weights per message, and a worker's
messages/s on a backlog (issue 22, goal 3: >= 5,000 messages/s per worker).

a. ``weights``: microseconds per message of the index-time weights over
   realistic session streams, the messages taken as ``index_pass`` takes them
   (batches of ``INDEX_BATCH`` with ``CONTEXT_TURNS`` texts of context), three
   ways in one run, rounds interleaved: ``old`` (``_ranking_v1``: the analysis
   as of 834c88b, ``doc_weights`` per message), ``doc_weights`` (today's, per
   message) and ``ContextWeigher`` (each text analysed once). Streams: agent
   messages (``_util.conversation``, with tool calls), synthetic Zipf text
   (``bench_recall.Corpus``) and the LoCoMo conversations (``--data``; skipped
   when absent). Warm: the analysis caches filled by an earlier round (a worker
   that has seen the vocabulary); cold: every cache emptied before each round.
   The new results are checked equal to the old ones, message by message.
b. ``worker``: messages/s of one real worker (``python -m arq
   workers.WorkerSettings``, the tests' environment) indexing a backlog: N
   messages over S sessions (``--text zipf``: ``bench_recall.Corpus`` text,
   6-40 words, 10 messages per write; ``--text agent``: ``_util.conversation``,
   100-600 characters, one turn per write) written with ``index=True`` and no
   worker running, then one worker started; timed from its registration until
   ``flush`` returns. Also the worker's CPU seconds (``/proc``) and
   redis-server's (``INFO cpu``) per message. ``--compare DIR`` runs the same
   with the worker started from another checkout first (e.g. ``/work/main``)
   and prints the ratio: both workers index a backlog written by this
   checkout's client.
c. ``profile`` (not in ``all``): the same backlog indexed in this process
   (``recall.catch_up`` per session) under cProfile; the top functions.

    .venv/bin/python bench/bench_indexing.py                      # a and b, ~3 min
    .venv/bin/python bench/bench_indexing.py --quick              # smoke run
    .venv/bin/python bench/bench_indexing.py --part worker --compare /work/main
    .venv/bin/python bench/bench_indexing.py --part profile --messages 5000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _ranking_v1 as v1
from _locomo import DEFAULT_DATA, load
from _util import conversation, turns

from redismem import Memory
from redismem.recall import index as recall
from redismem.recall import ranking
from redismem.recall import terms as analysis

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "benchindex"
QUEUE = "redismem/bench-indexing"

Log = Callable[[str], None]


# -- (a) the weights ------------------------------------------------------------


@dataclass(frozen=True)
class Msg:
    text: str
    name: str | None
    created: datetime | None


Session = list[Msg]


def agent_sessions(messages: int, per_session: int = 200) -> list[Session]:
    """``_util.conversation`` messages as ``index_pass`` sees them: content
    plus each tool call's name and arguments; dated, no speaker name."""
    out = []
    day = datetime(2026, 3, 1, 9, tzinfo=UTC)
    for s in range(max(1, messages // per_session)):
        msgs = []
        for i, m in enumerate(conversation(s, per_session)):
            parts = [m["content"]]
            parts += [f"{c['name']} {c['arguments']}" for c in m.get("tool_calls", ())]
            msgs.append(Msg(" ".join(parts), None, day + timedelta(days=s, seconds=30 * i)))
        out.append(msgs)
    return out


def zipf_sessions(messages: int, per_session: int = 200) -> list[Session]:
    from bench_recall import Corpus

    corpus = Corpus()
    day = datetime(2026, 3, 1, tzinfo=UTC)
    return [
        [Msg(corpus.text(), None, day) for _ in range(per_session)]
        for _ in range(max(1, messages // per_session))
    ]


def locomo_sessions(data: Path) -> list[Session]:
    out: dict[tuple[str, int], Session] = {}
    for conv in load(data):
        for t in conv.turns:
            created = t.created and t.created.replace(tzinfo=UTC)
            out.setdefault((conv.sample, t.session), []).append(Msg(t.content, t.name, created))
    return list(out.values())


def _batches(sessions: Sequence[Session]) -> Iterator[tuple[list[str], Session]]:
    """``(context texts, messages)`` per index pass."""
    size, turns_ = recall.INDEX_BATCH, ranking.CONTEXT_TURNS
    for session in sessions:
        for lo in range(0, len(session), size):
            yield [m.text for m in session[max(0, lo - turns_) : lo]], session[lo : lo + size]


def run_old(sessions: Sequence[Session]) -> list[dict[str, float]]:
    out = []
    for context, batch in _batches(sessions):
        previous = list(context)
        for m in batch:
            out.append(v1.doc_weights(m.text, m.name, previous, created=m.created))
            previous.append(m.text)
    return out


def run_doc_weights(sessions: Sequence[Session]) -> list[dict[str, float]]:
    out = []
    for context, batch in _batches(sessions):
        previous = list(context)
        for m in batch:
            out.append(ranking.doc_weights(m.text, m.name, previous, created=m.created))
            previous.append(m.text)
    return out


def run_weigher(sessions: Sequence[Session]) -> list[dict[str, float]]:
    out = []
    for context, batch in _batches(sessions):
        weigher = ranking.ContextWeigher(context)
        for m in batch:
            out.append(weigher.weigh(m.text, m.name, m.created))
    return out


WAYS: dict[str, Callable[[Sequence[Session]], list[dict[str, float]]]] = {
    "old": run_old,
    "doc_weights": run_doc_weights,
    "ContextWeigher": run_weigher,
}


def clear_caches() -> None:
    analysis._CHUNK_TERMS.clear()
    analysis.stem.cache_clear()
    ranking._name_terms.cache_clear()
    ranking._date_terms.cache_clear()
    ranking._recent.clear()


def time_ways(sessions: Sequence[Session], rounds: int, cold: bool) -> dict[str, list[float]]:
    """CPU µs per message of each way, per round (the ways interleaved)."""
    count = sum(len(s) for s in sessions)
    out: dict[str, list[float]] = {name: [] for name in WAYS}
    for _ in range(rounds):
        for name, run in WAYS.items():
            if cold:
                clear_caches()
            started = time.process_time()
            run(sessions)
            out[name].append((time.process_time() - started) / count * 1e6)
    return out


def bench_weights(args: argparse.Namespace, log: Log) -> list[str]:
    streams: list[tuple[str, list[Session]]] = [
        ("agent messages (_util.conversation)", agent_sessions(args.messages)),
        ("Zipf text (bench_recall.Corpus)", zipf_sessions(args.messages)),
    ]
    if args.data.is_dir() and any(args.data.glob("*.json")):
        streams.append(("LoCoMo (4 conversations)", locomo_sessions(args.data)))
    else:
        log(f"LoCoMo skipped: no data at {args.data}")
    lines = [
        "(a) index-time weights, CPU us per message (process time: the machine is shared) "
        f"best / median of {args.rounds} rounds; old / new: on the best",
        f"{'stream':40}{'caches':>7}{'messages':>10}{'old':>14}{'doc_weights':>16}"
        f"{'ContextWeigher':>18}{'old/new':>9}",
    ]
    for label, sessions in streams:
        count = sum(len(s) for s in sessions)
        log(f"weights: {label}, {count} messages")
        old = run_old(sessions)
        for name in ("doc_weights", "ContextWeigher"):
            if [list(w.items()) for w in WAYS[name](sessions)] != [list(w.items()) for w in old]:
                raise SystemExit(f"{name} differs from the old weights on {label}")
        for cold in (False, True):
            res = time_ways(sessions, args.rounds, cold)
            best = {k: min(v) for k, v in res.items()}
            cells = "".join(
                f"{f'{best[k]:.1f} / {statistics.median(v):.1f}':>{w}}"
                for (k, v), w in zip(res.items(), (14, 16, 18), strict=True)
            )
            ratio = best["old"] / best["ContextWeigher"]
            caches = "cold" if cold else "warm"
            lines.append(f"{label:40}{caches:>7}{count:>10}{cells}{ratio:>8.1f}x")
    return lines


# -- (b) a worker on a backlog ----------------------------------------------------


def worker_env(url: str, tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(tree),
        REDISMEM_URL=url,
        REDISMEM_NAMESPACE=NAMESPACE,
        REDISMEM_QUEUE_NAME=QUEUE,
        REDISMEM_SUMMARIZER="truncate",
    )
    return env


def backlog(kind: str, messages: int, sessions: int) -> list[list[list[dict[str, Any]]]]:
    """The writes of each session: ``agent``, one turn per write of
    ``_util.conversation`` (100-600 characters, tool calls; ~100 postings per
    message with the context); ``zipf``, ``bench_recall.Corpus`` text (6-40
    words; ~40 postings), user and assistant alternating, 10 per write."""
    per = max(1, messages // sessions)
    if kind == "agent":
        return [turns(conversation(s, per)) for s in range(sessions)]
    from bench_recall import Corpus

    corpus = Corpus()
    out = []
    for _ in range(sessions):
        msgs = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": corpus.text()}
            for i in range(per)
        ]
        out.append([msgs[i : i + 10] for i in range(0, per, 10)])
    return out


async def write_backlog(mem: Memory, args: argparse.Namespace) -> None:
    todo = list(enumerate(backlog(args.text, args.messages, args.sessions)))

    async def writer() -> None:
        while todo:
            s, writes = todo.pop()
            for batch in writes:
                await mem.write(batch, session_id=f"s{s}", user_id=f"u{s % 10}")

    await asyncio.gather(*(writer() for _ in range(16)))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def redis_cpu(mem: Memory) -> float:
    info = await mem.redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@dataclass
class WorkerRun:
    tree: Path
    messages: int
    seconds: float
    worker_cpu: float
    redis_cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


async def worker_run(url: str, tree: Path, args: argparse.Namespace, log: Log) -> WorkerRun:
    mem = await Memory.connect(
        url, namespace=NAMESPACE, queue_name=QUEUE, index=True, summarize_delay=0
    )
    try:
        await mem.clear_all()
        await mem.redis.delete(f"{QUEUE}:workers")
        written = (args.messages // args.sessions) * args.sessions
        started = time.perf_counter()
        await write_backlog(mem, args)
        log(f"worker ({tree}): wrote {written} messages in {time.perf_counter() - started:.1f} s")
        logfile = open(Path(args.logdir) / f"worker-{uuid.uuid4().hex[:6]}.log", "wb")  # noqa: SIM115, ASYNC230
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "arq",
            "workers.WorkerSettings",
            env=worker_env(url, tree),
            cwd=tree,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=logfile,
            stderr=asyncio.subprocess.STDOUT,
        )
        logfile.close()
        try:
            deadline = time.monotonic() + 60
            while not await mem.redis.zcard(f"{QUEUE}:workers"):
                if process.returncode is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the worker did not start; see {args.logdir}")
                await asyncio.sleep(0.02)
            cpu0, rcpu0, t0 = cpu_seconds(process.pid), await redis_cpu(mem), time.perf_counter()
            if not await mem.flush(timeout=args.timeout):
                raise SystemExit(f"flush timed out after {args.timeout} s; see {args.logdir}")
            seconds = time.perf_counter() - t0
            cpu, rcpu = cpu_seconds(process.pid) - cpu0, await redis_cpu(mem) - rcpu0
        finally:
            if process.returncode is None:
                process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 15)
            if process.returncode is None:
                process.kill()
                await process.wait()
        await mem.clear_all()
        return WorkerRun(tree, written, seconds, cpu, rcpu)
    finally:
        await mem.aclose()


def bench_worker(url: str, args: argparse.Namespace, log: Log) -> list[str]:
    trees = [args.compare, ROOT] if args.compare else [ROOT]
    runs: dict[Path, list[WorkerRun]] = {tree: [] for tree in trees}
    for _ in range(args.repeat):
        for tree in trees:
            run = asyncio.run(worker_run(url, tree, args, log))
            log(f"worker ({tree}): {run.rate:,.0f} messages/s")
            runs[tree].append(run)
    lines = [
        f"(b) one worker indexing a backlog of {runs[ROOT][0].messages} messages over "
        f"{args.sessions} sessions ({args.text} messages), "
        f"{args.repeat} run(s) each",
        f"{'worker from':40}{'messages/s':>12}{'seconds':>9}{'worker CPU us/msg':>19}"
        f"{'redis CPU us/msg':>18}",
    ]
    for tree, done in runs.items():
        for run in done:
            lines.append(
                f"{tree!s:40}{run.rate:>12,.0f}{run.seconds:>9.2f}"
                f"{run.worker_cpu / run.messages * 1e6:>19.0f}"
                f"{run.redis_cpu / run.messages * 1e6:>18.0f}"
            )
    best = {tree: max(r.rate for r in done) for tree, done in runs.items()}
    if args.compare:
        lines.append(
            f"ratio (best of each): {best[ROOT] / best[args.compare]:.2f}x "
            f"this checkout over {args.compare}"
        )
    goal = "PASS" if best[ROOT] >= 5000 else "MISS"
    lines.append(f"goal >= 5,000 messages/s per worker: {best[ROOT]:,.0f}  {goal}")
    return lines


# -- (c) profile -------------------------------------------------------------------


async def profile_run(url: str, args: argparse.Namespace, log: Log) -> str:
    mem = await Memory.connect(
        url, namespace=NAMESPACE, queue_name=QUEUE, index=True, summarize_delay=60
    )
    try:
        await mem.clear_all()
        await write_backlog(mem, args)
        log("profile: backlog written; indexing in this process")
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for s in range(args.sessions):
            await recall.catch_up(mem.backend, user_id=f"u{s % 10}", session_id=f"s{s}")
        profiler.disable()
        seconds = time.perf_counter() - started
        await mem.clear_all()
    finally:
        await mem.aclose()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    written = (args.messages // args.sessions) * args.sessions
    return (
        f"(c) profile: {written} messages indexed in this process in {seconds:.2f} s "
        f"({written / seconds:,.0f}/s under cProfile)\n{out.getvalue()}"
    )


# -- main ---------------------------------------------------------------------------


@contextlib.contextmanager
def redis_url(args: argparse.Namespace, log: Log) -> Iterator[str]:
    if args.url:
        yield args.url
        return
    from _util import throwaway_redis

    with throwaway_redis() as url:
        log(f"started throwaway redis-server at {url}")
        yield url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "weights", "worker", "profile"), default="all")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    parser.add_argument("--messages", type=int, default=20_000, help="messages (b, c; a: agent)")
    parser.add_argument("--sessions", type=int, default=100, help="sessions of the backlog")
    parser.add_argument(
        "--text", choices=("zipf", "agent"), default="zipf", help="messages of the backlog (b, c)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of (a)")
    parser.add_argument("--repeat", type=int, default=1, help="worker runs of each tree (b)")
    parser.add_argument(
        "--compare", type=Path, help="also time a worker started from this checkout (b)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="flush timeout (b)")
    parser.add_argument("--top", type=int, default=30, help="functions listed (c)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo folder (a)")
    parser.add_argument(
        "--url",
        default=os.environ.get("REDISMEM_BENCH_URL"),
        help="an existing Redis (namespace benchindex, cleared) instead of a throwaway one",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds = min(args.messages, 4000), min(args.rounds, 2)
    if args.compare:
        args.compare = args.compare.resolve()
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    lines = [f"bench_indexing.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip()]
    if args.part in ("all", "weights"):
        lines += bench_weights(args, log)
    if args.part in ("all", "worker", "profile"):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="bench-indexing-") as logdir:
            args.logdir = logdir
            with redis_url(args, log) as url:
                if args.part in ("all", "worker"):
                    lines += ["", *bench_worker(url, args, log)]
                if args.part == "profile":
                    lines += [asyncio.run(profile_run(url, args, log))]
    print("\n".join(lines))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
