"""Metrics benchmark: what ``redismem.metrics`` costs a write, off and on.

A/B in one process on one redis-server: single-message ``write_entry`` calls
(indexing and summarization off, 100 sessions), each pair made of one call
through the ``Memory`` instance (``memory.write_entry``: timed when the
``Memory`` was made with the metrics on) and one through the class function
(``Memory.write_entry(memory, ...)``: never timed), in a random order per
pair. Reported per round: the median of each side and their difference;
first with the metrics off (the instance has no timed calls: the difference
is noise), then on. Medians, because a shared machine's outliers swamp the
means.

    .venv/bin/python bench/bench_metrics.py            # 4 rounds of 20,000 calls
    .venv/bin/python bench/bench_metrics.py --quick    # smoke check
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from typing import Any

from _util import throwaway_redis

from redismem import Memory, metrics

MESSAGE = [{"role": "user", "content": "hello there, a short message"}]


async def one_round(url: str, calls: int, seed: int) -> tuple[float, float]:
    """Median seconds of a write through the instance and through the class."""
    through_class = Memory.write_entry
    options: dict[str, Any] = dict(
        user_id="u", tags=None, agent_name=None, summarize="", enqueue=False
    )
    async with await Memory.connect(
        url, namespace="benchmetrics", keep_recent=None, index=False
    ) as memory:
        for i in range(min(500, calls)):  # warm up
            await memory.write_entry(MESSAGE, session_id=f"s{i % 100}", **options)
        instance: list[float] = []
        plain: list[float] = []
        rng = random.Random(seed)
        for i in range(calls // 2):
            session = f"s{i % 100}"
            for timed in rng.sample((True, False), 2):
                started = time.perf_counter()
                if timed:
                    await memory.write_entry(MESSAGE, session_id=session, **options)
                else:
                    await through_class(memory, MESSAGE, session_id=session, **options)
                (instance if timed else plain).append(time.perf_counter() - started)
        await memory.clear_all()
    return statistics.median(instance), statistics.median(plain)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("REDISMEM_BENCH_URL"),
        help="use this Redis instead of a throwaway redis-server (default: $REDISMEM_BENCH_URL)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    args = parser.parse_args(argv)
    rounds, calls = (1, 1000) if args.quick else (4, 20_000)

    def run(url: str) -> None:
        for state in ("off", "on"):
            if state == "on":
                metrics.enable()
            differences = []
            for round_ in range(rounds):
                instance, plain = asyncio.run(one_round(url, calls, seed=round_))
                differences.append((instance - plain) * 1e6)
                print(
                    f"metrics {state:3} round {round_}: write p50 {instance * 1e6:.1f} us "
                    f"(class {plain * 1e6:.1f} us), difference {differences[-1]:+.2f} us",
                    flush=True,
                )
            print(f"metrics {state}: mean difference {statistics.mean(differences):+.2f} us")

    if args.url:
        run(args.url)
    else:
        with throwaway_redis() as url:
            run(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
