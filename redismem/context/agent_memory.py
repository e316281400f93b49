"""``AgentMemory``: one session's memory, managed in-process and persisted in Redis.

For agent frameworks that keep the conversation in process and want it
trimmed, summarized and durable. Get one with ``Memory.agent_memory()``.

State
    The *window* (the messages kept for the model, oldest first), the running
    *summary* of the messages dropped from it, and counters. ``state()`` shows
    them; ``get_context_messages()`` is the summary (one system message) then
    the window, within ``max_context_tokens`` when set.

Adding and persisting
    ``add_message()`` and ``add_messages()`` are synchronous: they append to
    the window and never touch Redis. ``await flush()`` writes the messages
    not yet persisted as one entry (``Memory.write``), and the window then
    holds the stored copies (with ids and token counts). ``load()`` flushes,
    then replaces the window with the session's stored messages after the
    summary, and the summary with the stored one. System messages are kept in
    the window, in place, but not stored unless the ``Memory`` stores system
    messages; ``load()`` keeps them.

Managing
    ``await manage()`` applies the strategy (and, with ``max_context_tokens``,
    a ``TokenBudget`` of that size) to the window. The dropped messages are
    the oldest ones; tool groups are never split (``redismem.context.strategies``).
    Without a summarizer they leave the window only: they stay stored, and a
    later ``load()`` brings them back until a ``manage()``. With a summarizer,
    manage first flushes, then folds the dropped messages into the session's
    stored running summary (the one ``Memory.context``, ``SummarizingMemory``
    and the workers share), committing it atomically with compare-and-set
    (``redismem.summarization.job.summarize_pass``); with ``compact`` the summarized
    messages leave the store too. If other writers changed the session's
    backlog, manage reloads the window and tries again (five attempts).
    Without a strategy or ``max_context_tokens`` manage drops nothing.

    One manage runs at a time per object: a call made while one runs waits
    for it and returns its result; ``is_managing`` is True meanwhile. Messages
    added while it runs are kept. ``on_managed(result)`` is called after each
    run and ``on_manage_error(exc)`` when one fails (either may be a coroutine
    function; their own errors are logged, never raised). ``manage()`` raises
    the failure to its caller, the window and summary unchanged.

Auto-manage
    With ``auto_manage=True``, ``add_*`` starts a background manage when the
    window exceeds the strategy's limits or ``max_context_tokens`` (when an
    event loop runs), and ``flush()`` waits for it and manages again if still
    over. A failed auto-manage is reported to ``on_manage_error`` (or logged)
    and not raised. Await ``flush()`` before the event loop ends.

Sharing
    Several agents may use one session, each with its own ``AgentMemory``:
    they share the stored messages and summary; call ``load()`` to see what
    the others wrote. Agents with their own sessions are independent.

Snapshots
    ``export()`` returns plain JSON-compatible data (dicts, lists, str, int;
    message metadata and tool arguments as given) with a format version;
    ``import_()`` restores it exactly, including messages not yet flushed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ConfigDict, ValidationError

from redismem.checks import (
    check_bool,
    check_instance,
    check_int,
    check_message_list,
    check_optional_callable,
    check_optional_int,
    check_optional_str,
)
from redismem.context.quoting import summary_message
from redismem.context.strategies import MemoryStrategy, TokenBudget
from redismem.context.tokens import estimate_messages_tokens
from redismem.core.keys import validate_id
from redismem.errors import BackendError, InvalidInput, SummarizerError
from redismem.models import STORE_FIELDS, Message, Summary
from redismem.summarization.job import summarize_pass
from redismem.summarization.summarizers import Summarizer
from redismem.surface import check_memory

if TYPE_CHECKING:
    from redismem.surface import SessionMemory

__all__ = [
    "AgentMemory",
    "AgentMemoryState",
    "ManageResult",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "WindowStats",
]

logger = logging.getLogger(__name__)

SNAPSHOT_FORMAT: Final = "redismem.context.agent_memory"
SNAPSHOT_VERSION: Final = 1

_ATTEMPTS = 5
#: Most manage() runs one auto-manage makes in a row.
_AUTO_ROUNDS = 3


class WindowStats(BaseModel):
    """Size of the window: messages and estimated tokens (the summary excluded)."""

    model_config = ConfigDict(frozen=True)

    message_count: int
    estimated_tokens: int


class ManageResult(BaseModel):
    """What one ``manage()`` did.

    ``dropped`` are the messages that left the window, oldest first;
    ``summarized`` is how many of them the summary now covers (0 without a
    summarizer); ``summary`` is the running summary after the run;
    ``resynced`` is True when the window was reloaded because other writers
    had changed the session.
    """

    before: WindowStats
    after: WindowStats
    dropped: list[Message]
    summarized: int
    summary: str | None
    resynced: bool = False


class AgentMemoryState(BaseModel):
    """A view of the state: the window, the summaries, and counters.

    ``summaries`` holds the running summary (one string), or nothing before the
    first. ``total_messages_processed`` counts the session's messages this
    object knows of: the summary's, plus the window's, plus those dropped
    since the last load. ``unsaved`` is how many of the newest window
    messages ``flush()`` has not yet written.
    """

    messages: list[Message]
    summaries: list[str]
    total_messages_processed: int
    estimated_tokens: int
    unsaved: int


Callback = Callable[..., Any]


class _OutOfSync(Exception):
    """The store's backlog is not the window's dropped prefix."""


class _VerifyingSummarizer:
    """Summarizes only when the store offers exactly the expected messages,
    after exactly the expected summary."""

    def __init__(
        self, inner: Summarizer, expected: Sequence[Message], previous: str | None
    ) -> None:
        self._inner = inner
        self._expected = [m.id for m in expected]
        self._previous = previous
        self.done: list[Message] = []
        self.text: str | None = None

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        got = [m.id for m in messages]
        if previous != self._previous or not got or got != self._expected[: len(got)]:
            raise _OutOfSync
        text = await self._inner.summarize(previous, messages)
        self.done = list(messages)
        self.text = text
        return text


def _to_message(item: object, position: int) -> Message:
    """A fresh copy of ``item`` without the fields the store fills."""
    if isinstance(item, Message):
        data: Mapping[str, Any] = item.model_dump(exclude=set(STORE_FIELDS))
    elif isinstance(item, Mapping):
        data = {k: v for k, v in item.items() if k not in STORE_FIELDS}
    else:
        raise InvalidInput(
            f"messages[{position}] must be a Message or a dict, not {type(item).__name__}"
        )
    try:
        return Message.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"messages[{position}] is invalid: {exc}") from exc


def _carry_local(old: Sequence[Message], stored: Sequence[Message]) -> list[Message]:
    """``stored`` with the unstored (id-less) messages of ``old`` put back in place.

    An unstored message goes right before the stored message that followed
    it; if that one is no longer stored (summarized or trimmed), at the front.
    """
    anchored: dict[str, list[Message]] = {}
    waiting: list[Message] = []
    for message in old:
        if message.id is None:
            waiting.append(message)
        elif waiting:
            anchored.setdefault(message.id, []).extend(waiting)
            waiting = []
    present = {m.id for m in stored}
    out = [m for anchor, group in anchored.items() if anchor not in present for m in group]
    for message in stored:
        out.extend(anchored.get(message.id or "", []))
        out.append(message)
    return out + waiting


def _snapshot_count(snapshot: Mapping[str, Any], name: str) -> int:
    return check_int(f"snapshot[{name!r}]", snapshot.get(name))


def _dump_message(message: Message) -> dict[str, Any]:
    data = message.model_dump(mode="json")
    return {k: v for k, v in data.items() if v is not None}


async def _notify(callback: Callback | None, argument: object, name: str) -> None:
    if callback is None:
        return
    try:
        outcome = callback(argument)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        logger.exception("the %s callback raised", name)


class AgentMemory:
    """One session's memory for one agent process (see the module docstring)."""

    def __init__(
        self,
        memory: SessionMemory,
        session_id: str,
        user_id: str = "default",
        *,
        strategy: MemoryStrategy | None = None,
        summarizer: Summarizer | None = None,
        auto_manage: bool = False,
        max_context_tokens: int | None = None,
        on_managed: Callable[[ManageResult], Any] | None = None,
        on_manage_error: Callable[[BaseException], Any] | None = None,
        agent_name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self._memory = check_memory(memory)
        check_instance("strategy", strategy, MemoryStrategy, optional=True)
        check_instance("summarizer", summarizer, Summarizer, optional=True)
        self._auto_manage = check_bool("auto_manage", auto_manage)
        self._max_context_tokens = check_optional_int(
            "max_context_tokens", max_context_tokens, minimum=1
        )
        self._agent_name = check_optional_str("agent_name", agent_name)
        self._session_id = validate_id(session_id, "session_id")
        self._user_id = validate_id(user_id, "user_id")
        self._strategy = strategy
        self._summarizer = summarizer
        self._on_managed = check_optional_callable("on_managed", on_managed)
        self._on_manage_error = check_optional_callable("on_manage_error", on_manage_error)
        self._tags = dict(tags) if tags is not None else None
        self._window: list[Message] = []
        self._summary: Summary | None = None
        self._unsaved = 0
        self._processed = 0
        self._generation = 0
        self._lock = asyncio.Lock()
        self._inflight: asyncio.Future[ManageResult] | None = None
        self._auto_task: asyncio.Task[None] | None = None

    # -- properties ----------------------------------------------------------

    @property
    def memory(self) -> SessionMemory:
        return self._memory

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def user_id(self) -> str:
        return self._user_id

    @property
    def strategy(self) -> MemoryStrategy | None:
        return self._strategy

    @property
    def summarizer(self) -> Summarizer | None:
        return self._summarizer

    @property
    def max_context_tokens(self) -> int | None:
        return self._max_context_tokens

    @property
    def is_managing(self) -> bool:
        """True while a ``manage()`` runs."""
        return self._inflight is not None

    @property
    def summary(self) -> Summary | None:
        """The running summary as last loaded or committed."""
        return self._summary

    def __repr__(self) -> str:
        return (
            f"AgentMemory(session_id={self._session_id!r}, user_id={self._user_id!r}, "
            f"messages={len(self._window)}, unsaved={self._unsaved})"
        )

    # -- in-process state -------------------------------------------------------

    def _tokens(self, messages: Iterable[Message]) -> int:
        return estimate_messages_tokens(messages, self._memory.config.tokenizer)

    def _stats(self, messages: Sequence[Message]) -> WindowStats:
        return WindowStats(message_count=len(messages), estimated_tokens=self._tokens(messages))

    def add_message(self, message: Message | Mapping[str, Any]) -> None:
        """Append one message to the window (persisted by ``flush()``)."""
        self.add_messages([message])

    def add_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> None:
        """Append messages to the window, oldest first (persisted by ``flush()``).

        All are validated first: on ``InvalidInput`` nothing is added. The
        window holds copies without the store's fields (id, created_at,
        token_count).
        """
        check_message_list(messages)
        copies = [_to_message(item, i) for i, item in enumerate(messages)]
        self._window.extend(copies)
        self._unsaved += len(copies)
        self._processed += len(copies)
        if copies and self._auto_manage and self._over_limits():
            self._schedule_auto()

    def _apply(self, window: Sequence[Message]) -> tuple[list[Message], list[Message]]:
        """Kept and dropped messages of ``window``, each in window order."""
        tokenizer = self._memory.config.tokenizer
        kept = list(window)
        if self._strategy is not None:
            kept = self._strategy.apply(kept, tokenizer).kept
        if self._max_context_tokens is not None:
            kept = TokenBudget(self._max_context_tokens).apply(kept, tokenizer).kept
        keep = {id(m) for m in kept}
        return kept, [m for m in window if id(m) not in keep]

    def _over_limits(self) -> bool:
        if self._strategy is None and self._max_context_tokens is None:
            return False
        return bool(self._apply(self._window)[1])

    def get_context_messages(self) -> list[Message]:
        """The summary (a system message) then the window, for the model.

        With ``max_context_tokens`` the result fits it: the summary takes up
        to half when the window needs the rest (it is cut to fit), and the
        newest whole tool groups of the window that fit follow.
        """
        tokenizer = self._memory.config.tokenizer
        window = list(self._window)
        budget = self._max_context_tokens
        head: list[Message] = []
        used = 0
        if self._summary is not None:
            share = -1
            if budget is not None:
                share = max(budget // 2, budget - self._tokens(window))
            note = summary_message(self._summary, tokenizer, share)
            if note is not None:
                head.append(note)
                used = note.token_count or 0
        if budget is not None:
            room = budget - used
            window = TokenBudget(room).apply(window, tokenizer).kept if room > 0 else []
        return head + window

    def state(self) -> AgentMemoryState:
        """A snapshot of the state (the messages are the window's own objects)."""
        return AgentMemoryState(
            messages=list(self._window),
            summaries=[self._summary.text] if self._summary is not None else [],
            total_messages_processed=self._processed,
            estimated_tokens=self._tokens(self._window),
            unsaved=self._unsaved,
        )

    # -- snapshots ---------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        """The state as versioned, JSON-compatible plain data."""
        summary = None
        if self._summary is not None:
            summary = {
                "text": self._summary.text,
                "message_count": self._summary.message_count,
                "summarized_until": self._summary.summarized_until,
                "updated_at": self._summary.model_dump(mode="json")["updated_at"],
            }
        return {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "session_id": self._session_id,
            "user_id": self._user_id,
            "messages": [_dump_message(m) for m in self._window],
            "unsaved": self._unsaved,
            "summary": summary,
            "total_messages_processed": self._processed,
        }

    def import_(self, snapshot: Mapping[str, Any]) -> None:
        """Replace the state with an ``export()`` of this session.

        Restores the window (messages not yet flushed stay unsaved), the
        summary and the counters; writes nothing. Raises ``InvalidInput`` for
        another session's snapshot or a malformed one (the state unchanged).
        """
        if not isinstance(snapshot, Mapping):
            raise InvalidInput("snapshot must be a dict from export()")
        if snapshot.get("format") != SNAPSHOT_FORMAT:
            raise InvalidInput(f"not an AgentMemory snapshot (format {snapshot.get('format')!r})")
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise InvalidInput(
                f"unsupported snapshot version {snapshot.get('version')!r}; "
                f"this redismem reads version {SNAPSHOT_VERSION}"
            )
        if (snapshot.get("session_id"), snapshot.get("user_id")) != (
            self._session_id,
            self._user_id,
        ):
            raise InvalidInput(
                f"the snapshot is of session {snapshot.get('session_id')!r} of user "
                f"{snapshot.get('user_id')!r}, not {self._session_id!r} of {self._user_id!r}"
            )
        raw_messages = snapshot.get("messages")
        if not isinstance(raw_messages, list):
            raise InvalidInput("snapshot['messages'] must be a list")
        messages = []
        for i, item in enumerate(raw_messages):
            try:
                messages.append(Message.model_validate(item))
            except ValidationError as exc:
                raise InvalidInput(f"snapshot message {i} is invalid: {exc}") from exc
        unsaved = _snapshot_count(snapshot, "unsaved")
        processed = _snapshot_count(snapshot, "total_messages_processed")
        if unsaved > len(messages):
            raise InvalidInput("snapshot['unsaved'] exceeds the number of messages")
        raw_summary = snapshot.get("summary")
        summary = None
        if raw_summary is not None:
            try:
                summary = Summary.model_validate(raw_summary)
            except ValidationError as exc:
                raise InvalidInput(f"snapshot['summary'] is invalid: {exc}") from exc
        self._window = messages
        self._unsaved = unsaved
        self._processed = processed
        self._summary = summary
        self._generation += 1

    # -- persistence ---------------------------------------------------------------

    async def _flush_locked(self) -> None:
        count = self._unsaved
        if count == 0:
            return
        start = len(self._window) - count
        pending = self._window[start:]
        entry = await self._memory.write(
            pending,
            session_id=self._session_id,
            user_id=self._user_id,
            tags=self._tags,
            agent_name=self._agent_name,
        )
        current = self._window[start : start + count]
        if len(current) != count or any(a is not b for a, b in zip(current, pending, strict=True)):
            return  # the state was replaced (import_) during the write
        stored = iter(entry.messages)
        store_system = self._memory.config.store_system_messages
        self._window[start : start + count] = [
            next(stored, m) if m.role != "system" or store_system else m for m in pending
        ]
        self._unsaved = len(self._window) - (start + count)

    async def _reload_locked(self) -> None:
        context = await self._memory.context(session_id=self._session_id, user_id=self._user_id)
        summary = context.summary
        stored = context.messages[1:] if summary is not None else context.messages
        self._summary = summary
        self._set_window(_carry_local(self._window, stored))
        self._processed = (summary.message_count if summary else 0) + len(self._window)

    def _set_window(self, window: list[Message]) -> None:
        """Replace the window; the unsaved messages in it stay unsaved."""
        tail = self._window[len(self._window) - self._unsaved :] if self._unsaved else []
        unsaved = {id(m) for m in tail}
        self._window = window
        self._unsaved = sum(1 for m in window if id(m) in unsaved)

    async def flush(self) -> None:
        """Write the messages not yet persisted (one entry); then, with
        ``auto_manage``, manage if the window is over its limits."""
        await self._settle()
        async with self._lock:
            await self._flush_locked()
        if self._auto_manage:
            await self._auto_loop()

    async def load(self) -> None:
        """Flush, then load the stored summary and the messages after it."""
        await self._settle()
        async with self._lock:
            await self._flush_locked()
            await self._reload_locked()
            self._generation += 1

    async def clear(self) -> None:
        """Forget everything: the in-process state and the stored session."""
        await self._settle()
        async with self._lock:
            await self._memory.clear(session_id=self._session_id, user_id=self._user_id)
            self._window = []
            self._summary = None
            self._unsaved = 0
            self._processed = 0
            self._generation += 1

    # -- managing ---------------------------------------------------------------------

    async def manage(self) -> ManageResult:
        """Apply the strategy to the window (see the module docstring)."""
        if self._inflight is not None:
            return await asyncio.shield(self._inflight)
        future: asyncio.Future[ManageResult] = asyncio.get_running_loop().create_future()
        self._inflight = future
        try:
            async with self._lock:
                result = await self._manage_locked()
        except BaseException as exc:
            self._inflight = None
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
                raise
            future.set_exception(exc)
            future.exception()  # retrieved: waiters, if any, get it too
            if isinstance(exc, Exception):
                await _notify(self._on_manage_error, exc, "on_manage_error")
            raise
        self._inflight = None
        future.set_result(result)
        await _notify(self._on_managed, result, "on_managed")
        return result

    async def _manage_locked(self) -> ManageResult:
        generation = self._generation
        before = self._stats(self._window)
        await self._flush_locked()
        resynced = False
        for _ in range(_ATTEMPTS):
            base = list(self._window)
            kept, dropped = self._apply(base)
            if not dropped:
                return self._result(before, [], 0, resynced)
            summarized = 0
            if self._summarizer is not None:
                # The oldest run of dropped messages: the store's backlog.
                run = 0
                while run < len(dropped) and base[run] is dropped[run]:
                    run += 1
                stored = [m for m in base[:run] if m.id is not None]
                if stored:
                    outcome = await self._commit_summary(self._summarizer, stored)
                    if outcome is None:
                        await self._reload_locked()
                        resynced = True
                        continue
                    summarized = outcome
            if self._generation == generation:
                self._set_window(kept + self._window[len(base) :])
            return self._result(before, dropped, summarized, resynced)
        raise BackendError(
            f"manage() could not commit the summary of session {self._session_id!r}: "
            f"other writers changed it {_ATTEMPTS} times in a row; try again"
        )

    async def _commit_summary(self, summarizer: Summarizer, stored: list[Message]) -> int | None:
        """Fold ``stored`` (the oldest messages after the summary) into it.

        Returns how many messages the summary now covers in addition, or None
        when the store's summary or backlog is not what the window assumes
        (other writers, or a summary this object has not loaded).
        """
        previous_text = self._summary.text if self._summary is not None else None
        verifier = _VerifyingSummarizer(summarizer, stored, previous_text)
        try:
            outcome = await summarize_pass(
                self._memory.backend,
                verifier,
                user_id=self._user_id,
                session_id=self._session_id,
                keep_recent=0,
                batch=self._memory.config.summarize_batch,
                compact=self._memory.config.compact,
                cap=len(stored),
            )
        except SummarizerError as exc:
            if isinstance(exc.__cause__, _OutOfSync):
                return None
            raise
        if outcome.status != "committed" or verifier.text is None:
            return None
        done = verifier.done
        previous = self._summary.message_count if self._summary else 0
        self._summary = Summary(
            text=verifier.text,
            message_count=previous + len(done),
            summarized_until=done[-1].id or "0",
            updated_at=datetime.now(UTC),
        )
        return len(done)

    def _result(
        self, before: WindowStats, dropped: list[Message], summarized: int, resynced: bool
    ) -> ManageResult:
        return ManageResult(
            before=before,
            after=self._stats(self._window),
            dropped=dropped,
            summarized=summarized,
            summary=self._summary.text if self._summary else None,
            resynced=resynced,
        )

    # -- auto-manage ------------------------------------------------------------------

    def _schedule_auto(self) -> None:
        if self._auto_task is not None and not self._auto_task.done():
            return  # the running loop re-checks the limits when it finishes
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop: flush() manages
        self._auto_task = loop.create_task(self._auto_loop())

    async def _auto_loop(self) -> None:
        for _ in range(_AUTO_ROUNDS):
            if not self._over_limits():
                return
            try:
                result = await self.manage()
            except Exception as exc:  # reported to on_manage_error by manage()
                if self._on_manage_error is None:
                    logger.warning(
                        "auto-manage of session %r failed: %r", self._session_id, exc, exc_info=exc
                    )
                return
            if not result.dropped:
                return

    async def _settle(self) -> None:
        """Wait for a background manage to finish."""
        task = self._auto_task
        if task is not None and task is not asyncio.current_task():
            await asyncio.shield(task)
