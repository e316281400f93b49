"""How long ``clear_user`` takes, against the raw deletion a user would write.

A user with ``--sessions`` sessions (two messages each, tagged, indexed by
in-process workers when ``--index``) and ``--items`` store items; then
``clear_user``, timed, next to the baseline: SCAN the user's keys and UNLINK
them in batches with a default-configured ``redis.asyncio`` client (which
gives none of the guarantees: a racing writer or worker can recreate keys
behind it). Medians of ``--rounds`` rounds on a throwaway ``redis-server``
(or ``--url``); the issue's goal: 10,000 sessions in <= 2 s.

    .venv/bin/python bench/bench_clear.py [--sessions 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from statistics import median

import redis.asyncio as aioredis
from _util import throwaway_redis

from redismem import Memory


async def fill(mem: Memory, user: str, sessions: int, items: int) -> int:
    async def one(s: int) -> None:
        await mem.write(
            [
                {"role": "user", "content": f"message {s} about kites"},
                {"role": "assistant", "content": "noted"},
            ],
            session_id=f"s{s}",
            user_id=user,
            tags={"topic": f"t{s % 10}"},
        )

    for start in range(0, sessions, 200):
        await asyncio.gather(*(one(s) for s in range(start, min(start + 200, sessions))))
    for i in range(items):
        await mem.store.put((user, "notes"), f"k{i}", {"text": f"note {i} about kites"})
    keys = 0
    async for _ in mem.redis.scan_iter(match=mem.layout.user_pattern(user), count=1000):
        keys += 1
    return keys


async def raw_clear(url: str, pattern: str) -> int:
    client = aioredis.Redis.from_url(url)
    try:
        removed = 0
        batch: list[bytes] = []
        async for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) == 1000:
                removed += await client.unlink(*batch)
                batch = []
        if batch:
            removed += await client.unlink(*batch)
        return removed
    finally:
        await client.aclose()


async def main(args: argparse.Namespace) -> None:
    with throwaway_redis() if args.url is None else _given(args.url) as url:
        mem = await Memory.connect(url, namespace="benchclear", index=False)
        ours, theirs = [], []
        try:
            for round_ in range(args.rounds):
                user = f"u{round_}"
                keys = await fill(mem, user, args.sessions, args.items)
                start = time.perf_counter()
                removed = await mem.clear_user(user)
                ours.append(time.perf_counter() - start)
                assert removed == keys, (removed, keys)
                await fill(mem, user, args.sessions, args.items)
                start = time.perf_counter()
                await raw_clear(url, mem.layout.user_pattern(user))
                theirs.append(time.perf_counter() - start)
                print(
                    f"round {round_ + 1}: {keys} keys, clear_user {ours[-1]:.3f} s, "
                    f"raw SCAN+UNLINK {theirs[-1]:.3f} s",
                    flush=True,
                )
        finally:
            await mem.clear_all()
            await mem.aclose()
    goal = "met" if median(ours) <= 2.0 else "MISSED"
    print(
        f"\n{args.sessions} sessions + {args.items} items: clear_user median {median(ours):.3f} s "
        f"(goal <= 2 s: {goal}); raw SCAN+UNLINK {median(theirs):.3f} s; "
        f"ratio {median(ours) / median(theirs):.2f}x"
    )


class _given:
    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
