"""The ``redismem`` command: demo, worker, stats, sessions, inspect, export, import.

Thin by design: each subcommand parses arguments and calls the library.
Logging is configured here, never in the library. Errors end the command with
one line, ``redismem: <what> (hint: <what to do>)``, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import redis.exceptions as rexc

from redismem import env
from redismem.client import Memory
from redismem.config import WorkerConfig, check_url
from redismem.core.guard import current_epoch
from redismem.core.queue import DEFAULT_QUEUE_NAME, QueueStats
from redismem.errors import (
    BackendError,
    BackendUnavailable,
    InvalidInput,
    MissingDependency,
    RedisMemError,
)
from redismem.models import Message
from redismem.server.commands import add_commands as add_server_commands

__all__ = ["main"]


class CliError(Exception):
    """A usage problem the user can fix; ``hint`` says how."""

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(what)
        self.hint = hint


# -- output helpers --------------------------------------------------------


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


def _until(moment: datetime | None) -> str:
    if moment is None:
        return "never"
    seconds = (moment - datetime.now(UTC)).total_seconds()
    return f"in {seconds:.0f}s" if seconds < 120 else f"in {seconds / 60:.0f}min"


def _preview(message: Message) -> str:
    text = message.content
    if message.tool_calls:
        text = f"{text} [calls {', '.join(c.name for c in message.tool_calls)}]".strip()
    text = " ".join(text.split())
    return text if len(text) <= 70 else text[:69] + "…"


# -- configuration ---------------------------------------------------------


def _memory_url(args: argparse.Namespace) -> str:
    url = str(args.url or env.text("REDISMEM_URL") or "")
    source = "--url" if args.url else "REDISMEM_URL"
    if not url:
        raise CliError(
            "no Redis URL given",
            "set REDISMEM_URL or pass --url redis://HOST:6379/0",
        )
    return _check_url(url, source)


def _queue_url(args: argparse.Namespace) -> str:
    url = str(getattr(args, "queue_url", None) or env.text("REDISMEM_QUEUE_URL") or "")
    if not url:
        return _memory_url(args)
    source = "--queue-url" if getattr(args, "queue_url", None) else "REDISMEM_QUEUE_URL"
    return _check_url(url, source)


def _check_url(url: str, source: str) -> str:
    try:
        return check_url(url, source)
    except InvalidInput as exc:
        hint = f"point {source} at a Redis server, e.g. redis://HOST:6379/0"
        raise CliError(str(exc), hint) from None


def _queue_name() -> str:
    return env.text("REDISMEM_QUEUE_NAME") or DEFAULT_QUEUE_NAME


async def _connect(args: argparse.Namespace, **options: Any) -> Memory:
    """A ``Memory`` on the command's URL and queue URL; its namespace is
    ``--namespace``, else ``REDISMEM_NAMESPACE`` (read by ``Memory.connect``)."""
    if args.namespace:
        options["namespace"] = args.namespace
    if getattr(args, "queue_url", None):
        options["queue_url"] = _queue_url(args)
    return await Memory.connect(_memory_url(args), **options)


def _version() -> str:
    try:
        return version("redismem")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled checkout
        return "unknown"


# -- commands --------------------------------------------------------------


async def _stats(args: argparse.Namespace) -> int:
    from redismem.core.queue import arq_pool
    from redismem.workers.health import worker_health

    queue_url = _queue_url(args)
    queue_name = _queue_name()
    async with await _connect(args) as memory:
        pool = arq_pool(queue_url)
        try:
            snapshot = await QueueStats(pool, memory.layout, queue_url).snapshot()
            queued = await pool.zcard(queue_name)
        finally:
            await pool.aclose()
        pending = 0
        async for key in memory.redis.scan_iter(match=memory.layout.pending_pattern(), count=1000):
            if memory.layout.parse_pending(key) is not None:
                pending += await memory.redis.zcard(key)
    health = await worker_health(queue_url, queue_name)
    counters = snapshot["counters"]
    lags = snapshot["lag_ms"]

    def pct(q: float) -> str:
        return f"{lags[min(len(lags) - 1, int(q * len(lags)))]} ms" if lags else "-"

    stale = [h.name for h in health if not h.healthy]
    if not health:
        workers = "no worker seen"
    else:
        workers = f"{len(health) - len(stale)} of {len(health)} healthy"
        workers += f" (stale: {', '.join(stale)})" if stale else ""
    print(f"namespace {memory.layout.namespace}  queue {queue_name}")
    rows = [
        ("session jobs run (index, extract, summarize)", counters.get("jobs", 0)),
        ("messages indexed for recall", counters.get("messages_indexed", 0)),
        ("messages extracted for memories", counters.get("messages_extracted", 0)),
        ("memories added (or merged)", counters.get("memories_added", 0)),
        ("summaries committed", counters.get("summaries", 0)),
        ("messages summarized", counters.get("messages_summarized", 0)),
        ("stale commits (lost CAS)", counters.get("stale_commits", 0)),
        ("re-enqueued by sweep", counters.get("swept", 0)),
        ("jobs given up (failed)", counters.get("failures", 0)),
        ("sessions pending now", pending),
        ("jobs queued now", queued),
        ("summarization lag p50 / p95", f"{pct(0.5)} / {pct(0.95)}"),
        ("workers", workers),
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


async def _sessions(args: argparse.Namespace) -> int:
    async with await _connect(args, refresh_ttl_on_read=False) as memory:
        sessions = await memory.sessions(user_id=args.user)
    if not sessions:
        namespace = memory.layout.namespace
        print(f"no live sessions for user {args.user!r} in namespace {namespace!r}")
        return 0
    rows = [
        (
            s.session_id,
            s.message_count,
            s.token_count,
            ", ".join(f"{k}={v}" for k, v in s.tags.items()) or "-",
            _ago(s.accessed_at),
            _until(s.expires_at),
        )
        for s in sessions
    ]
    print(_table(rows, ["session", "messages", "tokens", "tags", "last access", "expires"]))
    print(f"\nredismem inspect SESSION --user {args.user} shows one of them")
    return 0


async def _memories(args: argparse.Namespace) -> int:
    async with await _connect(args, refresh_ttl_on_read=False) as memory:
        if args.history:
            changes = await memory.memories.history(args.history, user_id=args.user)
            if not changes:
                print(
                    f"no memory {args.history!r} for user {args.user!r} "
                    f"(redismem memories --user {args.user} lists them)"
                )
                return 1
            changed: list[tuple[Any, ...]] = [
                (
                    c.version,
                    c.at.isoformat(timespec="seconds"),
                    c.change,
                    c.record.status if c.record else "-",
                    _clip(c.record.text if c.record else "", 60),
                    _clip(c.reason, 40) or "-",
                )
                for c in changes
            ]
            print(_table(changed, ["version", "at", "change", "status", "text", "reason"]))
            return 0
        hits = await memory.memories.search(
            args.query, user_id=args.user, status=args.status, limit=args.limit
        )
    if not hits:
        print(f"no {args.status} memories for user {args.user!r} in this namespace")
        return 0
    rows = [
        (
            h.record.id,
            h.record.kind,
            h.record.status,
            _clip(h.record.text, 60),
            len(h.record.sources),
            _ago(h.record.updated_at) if h.record.updated_at else "-",
        )
        for h in hits
    ]
    print(_table(rows, ["id", "kind", "status", "text", "sources", "updated"]))
    print(f"\nredismem memories --user {args.user} --history ID shows how one changed")
    return 0


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


async def _inspect(args: argparse.Namespace) -> int:
    async with await _connect(args, refresh_ttl_on_read=False) as memory:
        found = [
            s for s in await memory.sessions(user_id=args.user) if s.session_id == args.session
        ]
        if not found:
            print(
                f"no live session {args.session!r} for user {args.user!r} "
                f"(redismem sessions --user {args.user} lists them)"
            )
            return 1
        info = found[0]
        epoch = await current_epoch(memory.backend, args.user)
        keys = memory.layout.session(args.user, args.session, epoch)
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


def _export(args: argparse.Namespace) -> int:
    from redismem.portability import export_user

    async def export() -> dict[str, Any]:
        async with await _connect(args, refresh_ttl_on_read=False) as memory:
            return await export_user(memory, args.user)

    document = asyncio.run(export())
    text = json.dumps(document, ensure_ascii=False) + "\n"
    if args.out in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        counts = {k: len(document[k]) for k in ("sessions", "memories", "store")}
        print(f"user {args.user!r}: {counts} written to {args.out}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    from redismem.portability import ImportReport, import_user

    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except ValueError as exc:
        hint = "pass a file made by redismem export"
        raise CliError(f"{args.file} is not JSON: {exc}", hint) from None

    async def load() -> ImportReport:
        async with await _connect(args) as memory:
            return await import_user(memory, document, user_id=args.user)

    report = asyncio.run(load())
    print(report.model_dump_json(indent=2))
    return 1 if report.conflicts else 0


def _worker(args: argparse.Namespace) -> int:
    from redismem.workers import health, run

    if args.check is not None:
        # Reads only what the probe needs: a worker setting unrelated to
        # health (a summarizer's, say) must not fail the probe.
        healthy, lines = asyncio.run(
            health.check(_queue_url(args), _queue_name(), args.check or args.name or None)
        )
        print("\n".join(lines))
        return 0 if healthy else 1
    if args.wait < 0:
        raise CliError(f"--wait must be >= 0, got {args.wait:g}", "pass seconds, e.g. --wait 30")
    flags: dict[str, Any] = {"url": _memory_url(args), "queue_url": _queue_url(args)}
    if args.name:
        flags["name"] = args.name
    config = WorkerConfig.from_env(**flags)
    port = args.metrics_port or env.integer("REDISMEM_METRICS_PORT")
    if port is not None:
        _serve_metrics(port)
    asyncio.run(run.serve(config, burst=args.burst, wait=args.wait))
    return 0


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


def _demo(args: argparse.Namespace) -> int:
    from redismem.demo import DemoOptions, run_demo

    options = DemoOptions(
        url=args.url,
        queue_url=args.queue_url,
        agents=args.agents,
        workers=args.workers,
        sessions=args.sessions,
        duration=args.duration,
        seed=args.seed,
        keep=args.keep,
        summarizer=args.summarizer,
    )
    return asyncio.run(run_demo(options))


# -- parsing ---------------------------------------------------------------


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _add_connection_args(cmd: argparse.ArgumentParser, namespace: bool = True) -> None:
    cmd.add_argument("--url", help="memory Redis URL (default $REDISMEM_URL)")
    cmd.add_argument(
        "--queue-url", help="queue Redis URL (default $REDISMEM_QUEUE_URL, else the memory URL)"
    )
    if namespace:
        cmd.add_argument("--namespace", help="namespace (default $REDISMEM_NAMESPACE or redismem)")


def _add_verbose(cmd: argparse.ArgumentParser, helptext: str) -> None:
    cmd.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=helptext
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="redismem", description="shared memory for fleets of LLM agents"
    )
    parser.add_argument("--version", action="version", version=f"redismem {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", help="run a fleet of agents and workers on shared memory, then report"
    )
    demo.add_argument(
        "--url", help="Redis URL (default: $REDISMEM_URL, else a throwaway redis-server)"
    )
    demo.add_argument(
        "--queue-url",
        help="work queue Redis URL (default: $REDISMEM_QUEUE_URL, else the memory URL; "
        "required when --url is a cluster)",
    )
    demo.add_argument("--agents", type=_positive(int), default=4, help="agent processes (4)")
    demo.add_argument("--workers", type=_positive(int), default=2, help="worker processes (2)")
    demo.add_argument("--sessions", type=_positive(int), default=6, help="shared sessions (6)")
    demo.add_argument(
        "--duration", type=_positive(float), default=20.0, help="seconds of agent traffic (20)"
    )
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--summarizer", default="keypoints", choices=["keypoints", "truncate", "llm"])
    demo.add_argument("--keep", action="store_true", help="keep the demo's data afterwards")
    _add_verbose(demo, "log at INFO level")
    demo.set_defaults(run=_demo)

    worker = sub.add_parser(
        "worker",
        help="run a summarization worker (arq), configured from the environment",
        description="Run a summarization worker until SIGTERM or SIGINT. It rides out Redis "
        "restarts and failovers; run it under a supervisor all the same.",
        epilog=env.describe(env.WORKER_VARIABLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_connection_args(worker, namespace=False)
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
        "non-zero if one is stale or none is seen",
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
        type=_positive(int),
        metavar="PORT",
        help="serve Prometheus metrics at /metrics on PORT, every interface (default "
        "$REDISMEM_METRICS_PORT, else none; needs redismem[server])",
    )
    _add_verbose(worker, "log at DEBUG level")
    worker.set_defaults(run=_worker)

    stats = sub.add_parser("stats", help="queue, summarization and worker statistics")
    _add_connection_args(stats)
    _add_verbose(stats, "log at INFO level")
    stats.set_defaults(run=lambda a: asyncio.run(_stats(a)))

    sessions = sub.add_parser("sessions", help="a user's live sessions")
    _add_connection_args(sessions)
    sessions.add_argument("--user", default="default", help="user id (default 'default')")
    _add_verbose(sessions, "log at INFO level")
    sessions.set_defaults(run=lambda a: asyncio.run(_sessions(a)))

    memories = sub.add_parser("memories", help="a user's long-term memories (facts, goals...)")
    _add_connection_args(memories)
    memories.add_argument("query", nargs="?", help="keyword query (default: newest first)")
    memories.add_argument("--user", default="default", help="user id (default 'default')")
    memories.add_argument(
        "--status",
        choices=("active", "superseded", "deleted", "any"),
        default="active",
        help="which records (default active)",
    )
    memories.add_argument("--limit", type=_positive(int), default=20, help="records to show")
    memories.add_argument("--history", metavar="ID", help="every state of one record")
    _add_verbose(memories, "log at INFO level")
    memories.set_defaults(run=lambda a: asyncio.run(_memories(a)))

    inspect = sub.add_parser("inspect", help="one session in detail")
    _add_connection_args(inspect)
    inspect.add_argument("session")
    inspect.add_argument("--user", default="default", help="user id (default 'default')")
    inspect.add_argument("--last", type=_positive(int), default=10, help="messages to show")
    _add_verbose(inspect, "log at INFO level")
    inspect.set_defaults(run=lambda a: asyncio.run(_inspect(a)))

    export = sub.add_parser("export", help="everything of one user as one JSON document")
    _add_connection_args(export)
    export.add_argument("--user", required=True, help="user id")
    export.add_argument("--out", metavar="FILE", help="write it to FILE (default: stdout)")
    _add_verbose(export, "log at INFO level")
    export.set_defaults(run=_export)

    load = sub.add_parser(
        "import",
        help="write a document redismem export made (again: nothing twice); "
        "exit code 1 when some item was left as it was (conflicts)",
    )
    _add_connection_args(load)
    load.add_argument("file", metavar="FILE", help="the document ('-': stdin)")
    load.add_argument("--user", help="into this user id (default: the document's)")
    _add_verbose(load, "log at INFO level")
    load.set_defaults(run=_import)
    add_server_commands(sub)
    return parser


# -- errors ----------------------------------------------------------------


def _hint(exc: BaseException, command: str) -> str:
    if isinstance(exc, CliError):
        return exc.hint
    if isinstance(exc, BackendError) and isinstance(
        exc.__cause__, rexc.AuthenticationError | rexc.AuthorizationError
    ):
        return "check the user name and password in the URL: redis://USER:PASSWORD@HOST:6379/0"
    if isinstance(exc, BackendUnavailable | rexc.ConnectionError | rexc.TimeoutError):
        return "is Redis running and reachable there? check --url / REDISMEM_URL"
    if isinstance(exc, InvalidInput):
        return f"see redismem {command} --help"
    if isinstance(exc, MissingDependency):
        return "install the package the message names"
    if isinstance(exc, ImportError):
        return (
            "is a local module shadowing redismem's? run the redismem console script, "
            "or from another directory"
        )
    if isinstance(exc, OSError):
        return "check the file, path or permission named above"
    return "run again with -v for more detail"


def _one_line(exc: BaseException, command: str) -> str:
    what = " ".join(str(exc).split()) or type(exc).__name__
    return f"redismem: {what} (hint: {_hint(exc, command)})"


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "worker" and args.check is None:
        level = logging.DEBUG if args.verbose else logging.INFO
    else:
        level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code = args.run(args)
    except (CliError, InvalidInput) as exc:
        print(_one_line(exc, args.command), file=sys.stderr)
        code = 2
    except (RedisMemError, rexc.RedisError, OSError, ImportError) as exc:
        print(_one_line(exc, args.command), file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
