"""One writer process of the multi-process test.

    python writer.py URL NAMESPACE SESSION PROC WRITES READY_KEY GO_KEY

Connects, announces itself on READY_KEY, waits for a token on GO_KEY (so all
writers start together), then makes WRITES writes of 1-3 messages to SESSION,
each message's content "PROC:WRITE:INDEX". Prints the message ids each write
got, as JSON: [[id, ...], ...].
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

import redis.asyncio as aioredis

from redismem import Memory


async def main(argv: list[str]) -> None:
    url, namespace, session_id, proc, writes, ready_key, go_key = argv
    rng = random.Random(int(proc))
    signal = aioredis.Redis.from_url(url)
    mem = await Memory.connect(url, namespace=namespace)
    try:
        await signal.rpush(ready_key, proc)
        if await signal.blpop([go_key], timeout=60) is None:
            raise SystemExit("no go signal")
        ids = []
        for i in range(int(writes)):
            count = rng.randint(1, 3)
            entry = await mem.write(
                [{"role": "user", "content": f"{proc}:{i}:{j}"} for j in range(count)],
                session_id=session_id,
                agent_name=f"p{proc}",
                tags={"proc": proc},
            )
            ids.append([int(m.id or "0") for m in entry.messages])
        print(json.dumps(ids))
    finally:
        await mem.aclose()
        await signal.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
