"""``redismem export`` and ``redismem import``: everything of one user as
one JSON document, and back."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redismem.cli.common import (
    CliError,
    add_connection_args,
    add_verbose,
    command_parser,
    connect,
)

if TYPE_CHECKING:
    from redismem.portability import ImportReport

__all__ = ["add_commands"]


def add_commands(sub: Any) -> None:
    export = command_parser(
        sub,
        "export",
        "everything of one user as one JSON document",
        "Write one user's sessions (messages, summaries, tags), memories and store items as "
        "one JSON document, for a backup, a move to another Redis, or a data request.",
        [
            "redismem export --user alice > alice.json",
            "redismem export --user alice --out alice.json --namespace prod",
        ],
    )
    add_connection_args(export)
    export.add_argument("--user", required=True, help="user id")
    export.add_argument("--out", metavar="FILE", help="write it to FILE (default: stdout)")
    add_verbose(export)
    export.set_defaults(run=_export)

    load = command_parser(
        sub,
        "import",
        "write a document redismem export made (again: nothing twice); "
        "exit code 1 when some item was left as it was (conflicts)",
        "Write a document made by redismem export into this namespace. Importing the same "
        "document again writes nothing twice. Prints a JSON report; exit code 1 when some "
        "item was left as it was (a conflict).",
        [
            "redismem import alice.json",
            "redismem export --user alice --url redis://old:6379/0 | "
            "redismem import - --url redis://new:6379/0",
            "redismem import alice.json --user alice-copy",
        ],
    )
    add_connection_args(load)
    load.add_argument("file", metavar="FILE", help="the document ('-': stdin)")
    load.add_argument("--user", help="into this user id (default: the document's)")
    add_verbose(load)
    load.set_defaults(run=_import)


def _export(args: argparse.Namespace) -> int:
    from redismem.portability import export_user

    async def export() -> dict[str, Any]:
        async with await connect(args, refresh_ttl_on_read=False) as memory:
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
    from redismem.portability import import_user

    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except ValueError as exc:
        hint = "pass a file made by redismem export"
        raise CliError(f"{args.file} is not JSON: {exc}", hint) from None

    async def load() -> ImportReport:
        async with await connect(args) as memory:
            return await import_user(memory, document, user_id=args.user)

    report = asyncio.run(load())
    print(report.model_dump_json(indent=2))
    return 1 if report.conflicts else 0
