"""What the adapters keep, and for how long: one rule for all of them.

* An adapter stores exactly what its framework gives it, or raises; it never
  drops: system messages are stored whatever ``store_system_messages``, and a
  read without a bound returns every stored message, a tool result whose call
  is not in the session too.
* Retention is the framework's: its own Redis stores keep a chat (a thread,
  an item) until it is deleted, unless given a TTL. So do the adapters,
  whatever the ``Memory``'s ``ttl``: with ``ttl=None`` (their default)
  nothing they write expires and their reads leave a session's expiry alone;
  with ``ttl`` seconds each write sets the expiry to ``ttl`` from now.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from redismem.checks import check_ttl
from redismem.config import MAX_TTL
from redismem.models import Message

if TYPE_CHECKING:
    from redismem.surface import SessionMemory

__all__ = ["read", "ttl_ms", "write"]


def ttl_ms(ttl: object) -> int:
    """``ttl`` (seconds, or None: keep) as the scripts' milliseconds (0: keep)."""
    seconds = check_ttl("ttl", ttl, maximum=MAX_TTL.total_seconds(), none=" (keep until deleted)")
    return 0 if seconds is None else max(1, round(seconds * 1000))


async def write(
    memory: SessionMemory,
    messages: list[Message],
    *,
    session_id: str,
    user_id: str,
    tags: Mapping[str, str] | None,
    agent_name: str | None,
    ttl: int,
) -> None:
    """``Memory.write`` as the chat adapters store: every message the framework
    gave (system messages too, whatever ``store_system_messages``), with the
    adapter's retention ``ttl`` (ms from ``ttl_ms``, 0: keep) instead of the
    ``Memory``'s."""
    args = memory.summarize_args()
    await memory.write_entry(
        messages,
        session_id=session_id,
        user_id=user_id,
        tags=tags,
        agent_name=agent_name,
        summarize=args.encode() if args else "",
        enqueue=True,
        store_system=True,
        ttl_ms=ttl,
    )


async def read(
    memory: SessionMemory,
    *,
    session_id: str,
    user_id: str,
    limit: int | None = None,
    max_tokens: int | None = None,
) -> list[Message]:
    """``Memory.read`` as the chat adapters read: without a bound, exactly
    what is stored (a leading tool result too; the rule that drops one applies
    to windows cut by ``limit``/``max_tokens``); never refreshing the session's
    expiry (the adapter's retention is set by its writes)."""
    return await memory.read(
        session_id=session_id,
        user_id=user_id,
        limit=limit,
        max_tokens=max_tokens,
        keep_orphans=limit is None and max_tokens is None,
        refresh_ttl=False,
    )
