"""The one script runner, ``ScriptRunner``, and the session scripts' results.

Every Lua script (``redismem/lua/``, put together by ``redismem.core.lua``)
runs through ``ScriptRunner``: registered with ``register_script`` so a
server that lost its script cache (restart, failover, ``SCRIPT FLUSH``) gets
it reloaded on ``NOSCRIPT`` transparently, sent under the client's
``RetryPolicy`` (bounded time, retries, errors mapped into redismem's tree).
It has one method per session script, taking typed arguments and returning a
named result; the store and the LangGraph checkpointer use ``run_guarded`` and
``run``. Every script is idempotent, so a retried call is harmless: writes
carry a write id, commits a compare-and-set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rexc

from redismem.core.connection import RetryPolicy, is_cluster
from redismem.core.keys import (
    RecallKeys,
    SessionKeys,
    UserKeys,
    escape_id,
    session_filter_suffix,
)
from redismem.core.lua import Scoped, guarded, script_source
from redismem.core.transport import MultiplexedCluster, MultiplexedConnection
from redismem.errors import BackendFull

__all__ = [
    "CommitResult",
    "ExtractRead",
    "IndexCommit",
    "IndexDoc",
    "IndexMigrate",
    "IndexRead",
    "PrepareResult",
    "ReadResult",
    "ScriptRunner",
    "SnapshotResult",
    "WriteResult",
    "records_as_read",
]

logger = logging.getLogger(__name__)


#: Seconds between two log lines about reads that could not slide the TTL.
_FULL_LOG_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class WriteResult:
    first_seq: int
    created_ms: int
    stored: int
    trimmed: int
    #: When this write made the session newly due for summarization, the
    #: time it did (the job's episode); else 0.
    pending_since: int
    pending: bool
    #: The write id had been applied already; this call changed nothing.
    duplicate: bool


@dataclass(frozen=True, slots=True)
class ReadResult:
    first_seq: int
    messages: list[bytes]
    covering: list[bytes]
    summary: bytes | None


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    seq: int
    length: int
    entries: list[bytes]
    messages: list[bytes]
    accessed_ms: int
    created_ms: int


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """What a summarization pass reads; ``seq`` is 0 when the session is gone."""

    seq: int
    wm: int
    length: int
    summary: bytes | None
    pending_since: str
    first_seq: int
    messages: list[bytes]
    covering: list[bytes]
    gen: str
    #: Seq of the last candidate (``messages`` holds one more, if stored).
    last_seq: int
    #: The index watermark; -1 when the session's writes are not indexed.
    indexed_until: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    #: "committed", "stale" (another pass committed first) or "gone" (the
    #: session was cleared or expired, maybe written again, since the pass read it).
    status: str
    still_pending: bool


@dataclass(frozen=True, slots=True)
class IndexRead:
    """What ``index_read`` found: the messages after the index watermark."""

    seq: int
    gen: str
    iwm: int
    #: The recall ttl of the session's writes in ms (0 = forever); None when
    #: its writes are not indexed.
    recall_ttl_ms: int | None
    #: Seq of ``messages[0]``; 0 when every stored message is indexed.
    first_seq: int
    messages: list[bytes]
    #: Whole entry records covering the messages, newest first.
    entries: list[bytes]
    #: The stored messages just before ``first_seq``, oldest first.
    context: list[bytes]


@dataclass(frozen=True, slots=True)
class ExtractRead:
    """What ``extract_read`` found: the indexed messages after the
    extraction watermark, and an outbox not applied yet."""

    seq: int
    gen: str
    xwm: int
    #: Seq of ``messages[0]``; 0 when no indexed message waits.
    first_seq: int
    messages: list[bytes]
    #: Whole entry records covering the messages, newest first.
    entries: list[bytes]
    outbox: bytes | None


@dataclass(frozen=True, slots=True)
class IndexCommit:
    """What ``index_commit`` did."""

    #: "committed", "stale" (another pass committed first) or "gone".
    status: str
    added: int = 0
    #: The index format the docs went to: 2, or 1 (the user's index is
    #: still format 1: its migration is due); 0 when nothing was committed.
    format: int = 0
    #: Format 2: the last docid given, and ``i:meta`` sealed (every record
    #: block below it is sealed).
    next_docid: int = 0
    sealed: int = 0


@dataclass(frozen=True, slots=True)
class IndexMigrate:
    """What one ``index_migrate`` call did (see ``redismem.recall.upgrade``)."""

    #: 1 copied, 2 format 2 has taken over (by this call or before), 0 the
    #: cursor had moved (another call copied those docs).
    status: int
    cursor: int
    copied: int
    #: ``i:meta`` next and sealed after the call, for sealing record blocks.
    next_docid: int
    sealed: int


@dataclass(frozen=True, slots=True)
class IndexDoc:
    """One message as the index commit stores it."""

    created_ms: int
    #: ``b"role|name terms|" + payload``.
    record: bytes
    filter_suffixes: Sequence[str]
    postings: Mapping[str, float]


async def _write_result(call: Awaitable[Any]) -> WriteResult:
    first, created, stored, trimmed, since, pending, duplicate = await call
    return WriteResult(first, created, stored, trimmed, since, bool(pending), bool(duplicate))


def _text(value: Any) -> str:
    if value is None or value is False:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def records_as_read(records: Sequence[bytes | None]) -> bytes:
    """What ``index_seal.lua`` compares ``i:rec`` with: the records read,
    each ``+<bytes>:<record>``, or ``-`` when absent."""
    return b"".join(b"-" if r is None else b"+%d:%b" % (len(r), r) for r in records)


class ScriptRunner:
    """Every Lua script of one Redis client, run under one ``RetryPolicy``.

    The one way a script runs (sessions, recall, extraction, the long-term
    store, the LangGraph checkpointer): ``run`` with exactly the given KEYS
    and ARGV, ``run_guarded`` for a user-scoped script on keys built for one
    epoch. It registers each script on first use (``register_script``: EVALSHA,
    reloaded on NOSCRIPT), sends it on the multiplexed connection when there
    is one (routed by the first key's slot on a cluster, waiting for replica
    acks when asked) and through redis-py otherwise. Typed methods, one per
    session script, build the arguments and name the results."""

    def __init__(
        self,
        redis: Any,
        policy: RetryPolicy,
        link: MultiplexedConnection | MultiplexedCluster | None = None,
        *,
        replica_acks: int = 0,
        replica_timeout_ms: int = 0,
    ) -> None:
        self._redis = redis
        self._policy = policy
        self._link = link
        #: Writes wait for this many replicas (``WAIT``, on the link only).
        self._replica_acks = replica_acks if link is not None else 0
        self._replica_timeout_ms = replica_timeout_ms
        #: redis-py's cluster client refuses MULTI: reads of the tail then use
        #: the read script (the cluster links run MULTI on the slot's master).
        self._multi = link is not None or not is_cluster(redis)
        self._scripts: dict[str, Any] = {}
        self._full_logged_at = 0.0

    @property
    def policy(self) -> RetryPolicy:
        return self._policy

    def _script(self, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._redis.register_script(script_source(name))
        return script

    def run_guarded(
        self,
        name: str,
        scope: Scoped,
        keys: Sequence[str],
        args: Sequence[Any],
        *,
        acked: bool = False,
    ) -> Awaitable[Any]:
        """Run the user-scoped script ``name`` on keys built for ``scope``'s
        epoch, under the policy; ``acked``: a write that must reach the
        replicas asked for (``replica_acks``). ``EpochMoved`` when the user
        was cleared since (another epoch)."""
        keys, args = guarded(scope, keys, args)
        return self.run(name, keys, args, acked=acked)

    def run(
        self, name: str, keys: Sequence[Any], args: Sequence[Any], *, acked: bool = False
    ) -> Awaitable[Any]:
        """Run script ``name`` with exactly these KEYS and ARGV (a script not
        user-scoped; ``run_guarded`` for the others)."""
        script = self._script(name)
        link = self._link
        if link is not None:
            replicas = self._replica_acks if acked else 0
            timeout = self._replica_timeout_ms

            call = (script.sha, script.script, keys, args)

            def attempt(deadline: float) -> Awaitable[Any]:
                return link.evalsha(
                    *call, replicas=replicas, replica_timeout_ms=timeout, deadline=deadline
                )

            # Sent now when the connection is up: the caller may work while
            # Redis runs the script (see ``write``). Any trouble sending is
            # left to the attempts under the policy, which map and retry it.
            try:
                first = link.evalsha_now(
                    *call,
                    replicas=replicas,
                    replica_timeout_ms=timeout,
                    deadline=self._policy.deadline(),
                )
            except Exception:
                first = None
            return self._policy.run_until(attempt, first=first)
        return self._policy.run(lambda: script(keys=keys, args=args))

    def _log_full(self) -> None:
        now = time.monotonic()
        if now - self._full_logged_at > _FULL_LOG_EVERY:
            self._full_logged_at = now
            logger.warning(
                "Redis is out of memory: reads are served without sliding session TTLs "
                "(logged at most once a minute)"
            )

    async def _refreshing(self, call: Callable[[int], Awaitable[Any]], refresh_ttl: int) -> Any:
        """Run a read that slides the TTL; when Redis is full (noeviction),
        read without sliding it rather than fail."""
        try:
            return await call(refresh_ttl)
        except BackendFull:
            if refresh_ttl < 0:
                raise
            self._log_full()
            return await call(-1)

    def write(
        self,
        keys: SessionKeys,
        *,
        session_id: str,
        write_id: str,
        ttl_ms: int,
        max_messages: int,
        entry_tail: bytes,
        token_count: int,
        summarize: str,
        recall_ttl_ms: int | None,
        tags: Mapping[str, str],
        messages: Sequence[bytes],
        created_ms: int | None = None,
    ) -> Awaitable[WriteResult]:
        """Append an entry (the write script). Sent before this returns when
        the hot path's connection is up: the caller can work while Redis runs
        it, then await the result. ``recall_ttl_ms``: None when indexing is
        off, 0 to keep forever; ``created_ms``: the entry's time when it
        records the past (None: the server's clock)."""
        flat_tags = [part for pair in tags.items() for part in pair]
        args = [
            ttl_ms,
            max_messages,
            session_id,
            entry_tail,
            token_count,
            summarize,
            write_id,
            "" if recall_ttl_ms is None else recall_ttl_ms,
            "" if created_ms is None else created_ms,
            len(tags),
            *flat_tags,
            *messages,
        ]
        return _write_result(self.run_guarded("write", keys, keys.script_keys(), args, acked=True))

    async def read(
        self,
        keys: SessionKeys,
        *,
        session_id: str,
        limit: int,
        max_tokens: int,
        refresh_ttl: int,
        with_summary: bool,
    ) -> ReadResult:
        def call(ttl: int) -> Awaitable[Any]:
            args = [limit, max_tokens, ttl, session_id, "1" if with_summary else "0"]
            return self.run_guarded("read", keys, keys.script_keys(), args)

        first_seq, raw, covering, summary = await self._refreshing(call, refresh_ttl)
        return ReadResult(first_seq, raw, covering, summary or None)

    async def read_tail(
        self, keys: SessionKeys, *, session_id: str, limit: int, refresh_ttl: int
    ) -> ReadResult:
        """The newest ``limit`` messages (-1: all) without a token budget.

        The hot path of reads: one MULTI holding the ``touch`` script (checks
        and TTL) and plain LRANGEs of the messages and of the entry records
        that cover them, so no message passes through Lua (which copies every
        element twice)."""

        if not self._multi:
            return await self.read(
                keys,
                session_id=session_id,
                limit=limit,
                max_tokens=-1,
                refresh_ttl=refresh_ttl,
                with_summary=False,
            )
        link = self._link
        try:
            if link is not None:
                (seq, _length), raw, records = await self._policy.run_until(
                    lambda deadline: self._tail_on_link(
                        link, keys, session_id, limit, refresh_ttl, deadline
                    )
                )
            else:
                (seq, _length), raw, records = await self._policy.run(
                    lambda: self._tail_once(keys, session_id, limit, refresh_ttl)
                )
        except BackendFull:
            # Redis refuses a script in MULTI when full, even one that would
            # not write: read through the plain script, without sliding the TTL.
            if refresh_ttl >= 0:
                self._log_full()
            return await self.read(
                keys,
                session_id=session_id,
                limit=limit,
                max_tokens=-1,
                refresh_ttl=-1,
                with_summary=False,
            )
        if not raw or not seq:
            return ReadResult(0, [], [], None)
        # Whole entry records, newest first: codec.parse_covering reads their
        # "first_seq,created_ms" prefix, down to the record holding first_seq.
        return ReadResult(seq - len(raw) + 1, raw, records[::-1], None)

    async def _tail_once(
        self, keys: SessionKeys, session_id: str, limit: int, ttl: int
    ) -> list[Any]:
        touch = self._script("touch")
        start = 0 if limit < 0 else -limit
        touch_keys, touch_args = guarded(keys, keys.script_keys(), [ttl, session_id])
        for _ in range(2):
            pipe = self._redis.pipeline(transaction=True)
            pipe.evalsha(touch.sha, len(touch_keys), *touch_keys, *touch_args)
            if limit == 0:
                pipe.lrange(keys.msgs, 1, 0)
                pipe.lrange(keys.entries, 1, 0)
            else:
                pipe.lrange(keys.msgs, start, -1)
                pipe.lrange(keys.entries, start, -1)
            try:
                result: list[Any] = await pipe.execute()
                return result
            except rexc.NoScriptError:
                # A restarted or failed-over server lost its script cache.
                await self._redis.script_load(touch.script)
        raise rexc.NoScriptError("the touch script could not be loaded")

    async def _tail_on_link(
        self,
        link: MultiplexedConnection | MultiplexedCluster,
        keys: SessionKeys,
        session_id: str,
        limit: int,
        ttl: int,
        deadline: float,
    ) -> list[Any]:
        touch = self._script("touch")
        start, stop = (1, 0) if limit == 0 else (0 if limit < 0 else -limit, -1)
        msgs = keys.msgs
        script_keys, script_args = guarded(keys, keys.script_keys(), [ttl, session_id])
        commands = [
            ("EVALSHA", touch.sha, len(script_keys), *script_keys, *script_args),
            ("LRANGE", msgs, start, stop),
            ("LRANGE", keys.entries, start, stop),
        ]
        try:
            return await link.transaction(commands, key=msgs, deadline=deadline)
        except rexc.NoScriptError:
            # A restarted or failed-over server lost its script cache.
            await link.execute("SCRIPT", "LOAD", touch.script, key=msgs, deadline=deadline)
            return await link.transaction(commands, key=msgs, deadline=deadline)

    async def snapshot(
        self, keys: SessionKeys, *, session_id: str, refresh_ttl: int, with_messages: bool
    ) -> SnapshotResult:
        def call(ttl: int) -> Awaitable[Any]:
            args = [ttl, session_id, "1" if with_messages else "0"]
            return self.run_guarded("snapshot", keys, keys.script_keys(), args)

        seq, length, entries, msgs, accessed, created = await self._refreshing(call, refresh_ttl)
        return SnapshotResult(seq, length, entries, msgs, accessed, created)

    async def sessions(self, user: UserKeys, prefixes: Sequence[bytes]) -> list[tuple[str, float]]:
        """``(session id, deadline ms)`` of live sessions having every tag prefix."""
        flat = await self.run_guarded("sessions", user, [user.sessions, user.tagidx], prefixes)
        return [(flat[i].decode("utf-8"), float(flat[i + 1])) for i in range(0, len(flat), 2)]

    async def bump_epoch(self, guard: str, *, min_ttl_ms: int, clear_id: str) -> int:
        """Start a new epoch of the user of ``guard`` (``guard_bump.lua``),
        once per ``clear_id``."""
        return int(await self.run("guard_bump", [guard], [min_ttl_ms, clear_id]))

    async def settle_guard(self, guard: str, *, epoch: int, roots: Sequence[str]) -> bool:
        """Record ``epoch``'s earlier epochs deleted and drop ``guard`` if no
        root key of the epoch exists (``guard_settle.lua``): True if dropped."""
        return bool(await self.run("guard_settle", [guard, *roots], [epoch]))

    async def clear(
        self, keys: SessionKeys, recall: RecallKeys, *, session_id: str, grave: str
    ) -> int:
        """Delete the session; its docs in the recall index go to the grave
        ``recall.prefix + grave`` (a fresh suffix), for ``recall_forget``."""
        filter_key = recall.prefix + session_filter_suffix(session_id)
        script_keys = [
            *keys.script_keys(),
            filter_key,
            recall.prefix + grave,
            recall.graves,
            recall.i_sess,
            recall.i_meta,
            recall.i_dead,
            recall.i_purge,
        ]
        removed, _grave = await self.run_guarded(
            "clear", keys, script_keys, [session_id, escape_id(session_id)]
        )
        return int(removed)

    async def prepare(
        self, keys: SessionKeys, *, session_id: str, keep_recent: int, cap: int
    ) -> PrepareResult:
        (
            seq,
            wm,
            length,
            summary,
            since,
            first,
            raw,
            covering,
            gen,
            last,
            iwm,
        ) = await self.run_guarded(
            "prepare", keys, keys.script_keys(), [keep_recent, cap, session_id]
        )
        return PrepareResult(
            seq,
            wm,
            length,
            summary or None,
            _text(since),
            first,
            raw,
            covering,
            _text(gen),
            last,
            iwm,
        )

    async def commit(
        self,
        keys: SessionKeys,
        *,
        session_id: str,
        read: PrepareResult,
        until_seq: int,
        summarized: int,
        summary: bytes,
        compact: bool,
        keep_recent: int,
        batch: int,
    ) -> CommitResult:
        args = [
            read.wm,
            until_seq,
            summarized,
            summary,
            "1" if compact else "0",
            keep_recent,
            batch,
            session_id,
            read.pending_since,
            read.gen,
        ]
        status, still = await self.run_guarded("commit", keys, keys.script_keys(), args)
        name = {1: "committed", 0: "stale", -1: "gone"}[status]
        return CommitResult(name, bool(still))

    async def index_read(self, keys: SessionKeys, *, cap: int, context: int) -> IndexRead:
        """The session's messages after its index watermark (at most ``cap``)."""
        seq, gen, iwm, rttl, first, messages, entries, before = await self.run_guarded(
            "index_read", keys, keys.script_keys(), [cap, context]
        )
        recall_ttl = None if rttl is None or rttl is False else int(rttl)
        return IndexRead(
            int(seq),
            _text(gen),
            int(iwm),
            recall_ttl,
            int(first),
            messages,
            entries,
            before,
        )

    async def index_commit(
        self,
        keys: SessionKeys,
        recall: RecallKeys,
        *,
        read: IndexRead,
        until_seq: int,
        docs: Sequence[IndexDoc],
        extracting: bool = False,
        new_format: int = 2,
    ) -> IndexCommit:
        """Add ``docs`` and move the index watermark to ``until_seq``, with
        compare-and-set on what ``read`` saw (status "committed", "stale" or
        "gone"). ``extracting``: the workers extract memories too (the
        session's extraction watermark starts with this commit, if not
        before). ``new_format``: the index format a user without an index
        gets. The docs' filter suffixes start with the session's."""
        args: list[Any] = [
            read.gen,
            read.iwm,
            until_seq,
            read.recall_ttl_ms or 0,
            recall.prefix,
            len(docs),
            "1" if extracting else "0",
            new_format,
            recall.i_prefix,
        ]
        for doc in docs:
            postings = " ".join(f"{term} {weight:.6g}" for term, weight in doc.postings.items())
            args += [doc.created_ms, doc.record, " ".join(doc.filter_suffixes), postings]
        status, added, fmt, last, sealed = await self.run_guarded(
            "index_commit",
            keys,
            [*keys.script_keys(), *recall.index_keys(), *recall.script_keys()],
            args,
        )
        name = {1: "committed", 0: "stale", -1: "gone"}[status]
        return IndexCommit(name, int(added), int(fmt), int(last), int(sealed))

    async def index_seal(
        self, recall: RecallKeys, *, block: int, data: bytes, read: Sequence[bytes | None]
    ) -> tuple[int, int]:
        """Seal record block ``block`` of format 2 (``data``: the zlib block
        of its records, ``postings.encode_block``, built from ``read``, what
        was read of the block's records in ``i:rec``); idempotent, and
        compare-and-set on ``read``. Returns (1 sealed by this call, 0 sealed
        before, -1 the records changed since the read: read again;
        ``i:meta`` sealed after the call)."""
        status, mark = await self.run_guarded(
            "index_seal",
            recall,
            recall.index_keys(),
            [recall.i_prefix, block, data, records_as_read(read)],
        )
        return int(status), int(mark)

    async def index_drop(self, recall: RecallKeys, *, next_docid: str) -> bool:
        """Drop the user's format-2 index if no doc of it is live, no purge
        is left and no doc was committed since ``next_docid`` (``index_drop.lua``)."""
        return bool(
            await self.run_guarded(
                "index_drop",
                recall,
                [*recall.index_keys(), recall.i_purge],
                [recall.i_prefix, next_docid],
            )
        )

    async def index_migrate(self, recall: RecallKeys, *, cursor: str, batch: int) -> IndexMigrate:
        """Copy the next ``batch`` format-1 docids after ``cursor`` (the copy
        cursor read; "" = none) into format 2 (``index_migrate.lua``)."""
        status, at, copied, next_docid, sealed = await self.run_guarded(
            "index_migrate",
            recall,
            [*recall.index_keys(), recall.graves, *recall.script_keys()],
            [recall.prefix, recall.i_prefix, cursor, batch],
        )
        return IndexMigrate(int(status), int(at), int(copied), int(next_docid), int(sealed))

    async def index_retire(self, recall: RecallKeys, *, start: int, batch: int) -> int:
        """Delete format-1 docids ``start`` .. ``start + batch - 1`` and what
        they name, once format 2 serves the user (``index_retire.lua``): the
        next docid to start from, 0 when format 1 is gone."""
        return int(
            await self.run_guarded(
                "index_retire",
                recall,
                [recall.i_meta, recall.graves, *recall.script_keys()],
                [recall.prefix, start, batch],
            )
        )

    async def index_purge(
        self,
        recall: RecallKeys,
        *,
        ordinal: int,
        lists: Sequence[str],
        blocks: Sequence[tuple[int, bytes, bytes]] | None = None,
    ) -> bool:
        """Rewrite ``lists`` (suffixes after ``i:``) without the docs of the
        cleared session ``ordinal``; with ``blocks`` (the final call: block,
        bytes read, bytes without the session's records) also delete its
        records, slots and list (``index_purge.lua``). False when a sealed
        block changed since it was read (read again and retry)."""
        args: list[Any] = [recall.i_prefix, ordinal, "0" if blocks is None else "1", len(lists)]
        args += lists
        args.append(0 if blocks is None else len(blocks))
        for block, old, new in blocks or ():
            args += [block, old, new]
        done = await self.run_guarded(
            "index_purge", recall, [*recall.index_keys(), recall.i_purge], args
        )
        return int(done) == 1

    async def recall_forget(self, recall: RecallKeys, *, suffix: str, batch: int) -> int:
        """Forget up to ``batch`` docs listed in ``prefix + suffix`` (and
        expired ones); returns how many it still lists."""
        left = await self.run_guarded(
            "recall_forget",
            recall,
            [recall.graves, *recall.script_keys()],
            [recall.prefix, suffix, batch],
        )
        return int(left)

    async def recall_search(self, recall: RecallKeys, args: Sequence[Any]) -> list[Any]:
        """Run the search script (arguments: see ``recall_search.lua``)."""
        found: list[Any] = await self.run_guarded(
            "recall_search", recall, [*recall.index_keys(), *recall.script_keys()], args
        )
        return found

    async def extract_read(self, keys: SessionKeys, *, cap: int) -> ExtractRead:
        """The session's indexed messages after its extraction watermark."""
        seq, gen, xwm, first, messages, entries, outbox = await self.run_guarded(
            "extract_read", keys, keys.script_keys(), [cap]
        )
        return ExtractRead(
            int(seq),
            _text(gen),
            int(xwm),
            int(first),
            messages,
            entries,
            None if outbox is None or outbox is False else bytes(outbox),
        )

    async def extract_commit(
        self, keys: SessionKeys, *, read: ExtractRead, until_seq: int, outbox: bytes
    ) -> str:
        """Move the extraction watermark to ``until_seq`` and keep ``outbox``,
        with compare-and-set on what ``read`` saw: "committed", "stale" or "gone"."""
        status = await self.run_guarded(
            "extract_commit", keys, [keys.meta], [read.gen, read.xwm, until_seq, outbox]
        )
        return {1: "committed", 0: "stale"}.get(int(status), "gone")

    async def extract_clear(self, keys: SessionKeys, *, outbox: bytes) -> bool:
        """Clear the applied ``outbox`` (unless it was replaced)."""
        return bool(await self.run_guarded("extract_clear", keys, [keys.meta], [outbox]))

    async def settle(self, keys: SessionKeys, *, session_id: str, seq: int, gen: str) -> bool:
        cleared = await self.run_guarded(
            "settle", keys, [keys.meta, keys.pending], [seq, session_id, gen]
        )
        return bool(cleared)
