"""The ``redismem`` command: browse memory (namespaces, users, search,
sessions, inspect, memories), run and check workers (worker, stats), move
users (export, import), the demo, and the server's commands.

Thin by design: each subcommand parses arguments and calls the library; one
module per group of commands, each adding its own (``add_commands``).
Logging is configured here, never in the library. Errors end the command with
one line, ``redismem: <what> (hint: <what to do>)``, never a traceback; a
mistyped command gets a suggestion (``did you mean 'search'?``).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Sequence

import redis.exceptions as rexc

from redismem.cli import browse, local, sessions, transfer, worker
from redismem.cli.common import CliError, one_line, tool_version
from redismem.cli.demo import add_demo
from redismem.errors import InvalidInput, RedisMemError
from redismem.server.commands import add_commands as add_server_commands

__all__ = ["build_parser", "main"]

_EXAMPLES = """\
start here:
  redismem demo --keep                      agents and workers on shared memory, then a report
  redismem namespaces                       where the users are
  redismem users --namespace NS             who is in one, most recently active first
  redismem search "tea" --user alice        what a user's agents said about something
  redismem sessions --user alice            a user's sessions; inspect SESSION shows one
  redismem browse --user alice              all of it in the terminal (the 'browse' extra)
  redismem worker                           run a worker (index, summarize, extract)

every read command takes --json; the URL comes from --url or $REDISMEM_URL.
redismem COMMAND --help shows a command's options and examples.
"""


def _build() -> tuple[argparse.ArgumentParser, tuple[str, ...]]:
    parser = argparse.ArgumentParser(
        prog="redismem",
        description="Shared, durable memory for fleets of LLM agents, on plain Redis.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"redismem {tool_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_demo(sub)
    browse.add_commands(sub)
    sessions.add_commands(sub)
    worker.add_commands(sub)
    transfer.add_commands(sub)
    local.add_commands(sub)
    add_server_commands(sub)
    return parser, tuple(sub.choices)


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _unknown_command(argv: Sequence[str], commands: Sequence[str]) -> str | None:
    """The one-line error for a mistyped command (the first word that is
    not an option), None when it is a command (or there is none)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in commands:
        return None
    close = difflib.get_close_matches(word, commands, n=1, cutoff=0.6)
    hint = (
        f"did you mean {close[0]!r}? redismem --help lists the commands"
        if close
        else f"the commands are {', '.join(commands)}"
    )
    return f"redismem: no command {word!r} (hint: {hint})"


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = _build()
    unknown = _unknown_command(argv, commands)
    if unknown is not None:
        print(unknown, file=sys.stderr)
        sys.exit(2)
    args = parser.parse_args(argv)
    if args.command == "worker" and args.check is None:
        level = logging.DEBUG if args.verbose else logging.INFO
    else:
        level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code = args.run(args)
    except (CliError, InvalidInput) as exc:
        print(one_line(exc, args.command), file=sys.stderr)
        code = 2
    except (RedisMemError, rexc.RedisError, OSError, ImportError) as exc:
        print(one_line(exc, args.command), file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
