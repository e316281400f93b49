"""Recall index format 2, the write side: bytes per indexed message and the
indexing throughput of one worker's ``index_pass`` loop.

One user's messages (``bench_recall``'s synthetic corpus: Zipf(1.07) over
30,000 words, 6-40 words per message, alternating user/assistant, 500 per
session, 100 per write) are written through ``Memory.write`` with no worker
running; then this process indexes every session with ``index_pass`` (the
workers' own entry: read, ``ranking.doc_weights``, one ``index_commit.lua``
per batch of 200, the record blocks sealed after each commit), sessions one
after the other, timed. Reported:

- messages/s of that loop, and where the time goes: ``doc_weights`` in
  Python (timed around each call), the commit and seal scripts on the
  server (``INFO commandstats``, evalsha), the rest (reads, decoding,
  round trips);
- bytes per message: the sum of ``MEMORY USAGE`` over the user's ``i:`` keys
  (SCAN), and the change of ``used_memory`` across the indexing (which also
  counts the key dictionary and expiry entries); the session copy's bytes
  (``:s:`` keys) for scale.

A throwaway ``redis-server`` is started on a free loopback port (``--url``
uses an existing server, writing only under the namespace ``benchidx``,
cleared at the end)::

    .venv/bin/python bench/bench_index_commit.py                   # 100,000 messages
    .venv/bin/python bench/bench_index_commit.py --messages 10000
    .venv/bin/python bench/bench_index_commit.py --recall-ttl 86400  # keys with a TTL
    .venv/bin/python bench/bench_index_commit.py --format 1          # today's format
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from _util import throwaway_redis
from bench_recall import Corpus, fill_user

from redismem import Memory
from redismem.core.backend import backend_of
from redismem.recall import index, ranking

NAMESPACE = "benchidx"
USER = "big"


async def evalsha_usec(mem: Memory) -> tuple[int, int]:
    stats = await mem.redis.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {})
    return int(entry.get("usec", 0)), int(entry.get("calls", 0))


async def commandstats(mem: Memory) -> dict[str, tuple[int, int]]:
    """command -> (calls, usec), commands called from scripts included."""
    stats = await mem.redis.info("commandstats")
    return {k[len("cmdstat_") :]: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}


async def used_memory(mem: Memory) -> int:
    return int((await mem.redis.info("memory"))["used_memory"])


async def key_bytes(mem: Memory, pattern: str, marker: bytes) -> tuple[int, int, int]:
    """(MEMORY USAGE sum, keys, keys with a TTL) of the keys matching
    ``pattern`` whose name holds ``marker``."""
    total = keys = timed = 0
    async for key in mem.redis.scan_iter(match=pattern, count=1000):
        if marker in key:
            total += await mem.redis.memory_usage(key, samples=0) or 0
            keys += 1
            timed += await mem.redis.pttl(key) > 0
    return total, keys, timed


async def run(
    url: str, messages: int, recall_ttl: float | None, fmt: int, log: Any, verbose: bool = False
) -> None:
    index.NEW_INDEX_FORMAT = fmt
    mem = await Memory.connect(
        url, namespace=NAMESPACE, queue_name="redismem/bench-idx", recall_ttl=recall_ttl
    )
    try:
        await mem.clear_all()
        corpus = Corpus()
        texts = [corpus.text() for _ in range(messages)]
        log(f"writing {messages:,} messages")
        await fill_user(mem, USER, texts)
        backend = backend_of(mem)
        sessions = [f"s{n}" for n in range((messages + 499) // 500)]

        weights_s = 0.0
        doc_weights = ranking.doc_weights

        def timed_weights(*args: Any, **kwargs: Any) -> Any:
            nonlocal weights_s
            t0 = time.perf_counter()
            try:
                return doc_weights(*args, **kwargs)
            finally:
                weights_s += time.perf_counter() - t0

        ranking.doc_weights = timed_weights  # type: ignore[assignment]
        before_mem = await used_memory(mem)
        usec0, calls0 = await evalsha_usec(mem)
        stats0 = await commandstats(mem)
        log(f"indexing {len(sessions)} sessions with index_pass")
        started = time.perf_counter()
        indexed = 0
        for sid in sessions:
            while True:
                outcome = await index.index_pass(backend, user_id=USER, session_id=sid)
                if outcome.status != "indexed":
                    break
                indexed += outcome.indexed
        elapsed = time.perf_counter() - started
        ranking.doc_weights = doc_weights  # type: ignore[assignment]
        usec1, calls1 = await evalsha_usec(mem)
        stats1 = await commandstats(mem)
        after_mem = await used_memory(mem)
        pattern = mem.layout.user_pattern(USER)
        i_bytes, i_keys, i_timed = await key_bytes(mem, pattern, b":i:" if fmt == 2 else b":r:")
        s_bytes, _, _ = await key_bytes(mem, pattern, b":s:")
        meta = await mem.redis.hgetall(mem.layout.recall(USER).i_meta)
        server_s = (usec1 - usec0) / 1e6
        print(
            f"index format {fmt}, {indexed:,} messages indexed of {messages:,} "
            f"(recall_ttl {recall_ttl}; i:meta next={meta.get(b'next', b'?').decode()}, "
            f"sealed blocks below {meta.get(b'sealed', b'0').decode()})\n"
            f"  throughput (one index_pass loop)   {indexed / elapsed:8.0f} msgs/s "
            f"({elapsed:.1f} s)\n"
            f"    doc_weights (Python)             {weights_s / indexed * 1e6:8.1f} us/msg\n"
            f"    scripts on the server (evalsha)  {server_s / indexed * 1e6:8.1f} us/msg "
            f"({calls1 - calls0} calls)\n"
            f"    the rest (reads, decode, rtt)    "
            f"{(elapsed - weights_s - server_s) / indexed * 1e6:8.1f} us/msg\n"
            f"  bytes per message, index keys MEMORY USAGE {i_bytes / messages:8.1f} "
            f"({i_keys:,} keys, {i_timed:,} with a TTL)\n"
            f"  bytes per message, used_memory change    "
            f"{(after_mem - before_mem) / messages:8.1f}\n"
            f"  the session copy (:s: keys) per message  {s_bytes / messages:8.1f}"
        )
        if verbose:
            print("  commands per message (calls, us), scripts' own included:")
            for name, (calls, usec) in sorted(stats1.items(), key=lambda e: -e[1][1]):
                c0, u0 = stats0.get(name, (0, 0))
                if calls - c0:
                    print(
                        f"    {name:14} {(calls - c0) / indexed:8.2f} {(usec - u0) / indexed:8.1f}"
                    )
    finally:
        await mem.clear_all()
        await mem.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing Redis (default: a throwaway redis-server)")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--format", type=int, choices=(1, 2), default=2, help="the index format (1: today's)"
    )
    parser.add_argument(
        "--recall-ttl", type=float, default=None, help="seconds (default: none, kept forever)"
    )
    parser.add_argument("--verbose", action="store_true", help="calls per command too")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.url:
        asyncio.run(run(args.url, args.messages, args.recall_ttl, args.format, log, args.verbose))
    else:
        with throwaway_redis() as url:
            asyncio.run(run(url, args.messages, args.recall_ttl, args.format, log, args.verbose))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
