"""``redismem local status|start|stop PATH``: the server behind ``local://PATH``."""

from __future__ import annotations

import argparse
from typing import Any

from redismem.cli.common import add_json, command_parser, emit_json
from redismem.core import local

__all__ = ["add_commands"]


def _describe(status: local.LocalStatus) -> dict[str, Any]:
    return {
        "path": str(status.path),
        "running": status.running,
        "pid": status.pid if status.running else None,
        "socket": status.socket,
        "url": f"local://{status.path}",
        "log": str(status.log),
    }


def _status(args: argparse.Namespace) -> int:
    found = _describe(local.status(args.path))
    if args.json:
        emit_json(found)
    elif found["running"]:
        print(f"running (pid {found['pid']}) at {found['url']}; socket {found['socket']}")
    else:
        print(f"not running: {found['url']} starts it when a process opens it")
    return 0


def _start(args: argparse.Namespace) -> int:
    local.start(args.path)
    status = local.status(args.path)
    print(f"running (pid {status.pid}) at local://{status.path}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    home = local.status(args.path).path
    print(f"stopped the server of local://{home}" if local.stop(args.path) else "none was running")
    return 0


def add_commands(sub: Any) -> None:
    cmd = command_parser(
        sub,
        "local",
        "the Redis server behind a local://PATH URL: status, start, stop",
        "A local://PATH URL makes the first process that opens it start a Redis-compatible "
        "server on a unix socket under PATH (append-only file, so data survives restarts); "
        "later processes attach, and the server keeps running after they exit. These "
        "commands show, start or stop it. Stop the workers using PATH first: they would "
        "start it again.",
        [
            "redismem local status .redismem",
            "redismem local stop .redismem",
            "redismem local status ~/agents/memory --json",
        ],
    )
    actions = cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, run, summary in (
        ("status", _status, "whether the server runs, its pid, socket and log"),
        ("start", _start, "start the server unless it runs"),
        ("stop", _stop, "stop the server (it writes its file first)"),
    ):
        action = actions.add_parser(name, help=summary, description=summary)
        action.add_argument("path", metavar="PATH", help="the directory of local://PATH")
        if name == "status":
            add_json(action)
        action.set_defaults(run=run)
