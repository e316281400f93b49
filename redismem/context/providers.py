"""Memory providers: the read/write contract agent frameworks plug memory into.

A framework reads a session's history before a run and writes the messages
the run produced after it. ``MemoryProvider`` is that contract; the ready
providers below implement it on one ``Memory`` (one Redis, one namespace):

``BufferMemory``
    The most recent messages, within ``max_messages`` and/or ``max_tokens``.
``LastTurnsMemory``
    The most recent whole turns (``max_turns``), within ``max_tokens``.
``SummarizingMemory``
    The running summary (one system message) then the unsummarized recent
    messages; writes keep the summary up to date, inline or via the workers.
(``CombinedProvider``, in ``redismem.context.composite``, reads several as one.)

Rules every ready provider follows:

- Reads never start with a tool result whose call was cut, and never split
  an assistant tool call from its results (they use ``redismem.context.strategies``).
- ``query`` is accepted for providers that search (vector stores); the ready
  providers do not search and ignore it.
- System messages are not stored: agents re-inject their instructions on
  every run. Pass ``store_system=True`` to store them; the default, None,
  follows the ``Memory``'s ``store_system_messages`` (False unless set).
- Invalid arguments raise ``InvalidInput``; nothing is written then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from redismem.checks import (
    check_instance,
    check_int,
    check_optional_bool,
    check_optional_int,
    check_optional_str,
)
from redismem.context.quoting import render_summary, summary_message
from redismem.context.strategies import Hybrid, LastMessages, MemoryStrategy, TokenBudget, Turns
from redismem.context.tokens import fit_text, message_tokens
from redismem.context.toolgroups import drop_orphan_tool_results
from redismem.core.keys import validate_id
from redismem.core.queue import SummarizeArgs
from redismem.errors import BackendError, BackendUnavailable, InvalidInput, SummarizerError
from redismem.models import MemoryEntry, Message
from redismem.summarization.job import settle_pending, summarize_pass
from redismem.summarization.summarizers import Summarizer
from redismem.surface import check_memory

if TYPE_CHECKING:
    from redismem.surface import SessionMemory

__all__ = [
    "BufferMemory",
    "MemoryProvider",
    "LastTurnsMemory",
    "SummarizingMemory",
]

logger = logging.getLogger(__name__)


#: Most summarization passes one write runs inline (each calls the summarizer once).
_INLINE_PASSES = 3


@runtime_checkable
class MemoryProvider(Protocol):
    """What an agent framework needs from memory: read before a run, write after it."""

    async def read(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        limit: int | None = None,
        query: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[Message]:
        """Prior history to put before the run's messages, oldest first."""
        ...

    async def write(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        session_id: str,
        user_id: str = "default",
        tags: Mapping[str, str] | None = None,
        agent_name: str | None = None,
    ) -> MemoryEntry | None:
        """Persist the messages a run produced."""
        ...

    async def clear(self, *, session_id: str, user_id: str = "default") -> None:
        """Forget a session."""
        ...

    async def entries(self, *, session_id: str, user_id: str = "default") -> list[MemoryEntry]:
        """The stored entries (one per write), for inspection and debugging."""
        ...


# -- helpers ------------------------------------------------------------------------


def _check_ids(session_id: object, user_id: object) -> None:
    validate_id(session_id, "session_id")
    validate_id(user_id, "user_id")


