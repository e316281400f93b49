"""``redismem demo``: its arguments, help and ``_demo``."""

from __future__ import annotations

import argparse
import asyncio
import textwrap
from typing import Any

from redismem.cli.common import add_verbose as _add_verbose
from redismem.cli.common import positive as _positive

__all__ = ["add_demo"]


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


def _describe_demo(demo: argparse.ArgumentParser) -> None:
    demo.description = textwrap.fill(
        "Run a small fleet on shared memory: agent processes writing to shared sessions and "
        "workers summarizing, indexing and extracting, then a report that checks nothing was "
        "lost. Without --url it runs on local://.redismem (a Redis it starts under the working "
        "directory, and stops at the end); --keep leaves the data and the server, to browse "
        "with the other commands.",
        79,
    )
    demo.epilog = (
        "examples:\n"
        "  redismem demo\n"
        "  redismem demo --agents 8 --workers 3 --duration 60 --keep\n"
        "  redismem demo --url redis://localhost:6379/0 --summarizer llm\n"
    )
    demo.formatter_class = argparse.RawDescriptionHelpFormatter


def add_demo(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="run a fleet of agents and workers on shared memory, then report"
    )
    demo.add_argument(
        "--url",
        help="Redis URL (default: $REDISMEM_URL, else local://.redismem in the working directory)",
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
        "--duration", type=_positive(float), default=15.0, help="seconds of agent traffic (15)"
    )
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--summarizer", default="keypoints", choices=["keypoints", "truncate", "llm"])
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the demo's data (and the local server) afterwards, and print the CLI "
        "commands that browse it",
    )
    _add_verbose(demo, "log at INFO level")
    _describe_demo(demo)
    demo.set_defaults(run=_demo)
