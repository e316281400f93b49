"""``Memory``: the asyncio client agents use to write and read shared memory.

Every write is one Lua script call: messages, entry record, counters, tag
index, trimming and TTLs land together or not at all, and concurrent writers
to one session are serialized by Redis, so nothing is lost or duplicated and
the order of messages is the commit order. Reads of the last N messages cost
O(N) whatever the session length.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
import warnings
from collections.abc import (
    Awaitable,
    Callable,
    Iterable,
    Mapping,
)
from datetime import UTC, datetime
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Self,
    TypeVar,
    cast,
    overload,
)

from pydantic import ValidationError

from redismem import metrics
from redismem.checks import check_count as _check_count
from redismem.checks import check_message_list, check_optional_str, check_time_ms, new_write_id
from redismem.checks import check_tags as _check_tags
from redismem.checks import check_write_id as _check_write_id
from redismem.config import MemoryConfig
from redismem.context import builder
from redismem.context.agent_memory import AgentMemory
from redismem.context.quoting import SUMMARY_LABEL as SUMMARY_LABEL  # still importable from here
from redismem.context.quoting import summary_message
from redismem.context.strategies import MemoryStrategy
from redismem.context.tokens import estimate_tokens, message_tokens
from redismem.context.toolgroups import drop_orphan_tool_results
from redismem.core import codec, guard
from redismem.core.backend import Backend
from redismem.core.connection import describe_url, open_redis
from redismem.core.epochs import EpochMoved, in_epoch
from redismem.core.keys import KeyLayout, SessionKeys, grave_suffix, tag_index_prefix, validate_id
from redismem.core.queue import SummarizeArgs, SummaryQueue
from redismem.core.scripts import WriteResult
from redismem.errors import (
    BackendUnavailable,
    ClientClosed,
    CorruptData,
    InvalidInput,
    RedisMemError,
)
from redismem.models import (
    INPUT_FIELDS,
    STORE_FIELDS,
    Context,
    EntryMetadata,
    MemoryEntry,
    Message,
    SessionInfo,
    Summary,
    input_message,
    stamp_written,
    written_entry,
)
from redismem.recall import index as recall
from redismem.recall import purge
from redismem.surface import WriteOutcome

if TYPE_CHECKING:
    from redismem.longterm.memories import Knowledge
    from redismem.longterm.store import LongTermStore
    from redismem.workers.presence import WorkerPresence, Workers

__all__ = ["Memory", "WriteOutcome", "new_write_id"]

logger = logging.getLogger(__name__)
#: Checked (session id, user id) pairs each client remembers with their keys.
_RECENT_KEYS = 4096
#: Seconds ``aclose`` waits for enqueues still running in the background.
_ENQUEUE_GRACE = 5.0

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


def _matches(tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(tags.get(k) == v for k, v in wanted.items())


#: The calls a ``Memory`` times when it is made with the metrics on: name ->
#: (operation, what a success counts) (see ``redismem.metrics.instrument``).
_MEASURED: dict[str, tuple[str, metrics.Counted | None]] = {
    "write_entry": ("write", "writes"),
    "read": ("read", "reads"),
    "summary": ("summary", "reads"),
    "context": ("context", "reads"),
    "entries": ("entries", "reads"),
    "sessions": ("sessions", None),
    "search": ("search", "searches"),
    "flush": ("flush", None),
    "clear": ("clear", None),
    "clear_user": ("clear_user", None),
}

#: What moved from ``Memory`` to its ``Backend`` (deprecated names on ``Memory``).
_MOVED_TO_BACKEND = frozenset({"call", "atomic", "scripts", "epochs", "in_session"})


class _MadeWithSelf(Generic[P, R]):
    """A method that is ``factory(memory, ...)``: its signature and docs are
    the factory's, written once, in the factory's module."""

    def __init__(self, factory: Callable[Concatenate[Any, P], R]) -> None:
        self._factory = factory
        self.__doc__ = factory.__doc__

    def _first(self, memory: Memory) -> Any:
        return memory

    @overload
    def __get__(self, memory: None, owner: type[Memory]) -> Self: ...

    @overload
    def __get__(self, memory: Memory, owner: type[Memory]) -> Callable[P, R]: ...

    def __get__(self, memory: Memory | None, owner: type[Memory]) -> Self | Callable[P, R]:
        if memory is None:
            return self
        bound = functools.partial(self._factory, self._first(memory))
        # Named and documented as the factory; its signature is the partial's
        # (without the bound first argument), so no __wrapped__.
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(bound, name, getattr(self._factory, name, None))
        made: Callable[P, R] = bound
        return made


class _MadeWithBackend(_MadeWithSelf[P, R]):
    """``factory(memory.backend, ...)``, for a feature built on the core."""

    def _first(self, memory: Memory) -> Any:
        return memory.backend


class Memory:
    """Shared conversation memory on Redis. Create it with ``await Memory.connect()``."""

    def __init__(self, config: MemoryConfig, redis: Any) -> None:
        self._backend = Backend(config, redis)
        self._config = config
        self._scripts = self._backend.scripts
        self._closed = False
        #: Enqueues running in the background (see ``_enqueue_later``).
        self._enqueueing: set[asyncio.Task[None]] = set()
        self._recent_keys: dict[tuple[str, str], tuple[str, str, SessionKeys]] = {}
        self._store: LongTermStore | None = None
        self._memories: Knowledge | None = None
        #: Whether the queue has a live worker (made on first use).
        self._presence: WorkerPresence | None = None
        args = self.summarize_args()
        self._summarize_settings = args.encode() if args else ""
        #: The write script's recall argument: None = indexing off, 0 = keep forever.
        self._recall_ttl_arg = (config.recall_ttl_ms or 0) if config.index else None
        metrics.instrument(self, _MEASURED)

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    async def connect(cls, url: str | None = None, **options: Any) -> Memory:
        """Connect to ``url``, else ``$REDISMEM_URL``, else the embedded ``memory://``.

        Raises ``BackendUnavailable`` when Redis cannot be reached after retries,
        ``BackendError`` when it refuses the credentials, ``InvalidInput`` for
        unknown or invalid options.
        """
        unknown = set(options) - MemoryConfig.option_names() - {"url"}
        if unknown:
            raise InvalidInput(f"unknown option(s): {', '.join(sorted(unknown))}")
        if url is not None:
            options["url"] = url
        try:
            config = MemoryConfig.from_env(**options)
        except TypeError as exc:
            raise InvalidInput(str(exc)) from exc
        redis = open_redis(config.url, connect_timeout=config.connect_timeout)
        memory = cls(config, redis)
        try:
            await memory.ping()
        except BaseException:
            await memory.aclose()
            raise
        return memory

    async def aclose(self) -> None:
        """Close the connection pool. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._enqueueing:
            # Let the background enqueues finish (bounded); the sweep picks up
            # a session whose job did not make it.
            _done, left = await asyncio.wait(set(self._enqueueing), timeout=_ENQUEUE_GRACE)
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
        await self._backend.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def layout(self) -> KeyLayout:
        return self._config.layout

    @property
    def closed(self) -> bool:
        """Whether ``aclose()`` ran."""
        return self._closed

    @property
    def backend(self) -> Backend:
        """The Redis side the features share: connections, retry policy,
        scripts, key layout (see ``redismem.core.backend``)."""
        return self._backend

    @property
    def redis(self) -> Any:
        """The underlying redis-py client (for operators and tests). Its calls
        are not bounded, retried or mapped."""
        self._check_open()
        return self._backend.redis

    @property
    def store(self) -> LongTermStore:
        """The namespaced long-term store (see ``redismem.longterm.store``)."""
        self._check_open()
        if self._store is None:
            from redismem.longterm.store import LongTermStore

            self._store = LongTermStore(self._backend)
        return self._store

    @property
    def memories(self) -> Knowledge:
        """The users' typed long-term memories: facts, documents, goals...
        (see ``redismem.longterm.memories``)."""
        self._check_open()
        if self._memories is None:
            from redismem.longterm.memories import Knowledge

            self._memories = Knowledge(self._backend, store=self.store)
        return self._memories

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("this Memory was closed with aclose()")

    async def ping(self) -> None:
        await self._backend.ping()

    if not TYPE_CHECKING:  # mypy keeps checking attribute names on Memory

        def __getattr__(self, name: str) -> Any:
            """The core's calls that ``Memory`` offered before ``Backend`` held
            them (``call``, ``atomic``, ``scripts``, ``epochs``, ``in_session``):
            still there for one release, with a ``DeprecationWarning``."""
            if name in _MOVED_TO_BACKEND and "_backend" in self.__dict__:
                warnings.warn(
                    f"Memory.{name} is now Memory.backend.{name}; "
                    "the old name goes away in the next release",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(self._backend, name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        return (
            f"Memory(url={describe_url(self._config.url)!r}, namespace={self.layout.namespace!r})"
        )

    # -- helpers -----------------------------------------------------------

    def _keys(self, session_id: object, user_id: object) -> tuple[str, str, SessionKeys]:
        """The checked ids and the session's keys in the user's epoch as last
        seen; the ids of recent calls are remembered (a hit means these exact
        ``str`` values passed)."""
        if type(session_id) is str and type(user_id) is str:
            known = self._recent_keys.get((session_id, user_id))
            if known is not None and known[2].epoch == self._backend.epochs.get(user_id):
                return known
        sid = validate_id(session_id, "session_id")
        uid = validate_id(user_id, "user_id")
        found = (sid, uid, self.layout.session(uid, sid, self._backend.epochs.get(uid)))
        if type(session_id) is str and type(user_id) is str:
            if len(self._recent_keys) >= _RECENT_KEYS:
                self._recent_keys.clear()
            self._recent_keys[sid, uid] = found
        return found

    def _refresh_ttl_arg(self) -> int:
        if not self._config.refresh_ttl_on_read:
            return -1
        return self._config.ttl_ms or 0

    def _normalize(self, messages: object) -> list[Message]:
        check_message_list(messages)
        out: list[Message] = []
        for i, item in enumerate(cast(Iterable[Any], messages)):
            try:
                if type(item) is dict or isinstance(item, Mapping):  # type(): no ABC check
                    message = input_message(item)
                elif isinstance(item, Message):
                    # Validated again: a model's fields can be assigned anything.
                    fields = item.__dict__
                    calls, metadata = fields["tool_calls"], fields["metadata"]
                    if (
                        type(item) is Message
                        and (type(calls) is list and not calls)
                        and (type(metadata) is dict and not metadata)
                    ):
                        message = input_message({k: fields[k] for k in INPUT_FIELDS})
                    else:  # copies of the nested values, as model_dump makes them
                        message = Message.model_validate(item.model_dump(exclude=set(STORE_FIELDS)))
                else:
                    raise InvalidInput(
                        f"messages[{i}] must be a Message or a dict, not {type(item).__name__}"
                    )
            except ValidationError as exc:
                raise InvalidInput(f"messages[{i}] is invalid: {exc}") from exc
            out.append(message)
        return out

    def _checked_tokenizer(self, text: str) -> int:
        count = self._config.tokenizer(text)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidInput(f"the tokenizer must return an int >= 0, got {count!r}")
        return count

    def _count_tokens(self, message: Message) -> int:
        if self._config.tokenizer is estimate_tokens:  # always an int >= 0
            return message_tokens(message)
        try:
            count = message_tokens(message, self._checked_tokenizer)
        except InvalidInput:
            raise
        except Exception as exc:
            raise InvalidInput(f"the tokenizer failed: {exc!r}") from exc
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidInput(f"the tokenizer must return an int >= 0, got {count!r}")
        return count

    async def _call_hook(
        self, name: str, session_id: str, user_id: str, messages: list[Message]
    ) -> None:
        hook = getattr(self._config, name)
        if hook is None:
            return
        try:
            result = hook(session_id=session_id, user_id=user_id, messages=messages)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("%s hook raised; the %s itself succeeded", name, name[3:])

    # -- writes ------------------------------------------------------------

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
    ) -> MemoryEntry:
        """Append ``messages`` to a session as one entry, atomically.

        System messages are skipped unless ``store_system_messages``. Returns
        the entry with store-filled ids, timestamps and token counts.

        The entry's time is the server's clock, or ``created_at`` (aware) for
        a write that records what was said earlier, e.g. importing history:
        reads, ``entries`` and ``search`` (its date words and ``since`` /
        ``until``) then see that time, kept to the millisecond; a time after
        the server's clock counts as now. TTLs still run from now.

        Exactly once: a write is stored once however often its command is
        re-sent. ``write_id`` (default: a fresh unique id) names the write;
        calling ``write`` again with the same id and session returns the first
        result and stores nothing more. A write that raised
        ``BackendUnavailable`` may still land later: retry it with
        ``write_id=exc.write_id`` (see the README's retry recipe).
        """
        outcome = await self.write_entry(
            messages,
            session_id=session_id,
            user_id=user_id,
            tags=tags,
            agent_name=agent_name,
            write_id=write_id,
            created_at=created_at,
            summarize=self._summarize_settings,
            enqueue=True,
        )
        return outcome.entry

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
    ) -> WriteOutcome:
        """``write`` with the summarization settings (``SummarizeArgs.encode()``,
        "" for none), the enqueueing and the system-message rule chosen by the
        caller (internal API of the providers and adapters); ``ttl_ms``: the
        session's expiry in ms instead of the client's ``ttl`` (0: none)."""
        sid, uid, keys = self._keys(session_id, user_id)
        wid = _check_write_id(write_id)
        tag_map = _check_tags(tags)
        check_optional_str("agent_name", agent_name)
        created_ms = check_time_ms(created_at, "created_at")
        if created_ms is not None and created_ms < 0:
            raise InvalidInput("created_at must not be before 1970")
        incoming = self._normalize(messages)
        if not incoming:
            raise InvalidInput("messages must not be empty")
        if store_system is None:
            store_system = self._config.store_system_messages
        to_store = [m for m in incoming if m.role != "system" or store_system]
        if not to_store:
            empty = MemoryEntry(
                id="",
                session_id=sid,
                user_id=uid,
                messages=[],
                metadata=EntryMetadata(
                    created_at=datetime.now(UTC), agent_name=agent_name, tags=tag_map
                ),
            )
            return WriteOutcome(empty, 0, False)
        counts = []
        encoded = []
        max_bytes = self._config.max_message_bytes
        for i, message in enumerate(to_store):
            count = self._count_tokens(message)
            blob = codec.encode_message(message, count)
            if len(blob) > max_bytes:
                raise InvalidInput(
                    f"message {i} is {len(blob)} bytes stored; max_message_bytes is {max_bytes}"
                )
            counts.append(count)
            encoded.append(blob)
        total = sum(counts)
        self._check_open()
        tail = codec.encode_entry_tail(len(encoded), total, agent_name, tag_map)

        def send(keys: SessionKeys) -> Awaitable[WriteResult]:
            return self._scripts.write(
                keys,
                session_id=sid,
                write_id=wid,
                ttl_ms=(self._config.ttl_ms or 0) if ttl_ms is None else ttl_ms,
                max_messages=self._config.max_messages or 0,
                entry_tail=tail,
                token_count=total,
                summarize=summarize,
                recall_ttl_ms=self._recall_ttl_arg,
                tags=tag_map,
                messages=encoded,
                created_ms=created_ms,
            )

        call = send(keys)
        # Sent (see ScriptRunner.write): build the result while Redis runs it.
        # The messages are this call's own copies (made by _normalize).
        entry = written_entry(sid, uid, to_store, counts, agent_name, tag_map)
        try:
            try:
                result = await call
            except EpochMoved as moved:
                # The user was cleared since this client last looked: the
                # write lands in the new epoch (after the clear).
                self._backend.epochs.set(uid, moved.current)
                result = await self._backend.in_session(uid, sid, send)
        except BackendUnavailable as exc:
            exc.write_id = wid
            exc.add_note(f"the write may still land: retry it with write_id={wid!r}")
            raise
        first_seq, pending_since = result.first_seq, result.pending_since
        ids = [codec.message_id(first_seq + i) for i in range(len(to_store))]
        stamp_written(entry, ids, codec.ms_to_datetime(result.created_ms))
        if pending_since and enqueue:
            self._enqueue_later(uid, sid, pending_since, summarize)
        if not result.duplicate and self._config.on_write is not None:
            await self._call_hook("on_write", sid, uid, to_store)
        return WriteOutcome(entry, pending_since, result.pending)

    def summarize_args(self) -> SummarizeArgs | None:
        """The settings a summarization job runs with, or None when summarization is off."""
        if self._config.keep_recent is None:
            return None
        return SummarizeArgs(
            namespace=self.layout.namespace,
            keep_recent=self._config.keep_recent,
            batch=self._config.summarize_batch,
            compact=self._config.compact,
        )

    def _enqueue_later(self, uid: str, sid: str, episode: int, settings: str) -> None:
        """Enqueue the session's job in the background: a write never waits
        on the queue. Should it never reach the queue (the process ends, the
        queue is away), the session stays marked pending and the workers'
        reconcile sweep enqueues it."""
        task = asyncio.get_running_loop().create_task(
            self._enqueue_summary(uid, sid, episode, settings)
        )
        self._enqueueing.add(task)
        task.add_done_callback(self._enqueueing.discard)

    async def _enqueue_summary(self, uid: str, sid: str, episode: int, settings: str) -> None:
        namespace = self.layout.namespace
        args = SummarizeArgs.decode_optional(namespace, settings)
        try:
            await self.queue.enqueue(uid, sid, episode, namespace, args)
        except RedisMemError as exc:
            # The write has landed and the session is marked pending: the
            # workers' reconcile sweep will enqueue it. The write must not fail.
            logger.warning(
                "could not enqueue summarization of %r (%s); the sweep will pick it up", sid, exc
            )
            return
        except Exception:
            logger.exception(
                "enqueueing summarization of %r failed; the sweep will pick it up", sid
            )
            return
        if not self._config.embedded:  # whose workers run in this process
            # Here, in the enqueue's background task, never on the write's
            # path; a look at the queue's workers at most every CHECK_EVERY_S.
            await (await self._worker_presence()).check()

    # -- reads -------------------------------------------------------------

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
    ) -> list[Message]:
        """The session's messages, oldest first.

        ``limit`` keeps the most recent N; ``tags`` keeps messages of entries
        carrying all the given pairs; ``max_tokens`` keeps the most recent
        messages that fit the budget. The result never begins with a tool
        result whose assistant tool call was cut off, unless ``keep_orphans``
        (then every message read is returned: the adapters, whose reads return
        exactly what their framework stored). ``refresh_ttl=False`` leaves the
        session's expiry as it is (the adapters keep their framework's retention).
        """
        refresh = self._refresh_ttl_arg() if refresh_ttl else -1
        sid, uid, keys = self._keys(session_id, user_id)
        limit_arg = _check_count("limit", limit)
        budget = _check_count("max_tokens", max_tokens)
        wanted = _check_tags(tags)
        if wanted:
            messages = await self._backend.in_session(
                uid, sid, lambda k: self._read_tagged(sid, k, wanted, limit_arg, budget)
            )
        else:
            self._check_open()

            async def read(keys: SessionKeys) -> list[Message]:
                if budget < 0:
                    result = await self._scripts.read_tail(
                        keys, session_id=sid, limit=limit_arg, refresh_ttl=refresh
                    )
                else:
                    result = await self._scripts.read(
                        keys,
                        session_id=sid,
                        limit=limit_arg,
                        max_tokens=budget,
                        refresh_ttl=refresh,
                        with_summary=False,
                    )
                first = result.first_seq
                created = codec.parse_covering(result.covering, keys.entries, first)
                return codec.decode_messages(result.messages, first, created, keys.msgs)

            try:
                messages = await read(keys)
            except EpochMoved as moved:
                self._backend.epochs.set(uid, moved.current)
                messages = await self._backend.in_session(uid, sid, read)
        if not keep_orphans:
            messages = drop_orphan_tool_results(messages)
        if self._config.on_read is not None:
            await self._call_hook("on_read", sid, uid, messages)
        return messages

    async def summary(self, *, session_id: str, user_id: str = "default") -> Summary | None:
        """The session's running summary, or None before the first one."""
        context = await self._read_context(session_id, user_id, 0)
        return context[0]

    async def _read_context(
        self, session_id: str, user_id: str, budget: int
    ) -> tuple[Summary | None, list[Message]]:
        sid, uid, _keys = self._keys(session_id, user_id)
        self._check_open()

        async def read(keys: SessionKeys) -> tuple[Summary | None, list[Message]]:
            result = await self._scripts.read(
                keys,
                session_id=sid,
                limit=0 if budget == 0 else -1,
                max_tokens=budget if budget > 0 else -1,
                refresh_ttl=self._refresh_ttl_arg(),
                with_summary=True,
            )
            summary = (
                Summary.model_validate(codec.decode_summary(result.summary, keys.summary))
                if result.summary
                else None
            )
            created = codec.parse_covering(result.covering, keys.entries)
            messages = codec.decode_messages(result.messages, result.first_seq, created, keys.msgs)
            return summary, messages

        return await self._backend.in_session(uid, sid, read)

    async def context(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        max_tokens: int | None = None,
        strategy: MemoryStrategy | None = None,
    ) -> Context:
        """The summary (as a system message) then the recent, unsummarized
        messages, within ``max_tokens`` when given. The summary is cut to the
        budget if it alone does not fit; the history never begins with an
        orphaned tool result. A ``strategy`` (``LastMessages``, ``TokenBudget``,
        ``Hybrid``, ``Turns``) chooses among the recent messages first."""
        if strategy is not None and not isinstance(strategy, MemoryStrategy):
            raise InvalidInput("strategy must be a MemoryStrategy such as LastMessages")
        budget = _check_count("max_tokens", max_tokens)
        summary, recent = await self._read_context(
            session_id, user_id, budget if budget > 0 else -1
        )
        if budget == 0:
            return Context(messages=[], summary=summary, token_count=0)
        if strategy is not None:
            recent = strategy.apply(recent, self._config.tokenizer).kept
        head: list[Message] = []
        used = 0
        if summary is not None:
            # The summary may take half the budget, or more when the recent
            # messages leave room; they are never crowded out by it.
            recent_cost = sum(m.token_count or 0 for m in recent)
            share = max(budget // 2, budget - recent_cost) if budget > 0 else -1
            note = summary_message(summary, self._config.tokenizer, share)
            if note is not None:
                head = [note]
                used = note.token_count or 0
        keep = len(recent)
        if budget > 0:
            room, keep = budget - used, 0
            for message in reversed(recent):
                cost = message.token_count or 0
                if cost > room:
                    break
                room -= cost
                keep += 1
        recent = drop_orphan_tool_results(recent[len(recent) - keep :])
        used += sum(m.token_count or 0 for m in recent)
        messages = head + recent
        await self._call_hook("on_read", session_id, user_id, messages)
        return Context(messages=messages, summary=summary, token_count=used)

    async def _snapshot(
        self, sid: str, keys: SessionKeys, with_messages: bool
    ) -> tuple[list[codec.DecodedEntry], list[Message], int, int]:
        self._check_open()
        snap = await self._scripts.snapshot(
            keys, session_id=sid, refresh_ttl=self._refresh_ttl_arg(), with_messages=with_messages
        )
        entries = [codec.decode_entry(r, keys.entries) for r in snap.entries]
        head = snap.seq - snap.length + 1
        created = [(e.first_seq, e.created_ms) for e in entries]
        messages = (
            codec.decode_messages(snap.messages, head, created, keys.msgs) if with_messages else []
        )
        return entries, messages, head, snap.accessed_ms

    async def _read_tagged(
        self, sid: str, keys: SessionKeys, wanted: Mapping[str, str], limit: int, budget: int
    ) -> list[Message]:
        entries, messages, head, _ = await self._snapshot(sid, keys, with_messages=True)
        picked: list[Message] = []
        for entry in entries:
            if _matches(entry.tags, wanted):
                lo = max(entry.first_seq, head) - head
                hi = entry.last_seq - head + 1
                picked.extend(messages[lo:hi])
        if limit >= 0:
            picked = picked[len(picked) - limit :] if limit else []
        if budget >= 0:
            used, start = 0, len(picked)
            while start > 0 and used + (picked[start - 1].token_count or 0) <= budget:
                start -= 1
                used += picked[start].token_count or 0
            picked = picked[start:]
        return picked

    async def entries(
        self, *, session_id: str, user_id: str = "default", tags: Mapping[str, str] | None = None
    ) -> list[MemoryEntry]:
        """The session's entries (one per write), oldest first, with the
        messages of each that are still stored."""
        sid, uid, _keys = self._keys(session_id, user_id)
        wanted = _check_tags(tags)
        decoded, messages, head, accessed_ms = await self._backend.in_session(
            uid, sid, lambda keys: self._snapshot(sid, keys, with_messages=True)
        )
        accessed = codec.ms_to_datetime(accessed_ms) if accessed_ms else None
        out = []
        for entry in decoded:
            if wanted and not _matches(entry.tags, wanted):
                continue
            lo = max(entry.first_seq, head) - head
            hi = entry.last_seq - head + 1
            out.append(
                MemoryEntry(
                    id=codec.message_id(entry.first_seq),
                    session_id=sid,
                    user_id=uid,
                    messages=messages[lo:hi],
                    metadata=EntryMetadata(
                        created_at=codec.ms_to_datetime(entry.created_ms),
                        accessed_at=accessed,
                        agent_name=entry.agent_name,
                        tags=entry.tags,
                        token_count=entry.token_count,
                    ),
                )
            )
        return out

    async def sessions(
        self, *, user_id: str = "default", tags: Mapping[str, str] | None = None
    ) -> list[SessionInfo]:
        """A user's live sessions; with ``tags``, only sessions having one entry
        that carries all the given pairs. Ordered by expiry, soonest first."""
        uid = validate_id(user_id, "user_id")
        wanted = _check_tags(tags)
        layout = self.layout
        prefixes = [tag_index_prefix(k, v) for k, v in wanted.items()]
        self._check_open()

        async def listed(at: int) -> tuple[int, list[tuple[str, float]], list[Any]]:
            user_keys = layout.user(uid, at)
            candidates = await self._scripts.sessions(user_keys, prefixes)
            commands: list[tuple[Any, ...]] = []
            for sid, _ in candidates:
                keys = layout.session(uid, sid, at)
                commands.append(("HMGET", keys.meta, "created", "accessed", "tokens"))
                commands.append(("LLEN", keys.msgs))
                commands.append(("HGETALL", keys.tags))
                if wanted:
                    commands.append(("LRANGE", keys.entries, 0, -1))
            details = (
                await guard.read_guarded(self._backend, user_keys, commands) if commands else []
            )
            return at, candidates, details

        epoch, candidates, results = await in_epoch(self._backend.epochs, uid, listed)
        step = 4 if wanted else 3
        out = []
        for i, (sid, deadline) in enumerate(candidates):
            (created, accessed, tokens), length, raw_tags = results[i * step : i * step + 3]
            if created is None:
                continue
            keys = layout.session(uid, sid, epoch)
            try:
                created_ms, accessed_ms, token_count = (
                    int(created),
                    int(accessed or created),
                    int(tokens or 0),
                )
                pairs = (
                    raw_tags.items()
                    if isinstance(raw_tags, dict)
                    else zip(raw_tags[::2], raw_tags[1::2], strict=True)
                )
                tag_map = {k.decode(): v.decode() for k, v in pairs}
            except (ValueError, TypeError, UnicodeDecodeError) as exc:
                raise CorruptData(keys.meta, f"session meta: {exc}") from exc
            if wanted:
                records = [codec.decode_entry(r, keys.entries) for r in results[i * step + 3]]
                if not any(_matches(r.tags, wanted) for r in records):
                    continue
            out.append(
                SessionInfo(
                    session_id=sid,
                    user_id=uid,
                    created_at=codec.ms_to_datetime(created_ms),
                    accessed_at=codec.ms_to_datetime(accessed_ms),
                    message_count=length,
                    token_count=token_count,
                    tags=tag_map,
                    expires_at=None if deadline == float("inf") else codec.ms_to_datetime(deadline),
                )
            )
        return out

    # -- features, each with its signature and docs in its own module --------

    #: A session-level memory object for frameworks that manage memory
    #: in-process and persist it here (``redismem.context.agent_memory``).
    agent_memory = _MadeWithSelf(AgentMemory)
    #: The read side of the memory loop (``redismem.context.builder``).
    build_context = _MadeWithSelf(builder.build_context)
    #: Search over the user's indexed messages (``redismem.recall.index``).
    search = _MadeWithBackend(recall.search)

    async def flush(self, *, user_id: str | None = None, timeout: float = 30.0) -> bool:  # noqa: ASYNC109
        """Wait until the workers have done the background work (indexing,
        summaries) due for every write made before this call, of ``user_id``
        or of every user. True when done, False when ``timeout`` (seconds)
        passed first. Needs running workers (``redismem worker``;
        ``InProcessWorker`` with the embedded backend): when it times out
        and none is running, that is logged (a WARNING, at most once per
        ``WARN_EVERY_S`` of ``redismem.workers.presence``)."""
        done = await recall.flush(self._backend, user_id=user_id, timeout=timeout)
        if not done:
            await (await self._worker_presence()).check(max_age=0, why="flush() timed out")
        return done

    async def workers(self) -> Workers:
        """The workers of this client's queue, as ``redismem stats`` shows
        them: each one's name, whether it is healthy or stale, when it was
        last seen and arq's record of its jobs (``Workers.describe()`` says
        it in lines). On the embedded backend: the ``InProcessWorker`` s of
        this process."""
        self._check_open()
        return await (await self._worker_presence()).workers()

    async def _worker_presence(self) -> WorkerPresence:
        if self._presence is None:
            # Imported in a thread: the workers' modules take ~0.3 s to
            # import, which would stall this event loop (and its writes).
            module = await asyncio.to_thread(importlib.import_module, "redismem.workers.presence")
            if self._presence is None:
                self._presence = module.WorkerPresence(self._config, lambda: self.queue.pool)
        return self._presence

    # -- deletion ----------------------------------------------------------

    async def clear(self, *, session_id: str, user_id: str = "default") -> int:
        """Delete one session, atomically, then its indexed copies in the
        recall index (never those of a session written again since).
        Returns the number of session keys removed."""
        sid, uid, _keys = self._keys(session_id, user_id)
        self._check_open()

        async def clear(keys: SessionKeys) -> int:
            recall_keys = self.layout.recall(uid, keys.epoch)
            grave = grave_suffix(sid, new_write_id())
            removed = await self._scripts.clear(keys, recall_keys, session_id=sid, grave=grave)
            await purge.forget_cleared(self._backend, recall_keys)
            return removed

        return await self._backend.in_session(uid, sid, clear)

    async def clear_user(self, user_id: str) -> int:
        """Delete everything of one user: sessions, summaries, the recall
        index, long-term memories and store items, and the user's jobs still
        waiting on the queue. Returns the number of keys removed.

        Final, whatever runs meanwhile: from the first step on, no write
        built before the clear can land (a worker's late commit changes
        nothing) and nothing of before can be read; writes racing the clear
        land either before it (and are deleted) or after it (and are kept,
        and indexed). See ``redismem.core.guard``."""
        uid = validate_id(user_id, "user_id")
        self._check_open()
        return await guard.clear_user(self._backend, uid)

    async def clear_all(self) -> int:
        """Delete every key of this namespace, and nothing outside it but the
        namespace's jobs still waiting on the queue: every user as
        ``clear_user`` does (just as final), then what belongs to no user
        (LangGraph threads)."""
        self._check_open()
        return await guard.clear_all(self._backend)

    @property
    def queue(self) -> SummaryQueue:
        """The work queue this client enqueues jobs on (made on first use)."""
        return self._backend.queue