def _min_limit(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _limits_strategy(max_messages: int | None, max_tokens: int | None) -> MemoryStrategy | None:
    if max_messages is not None and max_tokens is not None:
        return Hybrid(max_messages, max_tokens)
    if max_messages is not None:
        return LastMessages(max_messages)
    if max_tokens is not None:
        return TokenBudget(max_tokens)
    return None


# -- providers on one Memory ------------------------------------------------------


class _StoreProvider:
    """Writes, clears and entries shared by the providers on one ``Memory``."""

    def __init__(self, memory: SessionMemory, *, store_system: bool | None) -> None:
        self._memory = check_memory(memory)
        self._store_system = check_optional_bool("store_system", store_system)

    @property
    def memory(self) -> SessionMemory:
        """The ``Memory`` this provider reads and writes."""
        return self._memory

    def _summarize_settings(self) -> str:
        args = self._memory.summarize_args()
        return args.encode() if args else ""

    async def write(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        session_id: str,
        user_id: str = "default",
        tags: Mapping[str, str] | None = None,
        agent_name: str | None = None,
        write_id: str | None = None,
    ) -> MemoryEntry:
        """Append ``messages`` as one entry (system messages skipped unless stored).

        Returns the stored entry; its ``id`` is "" when nothing was stored.
        ``write_id`` makes a retried call exactly once, as for ``Memory.write``.
        """
        outcome = await self._memory.write_entry(
            messages,
            session_id=session_id,
            user_id=user_id,
            tags=tags,
            agent_name=agent_name,
            summarize=self._summarize_settings(),
            enqueue=True,
            store_system=self._store_system,
            write_id=write_id,
        )
        return outcome.entry

    async def clear(self, *, session_id: str, user_id: str = "default") -> None:
        """Delete the session from the store."""
        await self._memory.clear(session_id=session_id, user_id=user_id)

    async def entries(self, *, session_id: str, user_id: str = "default") -> list[MemoryEntry]:
        """The session's entries, oldest first (see ``Memory.entries``)."""
        return await self._memory.entries(session_id=session_id, user_id=user_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._memory!r})"


