"""Helpers shared by the benchmarks: a throwaway Redis, realistic messages, stats."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import median
from typing import Any

__all__ = ["conversation", "median", "percentile", "throwaway_redis", "turns"]


# -- a throwaway redis-server ----------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def throwaway_redis() -> Iterator[str]:
    """Start ``redis-server`` on a free loopback port, without persistence;
    yield its URL; stop it and remove its directory afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit(
            "redis-server is not on PATH: run `bash scripts/setup` as root (it installs it), "
            "or pass --url redis://host:port/db"
        )
    workdir = tempfile.mkdtemp(prefix="redismem-bench-")
    port = _free_port()
    options = {
        "--port": str(port),
        "--bind": "127.0.0.1",
        "--save": "",
        "--appendonly": "no",
        "--dir": workdir,
        "--logfile": os.path.join(workdir, "redis.log"),
    }
    proc = subprocess.Popen(
        [binary, *(part for pair in options.items() for part in pair)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not _ping(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"redis-server did not start; see {workdir}/redis.log")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


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
