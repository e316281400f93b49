"""``SessionMemory``: what the modules below the façade need of a ``Memory``.

The context layer (providers, agent memory, the context builder) and the
framework adapters are handed a ``redismem.Memory`` by the user and call its
session methods. They type it with this protocol instead of importing the
façade (``redismem.client``), so nothing below the façade depends on it;
``Memory`` satisfies it structurally (mypy checks that where the façade
hands itself over), and ``is_memory``/``check_memory`` tell one apart at
run time, by what it holds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from redismem.core.backend import Backend
from redismem.errors import InvalidInput
from redismem.models import Context, Hit, MemoryEntry, Message, SessionInfo, Summary

if TYPE_CHECKING:
    from redismem.config import MemoryConfig
    from redismem.context.strategies import MemoryStrategy
    from redismem.core.keys import KeyLayout
    from redismem.core.queue import SummarizeArgs
    from redismem.longterm.memories import Knowledge
    from redismem.longterm.store import LongTermStore

__all__ = ["SessionMemory", "WriteOutcome", "check_memory", "is_memory"]


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What ``Memory.write_entry`` did."""

    entry: MemoryEntry
    #: When this write made the session newly due for summarization, the time
    #: it did (the episode of its job); else 0.
    pending_since: int
    #: Whether the session is marked due for summarization at all.
    pending: bool


class SessionMemory(Protocol):
    """The session calls, settings and feature objects of a ``Memory``."""

    @property
    def config(self) -> MemoryConfig: ...

    @property
    def layout(self) -> KeyLayout: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def closed(self) -> bool: ...

    @property
    def store(self) -> LongTermStore: ...

    @property
    def memories(self) -> Knowledge: ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...

    async def write(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        session_id: str,
        user_id: str = "default",
        tags: Mapping[str, str] | None = None,
        agent_name: str | None = None,
        write_id: str | None = None,
        created_at: datetime | None = None,
    ) -> MemoryEntry: ...

    async def write_entry(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        session_id: str,
        user_id: str,
        tags: Mapping[str, str] | None,
        agent_name: str | None,
        summarize: str,
        enqueue: bool,
        store_system: bool | None = None,
        ttl_ms: int | None = None,
        write_id: str | None = None,
        created_at: datetime | None = None,
    ) -> WriteOutcome: ...

    def summarize_args(self) -> SummarizeArgs | None: ...

    async def read(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        limit: int | None = None,
        tags: Mapping[str, str] | None = None,
        max_tokens: int | None = None,
        keep_orphans: bool = False,
        refresh_ttl: bool = True,
    ) -> list[Message]: ...

    async def summary(self, *, session_id: str, user_id: str = "default") -> Summary | None: ...

    async def context(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        max_tokens: int | None = None,
        strategy: MemoryStrategy | None = None,
    ) -> Context: ...

    async def entries(
        self, *, session_id: str, user_id: str = "default", tags: Mapping[str, str] | None = None
    ) -> list[MemoryEntry]: ...

    async def sessions(
        self, *, user_id: str = "default", tags: Mapping[str, str] | None = None
    ) -> list[SessionInfo]: ...

    async def search(
        self,
        query: str | None = None,
        *,
        user_id: str = "default",
        session_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        roles: Collection[str] | None = None,
        agent_name: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 10,
        min_score: float | None = None,
    ) -> list[Hit]: ...

    async def clear(self, *, session_id: str, user_id: str = "default") -> int: ...


#: What a ``Memory`` answers besides its ``backend``.
_SESSION_CALLS = ("write", "write_entry", "read", "summary", "context", "clear", "entries")


def is_memory(value: object) -> TypeGuard[SessionMemory]:
    """Whether ``value`` is a ``redismem.Memory``: it holds a ``Backend`` (a
    property of its class) and answers the session calls. The façade's
    class is never imported here."""
    if not isinstance(getattr(type(value), "backend", None), property):
        return False
    return isinstance(getattr(value, "backend", None), Backend) and all(
        callable(getattr(value, name, None)) for name in _SESSION_CALLS
    )


def check_memory(value: object) -> SessionMemory:
    """``value`` when it is a ``Memory``, else ``InvalidInput``."""
    if not is_memory(value):
        raise InvalidInput(f"expected a Memory, got {type(value).__name__}")
    return value
