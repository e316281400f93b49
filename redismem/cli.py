"""The ``redismem`` command: demo, worker, stats, inspect.

Thin by design: each subcommand parses arguments and calls the library.
Logging is configured here, never in the library.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .client import Memory
from .config import EMBEDDED_URL
from .errors import RedisMemError
from .models import Message
from .queue import QueueStats

__all__ = ["main"]


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _ago(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    seconds = (datetime.now(UTC) - moment).total_seconds()
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}min ago"


def _preview(message: Message) -> str:
    text = message.content
    if message.tool_calls:
        text = f"{text} [calls {', '.join(c.name for c in message.tool_calls)}]".strip()
    text = " ".join(text.split())
    return text if len(text) <= 70 else text[:69] + "…"


def _url(args: argparse.Namespace) -> str:
    return str(args.url or os.environ.get("REDISMEM_URL") or EMBEDDED_URL)


def _namespace(args: argparse.Namespace) -> str:
    return str(args.namespace or os.environ.get("REDISMEM_NAMESPACE") or "redismem")


async def _stats(args: argparse.Namespace) -> int:
    from .queue import arq_pool

    queue_url = os.environ.get("REDISMEM_QUEUE_URL") or _url(args)
    queue_name = os.environ.get("REDISMEM_QUEUE_NAME") or "redismem:queue"
    async with await Memory.connect(_url(args), namespace=_namespace(args)) as memory:
        pool = arq_pool(queue_url)
        try:
            snapshot = await QueueStats(pool, memory.layout).snapshot()
            queued = await pool.zcard(queue_name)
            health = await pool.get(queue_name + ":health-check")
        finally:
            await pool.aclose()
        pending = 0
        async for key in memory.redis.scan_iter(match=memory.layout.pending_pattern(), count=1000):
            pending += await memory.redis.zcard(key)
    counters = snapshot["counters"]
    lags = snapshot["lag_ms"]

    def pct(q: float) -> str:
        return f"{lags[min(len(lags) - 1, int(q * len(lags)))]} ms" if lags else "-"

    print(f"namespace {memory.layout.namespace}  queue {queue_name}")
    rows = [
        ("summarization jobs run", counters.get("jobs", 0)),
        ("summaries committed", counters.get("summaries", 0)),
        ("messages summarized", counters.get("messages_summarized", 0)),
        ("stale commits (lost CAS)", counters.get("stale_commits", 0)),
        ("re-enqueued by sweep", counters.get("swept", 0)),
        ("failed after retries", counters.get("failures", 0)),
        ("sessions pending now", pending),
        ("jobs queued now", queued),
        ("summarization lag p50 / p95", f"{pct(0.5)} / {pct(0.95)}"),
        ("worker health", health.decode() if health else "no healthy worker seen"),
    ]
    print(_table(rows, ["metric", "value"]))
    if snapshot["failures"]:
        print("\nrecent failures")
        failure_rows = [
            (
                datetime.fromtimestamp(f["at"] / 1000, UTC).isoformat(timespec="seconds"),
                f["user"],
                f["session"],
                f["tries"],
                str(f["error"])[:80],
            )
            for f in snapshot["failures"]
        ]
        print(_table(failure_rows, ["when", "user", "session", "tries", "error"]))
    return 0


async def _inspect(args: argparse.Namespace) -> int:
    async with await Memory.connect(
        _url(args), namespace=_namespace(args), refresh_ttl_on_read=False
    ) as memory:
        found = [
            s for s in await memory.sessions(user_id=args.user) if s.session_id == args.session
        ]
        if not found:
            print(f"no live session {args.session!r} for user {args.user!r}")
            return 1
        info = found[0]
        keys = memory.layout.session(args.user, args.session)
        ttl_ms = await memory.redis.pttl(keys.meta)
        pending = await memory.redis.zscore(keys.pending, args.session)
        summary = await memory.summary(session_id=args.session, user_id=args.user)
        messages = await memory.read(session_id=args.session, user_id=args.user, limit=args.last)
    rows = [
        ("user / session", f"{info.user_id} / {info.session_id}"),
        ("created", f"{info.created_at.isoformat(timespec='seconds')} ({_ago(info.created_at)})"),
        ("last access", _ago(info.accessed_at)),
        ("messages stored", info.message_count),
        ("tokens stored", info.token_count),
        ("ttl", "none" if ttl_ms < 0 else f"{ttl_ms / 1000:.0f} s"),
        ("tags", ", ".join(f"{k}={v}" for k, v in info.tags.items()) or "-"),
        ("pending summarization", "yes" if pending is not None else "no"),
        (
            "summary covers",
            f"{summary.message_count} messages (until {summary.summarized_until})"
            if summary
            else "-",
        ),
    ]
    print(_table(rows, ["field", "value"]))
    if summary:
        print(f"\nsummary (updated {_ago(summary.updated_at)}):\n{summary.text}")
    print(f"\nlast {len(messages)} messages")
    print(
        _table(
            [(m.id, m.role, _preview(m)) for m in messages],
            ["id", "role", "content"],
        )
    )
    return 0


def _worker(args: argparse.Namespace) -> int:
    from arq.worker import check_health, run_worker

    from workers import WorkerSettings

    if args.check:
        return check_health(WorkerSettings)  # type: ignore[arg-type]
    run_worker(WorkerSettings)  # type: ignore[arg-type]
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import DemoOptions, run_demo

    options = DemoOptions(
        url=args.url,
        agents=args.agents,
        workers=args.workers,
        sessions=args.sessions,
        duration=args.duration,
        seed=args.seed,
        keep=args.keep,
        summarizer=args.summarizer,
    )
    return asyncio.run(run_demo(options))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="redismem", description="shared memory for fleets of LLM agents"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", help="run a fleet of agents and workers on shared memory, then report"
    )
    demo.add_argument(
        "--url", help="Redis URL (default: $REDISMEM_URL, else a throwaway redis-server)"
    )
    demo.add_argument("--agents", type=int, default=4, help="agent processes (default 4)")
    demo.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    demo.add_argument("--sessions", type=int, default=6, help="shared sessions (default 6)")
    demo.add_argument(
        "--duration", type=float, default=20.0, help="seconds of agent traffic (default 20)"
    )
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--summarizer", default="keypoints", choices=["keypoints", "truncate", "llm"])
    demo.add_argument("--keep", action="store_true", help="keep the demo's data afterwards")
    demo.set_defaults(run=_demo)

    worker = sub.add_parser("worker", help="run a summarization worker (arq), configured from env")
    worker.add_argument(
        "--check", action="store_true", help="exit non-zero unless a healthy worker is seen"
    )
    worker.set_defaults(run=_worker)

    for name, helptext in (
        ("stats", "queue and summarization statistics"),
        ("inspect", "one session in detail"),
    ):
        cmd = sub.add_parser(name, help=helptext)
        cmd.add_argument("--url", help="memory Redis URL (default $REDISMEM_URL)")
        cmd.add_argument("--namespace", help="namespace (default $REDISMEM_NAMESPACE or redismem)")
        if name == "inspect":
            cmd.add_argument("session")
            cmd.add_argument("--user", default="default")
            cmd.add_argument("--last", type=int, default=10, help="messages to show")
            cmd.set_defaults(run=lambda a: asyncio.run(_inspect(a)))
        else:
            cmd.set_defaults(run=lambda a: asyncio.run(_stats(a)))
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "worker" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code = args.run(args)
    except RedisMemError as exc:
        print(f"redismem: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
