"""What every ``redismem`` subcommand shares: URLs and the connection,
tables and JSON output, argument helpers, and the one-line errors."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import redis.exceptions as rexc

from redismem import env
from redismem.client import Memory
from redismem.config import check_url
from redismem.core.queue import DEFAULT_QUEUE_NAME
from redismem.errors import BackendError, BackendUnavailable, InvalidInput, MissingDependency
from redismem.models import Message

__all__ = [
    "CliError",
    "add_connection_args",
    "add_json",
    "add_verbose",
    "clip",
    "command_parser",
    "connect",
    "emit_json",
    "iso",
    "memory_url",
    "one_line",
    "positive",
    "preview",
    "queue_name",
    "queue_url",
    "table",
    "tool_version",
]


class CliError(Exception):
    """A usage problem the user can fix; ``hint`` says how."""

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(what)
        self.hint = hint


# -- output ------------------------------------------------------------------


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit_json(document: Any) -> None:
    """One JSON document on stdout (``--json``): stable keys, times in ISO
    8601 UTC, durations in seconds, sizes in bytes."""
    sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2, default=str) + "\n")


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat(timespec="milliseconds")


def clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def preview(message: Message, width: int = 70) -> str:
    text = message.content
    if message.tool_calls:
        text = f"{text} [calls {', '.join(c.name for c in message.tool_calls)}]".strip()
    return clip(text, width)


# -- configuration -------------------------------------------------------------


def memory_url(args: argparse.Namespace) -> str:
    url = str(args.url or env.text("REDISMEM_URL") or "")
    source = "--url" if args.url else "REDISMEM_URL"
    if not url:
        raise CliError(
            "no Redis URL given",
            "set REDISMEM_URL or pass --url redis://HOST:6379/0",
        )
    return _check_url(url, source)


def queue_url(args: argparse.Namespace) -> str:
    url = str(getattr(args, "queue_url", None) or env.text("REDISMEM_QUEUE_URL") or "")
    if not url:
        return memory_url(args)
    source = "--queue-url" if getattr(args, "queue_url", None) else "REDISMEM_QUEUE_URL"
    return _check_url(url, source)


def _check_url(url: str, source: str) -> str:
    try:
        return check_url(url, source)
    except InvalidInput as exc:
        hint = f"point {source} at a Redis server, e.g. redis://HOST:6379/0"
        raise CliError(str(exc), hint) from None


def queue_name() -> str:
    return env.text("REDISMEM_QUEUE_NAME") or DEFAULT_QUEUE_NAME


async def connect(args: argparse.Namespace, **options: Any) -> Memory:
    """A ``Memory`` on the command's URL and queue URL; its namespace is
    ``--namespace``, else ``REDISMEM_NAMESPACE`` (read by ``Memory.connect``)."""
    if getattr(args, "namespace", None):
        options["namespace"] = args.namespace
    if getattr(args, "queue_url", None):
        options["queue_url"] = queue_url(args)
    return await Memory.connect(memory_url(args), **options)


def tool_version() -> str:
    try:
        return version("redismem")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled checkout
        return "unknown"


# -- parsing -------------------------------------------------------------------


def command_parser(
    sub: Any, name: str, summary: str, description: str, examples: Sequence[str], epilog: str = ""
) -> argparse.ArgumentParser:
    """A subcommand with a one-line ``summary`` (in ``redismem --help``), a
    ``description`` and an epilog of ``examples`` (then ``epilog``)."""
    text = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    wrapped = "\n\n".join(textwrap.fill(part, 79) for part in description.split("\n\n"))
    return sub.add_parser(  # type: ignore[no-any-return]
        name,
        help=summary,
        description=wrapped,
        epilog=f"{text}\n\n{epilog}" if epilog else text,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
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


def add_connection_args(cmd: argparse.ArgumentParser, namespace: bool = True) -> None:
    cmd.add_argument("--url", help="memory Redis URL (default $REDISMEM_URL)")
    cmd.add_argument(
        "--queue-url", help="queue Redis URL (default $REDISMEM_QUEUE_URL, else the memory URL)"
    )
    if namespace:
        cmd.add_argument("--namespace", help="namespace (default $REDISMEM_NAMESPACE or redismem)")


def add_verbose(cmd: argparse.ArgumentParser, helptext: str = "log at INFO level") -> None:
    cmd.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=helptext
    )


def add_json(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (stable keys; times ISO 8601, durations in seconds)",
    )


# -- errors --------------------------------------------------------------------


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


def one_line(exc: BaseException, command: str) -> str:
    """``redismem: <what> (hint: <what to do>)``: how every error ends a command."""
    what = " ".join(str(exc).split()) or type(exc).__name__
    return f"redismem: {what} (hint: {_hint(exc, command)})"
