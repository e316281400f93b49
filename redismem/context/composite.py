"""Composing providers: several memories read as one, duplicates removed.

``CombinedProvider`` asks several providers and merges their histories with
``merge_messages``; it writes once per distinct store so that providers over
the same ``Memory`` do not store every message twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from redismem.checks import (
    check_choice,
    check_list_of,
    check_message_list,
    check_optional_int,
    check_optional_str,
)
from redismem.context.providers import MemoryProvider
from redismem.context.toolgroups import tool_units
from redismem.errors import InvalidInput
from redismem.models import MemoryEntry, Message
from redismem.surface import is_memory

__all__ = [
    "MERGE_MODES",
    "CombinedProvider",
    "MergeMode",
    "merge_messages",
]

MergeMode = Literal["interleave", "concat", "priority"]
MERGE_MODES: tuple[MergeMode, ...] = ("interleave", "concat", "priority")


def _message_key(message: Message) -> tuple[Any, ...]:
    """Messages with equal keys are duplicates of one another."""
    calls = tuple(
        (
            call.id,
            call.name,
            call.arguments
            if isinstance(call.arguments, str)
            else json.dumps(call.arguments, sort_keys=True, default=str),
        )
        for call in message.tool_calls
    )
    return (
        message.id,
        message.role,
        message.content,
        message.name,
        message.tool_call_id,
        calls,
    )


def _units(messages: Sequence[Message]) -> list[list[Message]]:
    """Split a list into atomic units: a tool call with its results (and the
    system messages after the call), or one message (an orphan too)."""
    units = tool_units(messages, system="join", orphans="alone").units
    return [[messages[position] for position in unit] for unit in units]


def _write_order(message: Message) -> tuple[int, float, int]:
    """Sort key of a unit's first message for ``interleave``."""
    if message.created_at is None:
        return (0, 0.0, 0) if message.role == "system" else (2, 0.0, 0)
    seq = int(message.id) if message.id is not None and message.id.isdigit() else 0
    return (1, message.created_at.timestamp(), seq)


def _without_orphans(messages: list[Message]) -> list[Message]:
    """Drop tool results that do not follow their assistant tool call."""
    dropped = set(tool_units(messages, system="free", orphans="drop").dropped)
    return [message for position, message in enumerate(messages) if position not in dropped]


def merge_messages(lists: Sequence[Sequence[Message]], merge: MergeMode) -> list[Message]:
    """Merge what several providers read into one history, without duplicates.

    Two messages are duplicates when they have the same id (or both none) and
    the same role, content, name, tool_call_id and tool calls; the first in
    merged order is kept. (Ids are per store, so equal ids holding different
    messages, from two stores, are both kept.)

    ``concat``
        Each list in turn, in provider order: the first provider's messages,
        then the second's that are not duplicates, and so on.
    ``interleave``
        One timeline. System messages without a write time (summaries) come
        first, in provider order; then stored messages by write time
        (``created_at``, then message id, then provider order); then other
        messages, in provider order. An assistant tool call and its results
        move together, so merging never separates them.
    ``priority``
        The first non-empty list, alone: later providers are fallbacks.

    In every mode tool results whose call is not right before them are dropped.
    """
    check_choice("merge", merge, MERGE_MODES)
    if merge == "priority":
        ordered = next((list(found) for found in lists if found), [])
    elif merge == "concat":
        ordered = [message for found in lists for message in found]
    else:
        tagged = [
            (_write_order(unit[0]), index, position, unit)
            for index, found in enumerate(lists)
            for position, unit in enumerate(_units(found))
        ]
        tagged.sort(key=lambda item: (item[0], item[1], item[2]))
        ordered = [message for *_, unit in tagged for message in unit]
    seen: set[tuple[Any, ...]] = set()
    unique: list[Message] = []
    for message in ordered:
        key = _message_key(message)
        if key not in seen:
            seen.add(key)
            unique.append(message)
    return _without_orphans(unique)


def _store_key(provider: object) -> tuple[str, str] | None:
    """The store a provider writes to, when it says (``.memory``); else None."""
    memory = getattr(provider, "memory", None)
    if is_memory(memory):
        return (memory.config.url, memory.layout.namespace)
    return None


class CombinedProvider:
    """Several providers read as one (see ``merge_messages`` for ``merge``).

    Reads ask every provider with the same arguments (``priority`` asks them
    in order and stops at the first that returns messages) and merge what
    they return. ``limit`` is passed to each provider; the merged history may
    hold more messages than ``limit``.

    Writes go once to each distinct store: providers over one ``Memory``
    (same URL and namespace) share a session, and writing through each would
    store every message twice. The first provider over a store writes for it
    (put the provider whose writes you want, e.g. ``SummarizingMemory``,
    first). Providers that do not expose a ``memory`` store are all written.
    All writes are attempted; the first error is then raised. ``clear`` and
    ``entries`` follow the same rule.
    """

    def __init__(
        self, providers: Sequence[MemoryProvider], merge: MergeMode = "interleave"
    ) -> None:
        check_list_of("providers", providers, MemoryProvider, what="memory providers")
        if not providers:
            raise InvalidInput("CombinedProvider needs at least one provider")
        self.providers: tuple[MemoryProvider, ...] = tuple(providers)
        self.merge: MergeMode = check_choice("merge", merge, MERGE_MODES)

    def _writers(self) -> list[MemoryProvider]:
        seen: set[tuple[str, str]] = set()
        out = []
        for provider in self.providers:
            key = _store_key(provider)
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
            out.append(provider)
        return out

    async def read(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        limit: int | None = None,
        query: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[Message]:
        """The providers' histories, merged."""
        check_optional_str("query", query)
        check_optional_int("limit", limit)
        kwargs: dict[str, Any] = {
            "session_id": session_id,
            "user_id": user_id,
            "limit": limit,
            "query": query,
            "tags": tags,
        }
        if self.merge == "priority":
            for provider in self.providers:
                found = await provider.read(**kwargs)
                if found:
                    return merge_messages([found], "priority")
            return []
        lists = await asyncio.gather(*(p.read(**kwargs) for p in self.providers))
        return merge_messages(lists, self.merge)

    async def write(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        session_id: str,
        user_id: str = "default",
        tags: Mapping[str, str] | None = None,
        agent_name: str | None = None,
    ) -> MemoryEntry | None:
        """Write once per distinct store; the first entry returned, in provider order."""
        check_message_list(messages)
        batch = list(messages)
        outcomes = await asyncio.gather(
            *(
                p.write(
                    batch, session_id=session_id, user_id=user_id, tags=tags, agent_name=agent_name
                )
                for p in self._writers()
            ),
            return_exceptions=True,
        )
        entry: MemoryEntry | None = None
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            if entry is None and outcome is not None:
                entry = outcome
        return entry

    async def clear(self, *, session_id: str, user_id: str = "default") -> None:
        """Clear the session once per distinct store."""
        outcomes = await asyncio.gather(
            *(p.clear(session_id=session_id, user_id=user_id) for p in self._writers()),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def entries(self, *, session_id: str, user_id: str = "default") -> list[MemoryEntry]:
        """Every distinct store's entries, in provider order."""
        found = await asyncio.gather(
            *(p.entries(session_id=session_id, user_id=user_id) for p in self._writers())
        )
        return [entry for entries in found for entry in entries]

    def __repr__(self) -> str:
        return f"CombinedProvider({list(self.providers)!r}, merge={self.merge!r})"


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
