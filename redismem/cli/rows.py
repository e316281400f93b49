"""What the browsing commands show, shared by ``redismem users`` /
``redismem search`` (``redismem.cli.browse``) and the terminal browser
(``redismem.cli.tui``): a namespace's users with their activity, and a search
hit as table cells.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import NamedTuple

from redismem.cli.common import clip
from redismem.cli.units import ago
from redismem.client import Memory
from redismem.models import Hit

__all__ = ["HIT_COLUMNS", "UserActivity", "hit_row", "user_activity"]

#: Users whose sessions are read at once by ``user_activity``.
_CONCURRENCY = 16


class UserActivity(NamedTuple):
    """A user of a namespace: live sessions and the last access to one."""

    user_id: str
    sessions: int
    last_active: datetime | None


async def user_activity(memory: Memory) -> list[UserActivity]:
    """Every user of ``memory``'s namespace holding data (sessions, indexed
    messages or memories), most recently active first; users without a live
    session last, by id. Found by SCAN; nothing is changed."""
    layout = memory.layout
    user_ids: set[str] = set()
    for pattern in layout.user_root_patterns():
        async for key in memory.redis.scan_iter(match=pattern, count=1000):
            user = layout.parse_user_root(key)
            if user is not None:
                user_ids.add(user)
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def activity(user_id: str) -> UserActivity:
        async with gate:
            sessions = await memory.sessions(user_id=user_id)
        last = max((s.accessed_at for s in sessions), default=None)
        return UserActivity(user_id, len(sessions), last)

    rows = await asyncio.gather(*(activity(u) for u in sorted(user_ids)))
    rows.sort(key=lambda r: (r[2] is None, -(r[2].timestamp() if r[2] else 0), r[0]))
    return rows


#: The columns of a search hit, in ``redismem search`` and ``redismem browse``.
HIT_COLUMNS = ("when", "session", "agent", "role", "score", "text")


def hit_row(hit: Hit) -> tuple[str, str, str, str, str, str]:
    """One search hit as the cells of ``HIT_COLUMNS``."""
    return (
        ago(hit.created_at),
        hit.session_id,
        hit.agent_name or "-",
        hit.message.role,
        "-" if hit.score is None else f"{hit.score:.2f}",
        clip(hit.message.content, 60),
    )