class BufferMemory(_StoreProvider):
    """The most recent messages, within ``max_messages`` and ``max_tokens``.

    Either limit may be None (no limit); with both None a read returns the
    whole stored session. A read's ``limit`` tightens ``max_messages``.
    Tool groups are kept or cut whole, so a read may return fewer messages
    than the limits allow. Reads cost O(returned messages).
    """

    def __init__(
        self,
        memory: SessionMemory,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        *,
        store_system: bool | None = None,
    ) -> None:
        super().__init__(memory, store_system=store_system)
        self.max_messages = check_optional_int("max_messages", max_messages, minimum=1)
        self.max_tokens = check_optional_int("max_tokens", max_tokens, minimum=1)

    async def read(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        limit: int | None = None,
        query: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[Message]:
        """The newest stored messages within the limits, oldest first."""
        check_optional_str("query", query)
        count = _min_limit(self.max_messages, check_optional_int("limit", limit))
        if count == 0:
            _check_ids(session_id, user_id)
            return []
        # The store's windowed read keeps the newest messages within the limits;
        # the strategy then cuts the tool group the window boundary split.
        messages = await self._memory.read(
            session_id=session_id,
            user_id=user_id,
            limit=count,
            tags=tags,
            max_tokens=self.max_tokens,
        )
        # A system message between the cut call and its results may still lead.
        messages = drop_orphan_tool_results(messages, system="join_if_results_follow")
        strategy = _limits_strategy(count, self.max_tokens)
        if strategy is None:
            return messages
        return strategy.apply(messages, self._memory.config.tokenizer).kept


class LastTurnsMemory(_StoreProvider):
    """The most recent whole turns: at most ``max_turns``, within ``max_tokens``.

    A turn runs up to an assistant answer (see ``redismem.context.strategies.Turns``),
    so tool sequences are never split. Either limit may be None, not both.
    A read's ``limit`` then caps the messages of the kept turns, cutting whole
    tool groups. Turns have no fixed size, so a read loads the whole stored
    session: bound long sessions with the ``Memory``'s ``max_messages``, a TTL
    or summarization (``SummarizingMemory``).
    """

    def __init__(
        self,
        memory: SessionMemory,
        max_tokens: int | None = None,
        max_turns: int | None = None,
        *,
        store_system: bool | None = None,
    ) -> None:
        super().__init__(memory, store_system=store_system)
        self.max_tokens = check_optional_int("max_tokens", max_tokens, minimum=1)
        self.max_turns = check_optional_int("max_turns", max_turns, minimum=1)
        if self.max_tokens is None and self.max_turns is None:
            raise InvalidInput("LastTurnsMemory needs max_tokens, max_turns or both")

    @property
    def strategy(self) -> Turns:
        """The ``Turns`` strategy reads apply."""
        # Turns needs a turn cap; the number of messages bounds the turns.
        return Turns(self.max_turns or 2**31 - 1, self.max_tokens)

    async def read(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        limit: int | None = None,
        query: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[Message]:
        """The newest whole turns within the limits, oldest first."""
        check_optional_str("query", query)
        count = check_optional_int("limit", limit)
        if count == 0:
            _check_ids(session_id, user_id)
            return []
        messages = await self._memory.read(session_id=session_id, user_id=user_id, tags=tags)
        kept = self.strategy.apply(messages, self._memory.config.tokenizer).kept
        if count is not None:
            kept = LastMessages(count).apply(kept, self._memory.config.tokenizer).kept
        return kept


class SummarizingMemory(_StoreProvider):
    """The running summary, then the recent messages not yet summarized.

    Writes mark the session due for summarization once ``summarize_every``
    messages wait beyond the ``recent_messages`` newest ones (which are never
    summarized). Then:

    - with ``summarizer=None`` the write enqueues a job for the workers
      (``redismem worker``, or ``InProcessWorker`` for ``memory://``);
    - with a summarizer, the write summarizes inline before it returns: at
      most three passes, each one summarizer call and one atomic commit. A
      failing summarizer does not fail the write (the messages are stored): it
      is logged, the session stays marked due, and the next write to it (from
      any process) tries again. A write that does not newly mark the session
      costs one more round trip, to see whether it is still due.

    The summary is bounded: ``max_summary_tokens`` caps the summary system
    message a read returns (header included). Inline summaries are cut to fit
    when written, keeping their most recent text; summaries from the workers
    are cut at read time.

    A read returns the summary message (if any), then every stored message
    after it, oldest first: between ``recent_messages`` and about
    ``recent_messages + summarize_every`` of them once summarization keeps up.
    A read's ``limit`` caps those recent messages (whole tool groups); the
    summary comes on top. With ``tags``, the recent messages are those of the
    entries carrying all the tags.
    """

    def __init__(
        self,
        memory: SessionMemory,
        recent_messages: int,
        summarizer: Summarizer | None = None,
        summarize_every: int = 20,
        max_summary_tokens: int = 500,
        *,
        store_system: bool | None = None,
    ) -> None:
        super().__init__(memory, store_system=store_system)
        recent = check_int("recent_messages", recent_messages)
        every = check_int("summarize_every", summarize_every, minimum=1)
        budget = check_int("max_summary_tokens", max_summary_tokens, minimum=1)
        check_instance("summarizer", summarizer, Summarizer, optional=True)
        header = message_tokens(render_summary(""), self._memory.config.tokenizer)
        if budget <= header:
            raise InvalidInput(
                f"max_summary_tokens must exceed the summary header's {header} tokens"
            )
        self.recent_messages = recent
        self.summarize_every = every
        self.max_summary_tokens = budget
        self._summarizer = summarizer
        self._bounded = (
            _BoundedSummarizer(summarizer, self._summary_cost, budget)
            if summarizer is not None
            else None
        )

    @property
    def summarizer(self) -> Summarizer | None:
        return self._summarizer

    def _summary_cost(self, text: str) -> int:
        return message_tokens(render_summary(text), self._memory.config.tokenizer)

    def _summarize_settings(self) -> str:
        return SummarizeArgs(
            namespace=self._memory.layout.namespace,
            keep_recent=self.recent_messages,
            batch=self.summarize_every,
            compact=self._memory.config.compact,
        ).encode()

    async def write(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        session_id: str,
        user_id: str = "default",
        tags: Mapping[str, str] | None = None,
        agent_name: str | None = None,
        write_id: str | None = None,
    ) -> MemoryEntry:
        """Append ``messages`` as one entry, then summarize inline when due.
        ``write_id`` makes a retried call exactly once, as for ``Memory.write``."""
        outcome = await self._memory.write_entry(
            messages,
            session_id=session_id,
            user_id=user_id,
            tags=tags,
            agent_name=agent_name,
            summarize=self._summarize_settings(),
            enqueue=self._bounded is None,
            store_system=self._store_system,
            write_id=write_id,
        )
        # Marked due newly by this write, or still (an earlier pass failed or
        # was cut short, maybe in another process): the write script says which.
        entry = outcome.entry
        if self._bounded is not None and entry.id and outcome.pending:
            await self._summarize_inline(self._bounded, entry.user_id, entry.session_id)
        return entry

    async def _summarize_inline(
        self, summarizer: Summarizer, user_id: str, session_id: str
    ) -> None:
        try:
            for _ in range(_INLINE_PASSES):
                outcome = await summarize_pass(
                    self._memory.backend,
                    summarizer,
                    user_id=user_id,
                    session_id=session_id,
                    keep_recent=self.recent_messages,
                    batch=self.summarize_every,
                    compact=self._memory.config.compact,
                )
                if outcome.status in ("idle", "gone"):
                    # Nothing to summarize yet (e.g. tool results still to come):
                    # clear the mark, so the write that makes it due marks it anew.
                    await settle_pending(
                        self._memory.backend,
                        user_id=user_id,
                        session_id=session_id,
                        seq=outcome.seq,
                        gen=outcome.gen,
                    )
                    return
                if not outcome.still_pending:
                    return
        except (SummarizerError, BackendUnavailable, BackendError) as exc:
            logger.warning(
                "inline summarization of session %r failed; the messages are stored and the "
                "next write retries: %s",
                session_id,
                exc,
            )

    async def read(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        limit: int | None = None,
        query: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[Message]:
        """The summary message (if any), then the unsummarized messages."""
        check_optional_str("query", query)
        count = check_optional_int("limit", limit)
        tokenizer = self._memory.config.tokenizer
        if tags:
            # Messages first, then the summary: a summary committed in between
            # covers messages already read, which the watermark filter removes.
            recent = await self._memory.read(session_id=session_id, user_id=user_id, tags=tags)
            summary = await self._memory.summary(session_id=session_id, user_id=user_id)
            if summary is not None:
                until = int(summary.summarized_until)
                recent = [m for m in recent if m.id is None or int(m.id) > until]
                recent = drop_orphan_tool_results(recent)
        else:
            context = await self._memory.context(session_id=session_id, user_id=user_id)
            summary = context.summary
            recent = context.messages[1:] if summary is not None else context.messages
        if count is not None:
            recent = LastMessages(count).apply(recent, tokenizer).kept if count else []
        head: list[Message] = []
        if summary is not None:
            note = summary_message(summary, tokenizer, self.max_summary_tokens)
            if note is not None:
                head.append(note)
        return head + recent


@dataclass(frozen=True, slots=True)
class _BoundedSummarizer:
    """A summarizer whose output is cut, at its start, to ``budget`` tokens
    (``cost`` counts a summary message)."""

    inner: Summarizer
    cost: Callable[[str], int]
    budget: int

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        text = await self.inner.summarize(previous, messages)
        if not isinstance(text, str):
            return text
        kept = fit_text(text, self.cost, self.budget, keep="tail")
        return kept if len(kept) == len(text) else _from_a_line(kept)


def _from_a_line(text: str) -> str:
    """``text`` from its second line on, when that holds more than blanks."""
    newline = text.find("\n")
    if 0 <= newline < len(text) - 1 and text[newline + 1 :].strip():
        return text[newline + 1 :]
    return text


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
