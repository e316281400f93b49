"""Helpers shared by the benchmarks: a throwaway Redis, realistic messages,
timing loops, stats and the report table."""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import random
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from statistics import median
from typing import Any, TypeVar

from redismem.demo.localserver import LocalRedis, redis_server_binary

__all__ = [
    "Table",
    "conversation",
    "latencies",
    "median",
    "package_version",
    "percentile",
    "rotated",
    "sequential_rate",
    "throughput",
    "throwaway_redis",
    "turns",
    "write_json",
]

T = TypeVar("T")


# -- a throwaway redis-server ----------------------------------------------


@contextmanager
def throwaway_redis() -> Iterator[str]:
    """``redismem.demo.localserver.LocalRedis`` as a context manager yielding its URL,
    with a hint when there is no server binary."""
    if redis_server_binary() is None:
        raise SystemExit(
            "redis-server is not on PATH: run `bash scripts/setup` as root (it installs it), "
            "or pass --url redis://host:port/db"
        )
    with LocalRedis.start() as server:
        yield server.url


# -- realistic messages --------------------------------------------------------

_WORD_TEXT = (
    "the a to of and in for on with is it that this we you can will be as at by from "
    "agent tool memory session user context token model prompt reply plan step result "
    "flight hotel booking price date city weather forecast order invoice customer ticket "
    "refund account password email report summary table chart query database index cache "
    "error retry timeout request response latency deploy service cluster node replica "
    "please thanks sure here are two three options first second next then also however "
    "because should would could must might available confirmed pending failed updated"
)
#: Words of agent conversations, common and domain ones.
WORDS = tuple(_WORD_TEXT.split())

_TOOLS = ("search_flights", "get_weather", "lookup_order", "run_sql", "send_email")


def _text(rng: random.Random, lo: int = 100, hi: int = 600) -> str:
    target = rng.randint(lo, hi)
    words: list[str] = []
    size = 0
    while size < target:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    text = " ".join(words)[:target].rstrip()
    return text[0].upper() + text[1:] + "."


def conversation(seed: int, count: int) -> list[dict[str, Any]]:
    """``count`` chat messages: user and assistant alternating, 100-600 characters
    of text each; about one assistant reply in ten is a tool call followed by
    its tool result."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    call = 0
    while len(out) < count:
        out.append({"role": "user", "content": _text(rng)})
        if rng.random() < 0.1:
            call += 1
            call_id = f"call_{seed}_{call}"
            args = {"query": _text(rng, 20, 60), "limit": rng.randint(1, 20)}
            out.append(
                {
                    "role": "assistant",
                    "content": _text(rng, 100, 200),
                    "tool_calls": [
                        {"id": call_id, "name": rng.choice(_TOOLS), "arguments": json.dumps(args)}
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": call_id, "content": _text(rng)})
        out.append({"role": "assistant", "content": _text(rng)})
    return out[:count]


def turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split a conversation into turns (a user message and what follows it up
    to the next user message): what an agent writes in one call."""
    out: list[list[dict[str, Any]]] = []
    for message in messages:
        if message["role"] == "user" or not out:
            out.append([])
        out[-1].append(message)
    return out


# -- timing loops ----------------------------------------------------------------


async def throughput(tasks: int, ops: int, op: Callable[[int, int], Awaitable[Any]]) -> float:
    """Operations per second of ``tasks`` concurrent tasks doing ``ops`` each;
    ``op(task, i)`` is one operation."""

    async def run(task: int) -> None:
        for i in range(ops):
            await op(task, i)

    start = time.perf_counter()
    await asyncio.gather(*(run(t) for t in range(tasks)))
    return tasks * ops / (time.perf_counter() - start)


async def latencies(ops: int, op: Callable[[int], Awaitable[Any]]) -> list[float]:
    """Milliseconds of each of ``ops`` sequential operations."""
    out = []
    for i in range(ops):
        start = time.perf_counter()
        await op(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


async def sequential_rate(
    op: Callable[[int], Awaitable[Any]], max_ops: int, max_seconds: float | None = None
) -> float:
    """Operations per second of ``op(i)`` run one after another, ``max_ops``
    times or, when ``max_seconds`` is given, until that much time has passed
    (whichever comes first; at least 3 operations)."""
    start = time.perf_counter()
    done = 0
    while done < max_ops:
        await op(done)
        done += 1
        if max_seconds is not None and done >= 3 and time.perf_counter() - start >= max_seconds:
            break
    return done / (time.perf_counter() - start)


def rotated(items: Sequence[T], round_: int) -> list[T]:
    """``items`` in the order for round ``round_``: rotated by one each round,
    so every side runs in every position (with two sides: alternating)."""
    shift = round_ % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


# -- stats -------------------------------------------------------------------


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile of ``samples`` (need not be sorted)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


# -- environment -------------------------------------------------------------


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# -- results for bench/plots.py ------------------------------------------------


def write_json(path: Path, bench: str, results: dict[str, Any]) -> None:
    """``results`` as JSON at ``path`` (what ``bench/plots.py`` renders), under a
    ``meta`` block: which bench, when (UTC), the command, the machine's load."""
    meta = {
        "bench": bench,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(["python", *sys.argv]),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, **results}, indent=1) + "\n")


# -- report table ------------------------------------------------------------


class Table:
    """Rows of a label, two figures, a ratio and a goal, in fixed columns;
    remembers whether every goal passed."""

    def __init__(self, label_width: int = 56, value_width: int = 16, ratio_width: int = 13):
        self.widths = (label_width, value_width, ratio_width)
        self.lines: list[str] = []
        self.all_pass = True

    def row(self, label: str, a: str = "", b: str = "", ratio: str = "", goal: str = "") -> None:
        lw, vw, rw = self.widths
        self.lines.append(f"{label:{lw}}{a:>{vw}}{b:>{vw}}{ratio:>{rw}}  {goal}".rstrip())

    def header(self, label: str, a: str, b: str, ratio: str) -> None:
        """A section header: column titles and a rule."""
        if self.lines:
            self.lines.append("")
        self.row(label, a, b, ratio, "goal")
        self.lines.append("-" * (len(self.lines[-1]) + 12))

    def note(self, text: str) -> None:
        self.lines.append(text)

    def goal(self, text: str, ok: bool) -> str:
        """``text`` and PASS or MISS, for the goal column."""
        self.all_pass &= ok
        return f"{text:9} {'PASS' if ok else 'MISS'}"

    def text(self) -> str:
        return "\n".join(self.lines)
