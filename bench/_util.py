"""Helpers shared by the benchmarks: a throwaway Redis, realistic messages, stats."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import median
from typing import Any

from redismem.localserver import LocalRedis, redis_server_binary

__all__ = ["conversation", "median", "percentile", "throwaway_redis", "turns"]


# -- a throwaway redis-server ----------------------------------------------


@contextmanager
def throwaway_redis() -> Iterator[str]:
    """``redismem.localserver.LocalRedis`` as a context manager yielding its URL,
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
_WORDS = tuple(_WORD_TEXT.split())

_TOOLS = ("search_flights", "get_weather", "lookup_order", "run_sql", "send_email")


def _text(rng: random.Random, lo: int = 100, hi: int = 600) -> str:
    target = rng.randint(lo, hi)
    words: list[str] = []
    size = 0
    while size < target:
        word = rng.choice(_WORDS)
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


# -- stats -------------------------------------------------------------------


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile of ``samples`` (need not be sorted)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]
