"""``redismem worker`` (run one, or ``--check`` the queue's workers) and
``redismem stats`` (what the workers did, and who is alive)."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

from redismem import env
from redismem.cli.common import (
    CliError,
    add_connection_args,
    add_json,
    add_verbose,
    command_parser,
    connect,
    emit_json,
    memory_url,
    positive,
    queue_name,
    queue_url,
    table,
)
from redismem.cli.units import ago, duration
from redismem.config import WorkerConfig
from redismem.core.queue import QueueStats

__all__ = ["add_commands"]


def add_commands(sub: Any) -> None:
    worker = command_parser(
        sub,
        "worker",
        "run a worker: summarizes sessions, indexes messages for search, extracts memories",
        "Run one worker of the queue until SIGTERM or SIGINT. Workers do the background work "
        "the clients queue: they index new messages for recall (search), fold old messages "
        "into each session's running summary, and, with an extractor set, extract lasting "
        "memories (facts, preferences, goals) about users. Its first log line names the "
        "queue, the namespaces it sweeps, and the summarizer, extractor and embedder in use. "
        "It rides out Redis restarts and failovers; run it under a supervisor all the same.\n\n"
        "With --check it runs nothing: it reports the health of the queue's workers and exits "
        "non-zero when one is stale, none is seen, or the worker NAME was never registered.",
        [
            "redismem worker --url redis://localhost:6379/0",
            "REDISMEM_EXTRACTOR=rules redismem worker --name worker-1 --metrics-port 9100",
            "redismem worker --check worker-1      # exit 0: healthy; 1: stale or unknown",
        ],
        epilog=env.describe(env.WORKER_VARIABLES),
    )
    add_connection_args(worker, namespace=False)
    worker.add_argument(
        "--name",
        help="this worker's name in health checks (default $REDISMEM_WORKER_NAME, else HOST-PID)",
    )
    worker.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="NAME",
        help="report the health of every worker of the queue (or of worker NAME) and exit "
        "non-zero if one is stale, none is seen, or NAME was never registered",
    )
    worker.add_argument(
        "--burst", action="store_true", help="run until the queue is empty, then exit"
    )
    worker.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for Redis at start-up (default 30)",
    )
    worker.add_argument(
        "--metrics-port",
        type=positive(int),
        metavar="PORT",
        help="serve Prometheus metrics at /metrics on PORT, every interface (default "
        "$REDISMEM_METRICS_PORT, else none; needs redismem[server])",
    )
    worker.add_argument("--json", action="store_true", help="with --check: one JSON document")
    add_verbose(worker, "log at DEBUG level")
    worker.set_defaults(run=_worker)

    stats = command_parser(
        sub,
        "stats",
        "what the workers did (jobs, summaries, indexing, memories) and which are alive",
        "Counters of the namespace's background work since it began (jobs run, messages "
        "indexed, summarized and extracted, memories added, failures), what is waiting now, "
        "the summarization lag, and the health of the queue's workers.",
        [
            "redismem stats",
            "redismem stats --namespace demo-1a2b3c --json",
            "REDISMEM_QUEUE_NAME=redismem/queue-demo redismem stats",
        ],
    )
    add_connection_args(stats)
    add_json(stats)
    add_verbose(stats)
    stats.set_defaults(run=lambda a: asyncio.run(_stats(a)))


# -- worker --------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> int:
    from redismem.workers import health, run

    if args.check is not None:
        # Reads only what the probe needs: a worker setting unrelated to
        # health (a summarizer's, say) must not fail the probe.
        url, queue = queue_url(args), queue_name()
        name = args.check or args.name or None
        if args.json:
            found = asyncio.run(health.worker_health(url, queue, name))
            healthy = bool(found) and all(w.healthy for w in found)
            emit_json({"queue": queue, "healthy": healthy, "workers": [_health(w) for w in found]})
            return 0 if healthy else 1
        healthy, lines = asyncio.run(health.check(url, queue, name))
        print("\n".join(lines))
        return 0 if healthy else 1
    if args.json:
        raise CliError("--json goes with --check", "redismem worker --check --json")
    if args.wait < 0:
        raise CliError(f"--wait must be >= 0, got {args.wait:g}", "pass seconds, e.g. --wait 30")
    flags: dict[str, Any] = {"url": memory_url(args), "queue_url": queue_url(args)}
    if args.name:
        flags["name"] = args.name
    config = WorkerConfig.from_env(**flags)
    port = args.metrics_port or env.integer("REDISMEM_METRICS_PORT")
    if port is not None:
        _serve_metrics(port)
    asyncio.run(run.serve(config, burst=args.burst, wait=args.wait))
    return 0


def _health(w: Any) -> dict[str, Any]:
    """A ``WorkerHealth`` as ``--json`` gives it: what it runs is null (and
    ``namespaces`` empty) when unknown."""
    runs = {} if w.runs is None else w.runs.as_json()
    return {
        "name": w.name,
        "healthy": w.healthy,
        "registered": w.seen_ago is not None,
        "seen_ago_s": None if w.seen_ago is None else round(w.seen_ago, 3),
        "record": w.record,
        "namespaces": runs.get("namespaces", []),
        **{kind: runs.get(kind) for kind in _PLUGIN_KINDS},
    }


_PLUGIN_KINDS = ("summarizer", "extractor", "consolidator", "embedder")


def _runs_rows(health: list[Any]) -> list[tuple[str, ...]]:
    """One row per worker: its name, health and what it runs ("?": unknown)."""
    rows: list[tuple[str, ...]] = []
    for w in health:
        state = "healthy" if w.healthy else "STALE"
        if w.runs is None:
            rows.append((w.name, state, "?", "?", "?", "?", "?"))
            continue
        ran = w.runs
        plugins = (ran.summarizer, ran.extractor, ran.consolidator, ran.embedder)
        rows.append((w.name, state, ",".join(ran.namespaces), *plugins))
    return rows


def _serve_metrics(port: int) -> None:
    from redismem import metrics

    if port > 65535:
        raise CliError(f"no such port: {port}", "pass a port in 1-65535")
    try:
        metrics.serve_http(port)
    except OSError as exc:
        raise CliError(
            f"cannot serve metrics on port {port}: {exc.strerror or exc}",
            "pass a free port with --metrics-port",
        ) from exc


# -- stats -----------------------------------------------------------------------

_COUNTERS = (
    ("jobs", "session jobs run (index, extract, summarize)"),
    ("messages_indexed", "messages indexed for recall"),
    ("messages_extracted", "messages extracted for memories"),
    ("memories_added", "memories added (or merged)"),
    ("summaries", "summaries committed"),
    ("messages_summarized", "messages summarized"),
    ("stale_commits", "stale commits (lost CAS)"),
    ("swept", "re-enqueued by sweep"),
    ("failures", "jobs given up (failed)"),
)


async def _stats(args: argparse.Namespace) -> int:
    from redismem.core.queue import arq_pool
    from redismem.workers.health import worker_health

    url, queue = queue_url(args), queue_name()
    async with await connect(args) as memory:
        pool = arq_pool(url)
        try:
            snapshot = await QueueStats(pool, memory.layout, url).snapshot()
            queued = await pool.zcard(queue)
        finally:
            await pool.aclose()
        pending = 0
        async for key in memory.redis.scan_iter(match=memory.layout.pending_pattern(), count=1000):
            if memory.layout.parse_pending(key) is not None:
                pending += await memory.redis.zcard(key)
    health = await worker_health(url, queue)
    counters = snapshot["counters"]
    lags = snapshot["lag_ms"]

    def pct(q: float) -> int | None:
        return int(lags[min(len(lags) - 1, int(q * len(lags)))]) if lags else None

    namespace = memory.layout.namespace
    if args.json:
        emit_json(
            {
                "namespace": namespace,
                "queue": queue,
                "counters": {key: int(counters.get(key, 0)) for key, _ in _COUNTERS},
                "sessions_pending": pending,
                "jobs_queued": queued,
                "summarization_lag_ms": {"p50": pct(0.5), "p95": pct(0.95)},
                "workers": [_health(w) for w in health],
                "recent_failures": snapshot["failures"],
            }
        )
        return 0
    stale = [h.name for h in health if not h.healthy]
    if not health:
        workers = "no worker seen (start one: redismem worker)"
    else:
        workers = f"{len(health) - len(stale)} of {len(health)} healthy"
        workers += f" (stale: {', '.join(stale)})" if stale else ""

    def lag(q: float) -> str:
        value = pct(q)
        return "-" if value is None else duration(value / 1000)

    print(f"namespace {namespace}  queue {queue}")
    rows: list[tuple[str, Any]] = [(label, counters.get(key, 0)) for key, label in _COUNTERS]
    rows += [
        ("sessions pending now", pending),
        ("jobs queued now", queued),
        ("summarization lag p50 / p95", f"{lag(0.5)} / {lag(0.95)}"),
        ("workers", workers),
    ]
    print(table(rows, ["metric", "value"]))
    if health:
        print("\nworkers")
        headers = ["name", "health", "namespaces", *_PLUGIN_KINDS]
        print(table(_runs_rows(health), headers))
    if snapshot["failures"]:
        print("\nrecent failures")
        failure_rows = [
            (
                ago(datetime.fromtimestamp(f["at"] / 1000, UTC)),
                f["user"],
                f["session"],
                f["tries"],
                str(f["error"])[:80],
            )
            for f in snapshot["failures"]
        ]
        print(table(failure_rows, ["when", "user", "session", "tries", "error"]))
    return 0
