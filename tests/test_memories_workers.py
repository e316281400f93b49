"""Importing dated history with two real worker processes extracting
(``REDISMEM_EXTRACTOR=rules``): whatever order the workers extract the days
in, the current home and employer are the ones said last (issue 19, defect 6)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from test_memories_slots import DAYS, assert_one_current_value, every_record
from worker_support import wait_ready, worker_env

from redismem import Fact, Memory


async def test_two_workers_extracting_dated_days_leave_the_last_said_current(
    redis_url: str, workers: Any, raw_factory: Any, namespace: str, queue_name: str
) -> None:
    raw = await raw_factory(redis_url)
    env = worker_env(redis_url, namespace, queue_name, EXTRACTOR="rules", EXTRACT_QUIET=0.2)
    await wait_ready(raw, workers.start(env, name="w1"))
    await wait_ready(raw, workers.start(env, name="w2"))
    mem = await Memory.connect(
        redis_url, namespace=namespace, queue_name=queue_name, index=True, summarize_batch=None
    )
    day0 = datetime(2024, 3, 1, 9, tzinfo=UTC)
    try:
        days = list(enumerate(DAYS))
        random.Random(7).shuffle(days)  # the newest days are often written (and extracted) first
        for day, (city, org) in days:
            said = "I moved to" if day % 3 else "I live in"
            await mem.write(
                [{"role": "user", "content": f"{said} {city}. I work at {org}."}],
                session_id=f"day-{day:02d}",
                user_id="dana",
                created_at=day0 + timedelta(days=day),
            )
        assert await mem.flush(user_id="dana", timeout=60)
        records = await every_record(mem, "dana")
        assert_one_current_value(records)
        current = {
            r.predicate: r.object
            for r in records
            if isinstance(r, Fact)
            and r.status == "active"
            and r.predicate in ("lives_in", "works_at")
        }
        assert current == {"lives_in": "Setubal", "works_at": "Hooli"}
        facts = [r for r in records if isinstance(r, Fact)]
        # Every day was extracted: each session is a source of some fact.
        assert len({s.session_id for r in facts for s in r.sources}) == len(DAYS)
    finally:
        await mem.clear_user("dana")
        await mem.aclose()
