"""LangGraph checkpointer on plain Redis (``redismem[langgraph]``).

``RedisMemSaver(backend, ttl=None, serde=None)`` is a
``langgraph.checkpoint.base.BaseCheckpointSaver``: pass it as the
``checkpointer`` of ``StateGraph.compile``. It needs no Redis module (no
RedisJSON, no RediSearch): hashes, sorted sets and Lua, so it runs on Redis 7,
Valkey and the embedded ``memory://`` backend, standalone, Sentinel or Cluster.

Storage layout. Every key of a thread lies under one hash tag, so a thread
lives in one Cluster slot and each script touches one slot (``N`` = the
``Memory``'s namespace, ``T`` = ``escape_id(thread_id)``, ``S`` = the escaped
``checkpoint_ns`` (empty for the root namespace), ``K`` = the escaped
checkpoint id, ``C`` = ``S/K``)::

    N:{lg:T}:ck     HASH  C -> the checkpoint: msgpack [checkpoint type, bytes
                          (without channel_values), metadata type, bytes,
                          parent checkpoint id or nil]
    N:{lg:T}:ix     HASH  C -> "<escaped run id>|<blob refs>", plain text for
                          the scripts: the checkpoint's run and one
                          "<escaped channel>/<escaped version>" per channel of
                          its channel_versions, space separated
    N:{lg:T}:ids    ZSET  every C, score 0: lexicographic order is namespace,
                          then checkpoint id (``list``, ``before``, latest)
    N:{lg:T}:bl     HASH  S/<escaped channel>/<escaped version> -> msgpack
                          [type, bytes]: channel values, one per channel and
                          version, shared by the checkpoints that hold it
    N:{lg:T}:wr     HASH  C/<escaped task id>/<idx> -> msgpack [task id,
                          channel, type, bytes, task path, idx]: pending writes
    N:{lg:T}:wi     ZSET  the fields of ``wr``, score 0 (a checkpoint's writes
                          are a lexicographic range)
    N:{lg:T}:runs   ZSET  "<escaped run id>/C", score 0 (``delete_for_runs``)
    N:{lgr:R}:threads SET T of the threads holding checkpoints of run R
                          (``R`` = escaped run id; its own hash tag)

Every value is LangGraph's serializer protocol (``serde.dumps_typed`` /
``loads_typed``; ``JsonPlusSerializer`` by default, without its pickle
fallback) inside msgpack; nothing is pickled. The keys start with the
namespace, so ``Memory.clear_all()`` removes them; they carry no user tag, so
``clear_user`` does not.

Semantics are ``InMemorySaver``'s: a checkpoint id names one checkpoint per
thread and namespace; ``list`` yields newest first (checkpoint ids in
lexicographic order, which is creation order for LangGraph's uuid6 ids) with
``before``, ``limit`` and a metadata ``filter`` (every key equal); ``put_writes``
keys a write by ``(task id, idx)`` with ``WRITES_IDX_MAP`` giving the special
channels negative indexes: a regular write sent again is ignored, a special
one replaces the stored one; pending writes come back in ``(task path, task
id, idx)`` order. Channel values are stored once per channel version, as
LangGraph's own savers do.

Writes are one Lua script each (all or nothing, idempotent, so a call retried
by the client's call policy lands once). Retention is LangGraph's: a thread is
kept until it is deleted, whatever the ``Memory``'s ``ttl``. With ``ttl``
(seconds) every write sets the expiry of all the thread's keys to ``ttl`` from
now, so a thread expires whole, ``ttl`` after its last write; reads do not
refresh it. The run index is refreshed the same way.

``delete_thread`` removes every key of the thread at once; ``delete_for_runs``,
``prune`` (``"keep_latest"`` per namespace, or ``"delete"``) and
``copy_thread`` are supported too; channel values no checkpoint refers to any
more are removed with the checkpoints. Like LangGraph's own savers,
``prune(strategy="keep_latest")`` does not keep the ancestors a ``DeltaChannel``
(beta) would need.

Sync methods (``get_tuple``, ``list``, ``put``...) run on a background event
loop through a twin of the ``Memory`` (see ``redismem.adapters``), so
``graph.invoke`` works anywhere, inside a running event loop too (a notebook
cell), which it blocks while it runs, as ``InMemorySaver`` does; LangGraph
uses the async ones for ``ainvoke``/``astream``. Call ``close()`` (or
``await aclose()``) when done with them.
"""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from redismem.adapters._retention import ttl_ms
from redismem.adapters._sync import aclose_twin, close_twin, run_sync
from redismem.core.connection import scan_once
from redismem.core.keys import GraphThreadKeys, escape_id, unescape_id
from redismem.errors import CorruptData, InvalidInput, MissingDependency
from redismem.surface import check_memory

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        PendingWrite,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise MissingDependency("langgraph-checkpoint", "langgraph") from exc

if TYPE_CHECKING:
    from redismem.core.backend import Backend
    from redismem.surface import SessionMemory

__all__ = ["RedisMemSaver"]

#: Checkpoints read per round trip while listing.
_PAGE = 32
#: Records per script call while copying a thread.
_COPY_BATCH = 256
_STRATEGIES = ("keep_latest", "delete")

# -- keys ---------------------------------------------------------------------------------


def _cid(checkpoint_ns: str, checkpoint_id: str) -> str:
    """``C``: a checkpoint's member in ``ids`` and field in ``ck``/``ix``."""
    return f"{escape_id(checkpoint_ns)}/{escape_id(checkpoint_id)}"


def _split_cid(member: str) -> tuple[str, str]:
    ens, _, eid = member.partition("/")
    return unescape_id(ens) if ens else "", unescape_id(eid)


def _blob_ref(channel: str, version: str | int | float) -> str:
    return f"{escape_id(channel)}/{escape_id(str(version))}"


# -- scripts ------------------------------------------------------------------------------


async def _command(backend: Backend, *args: Any) -> Any:
    """One Redis command under the client's call policy."""
    return await backend.call(lambda redis: redis.execute_command(*args))


async def _script(backend: Backend, name: str, keys: GraphThreadKeys, args: Sequence[Any]) -> Any:
    """Run the checkpointer's script ``lg_<name>`` (a thread belongs to no
    user: not guarded) through the one script runner."""
    return await backend.scripts.run(f"lg_{name}", keys.all(), list(args))


# -- encoding -----------------------------------------------------------------------------


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _unpack(raw: bytes, key: str) -> list[Any]:
    try:
        value = msgpack.unpackb(raw, raw=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"not msgpack: {exc}") from exc
    if not isinstance(value, list):
        raise CorruptData(key, f"expected a msgpack array, got {type(value).__name__}")
    return value


def _text(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else raw.decode("utf-8")


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    conf = config.get("configurable")
    if not isinstance(conf, dict) or conf.get("thread_id") is None:
        raise InvalidInput('the config needs {"configurable": {"thread_id": ...}}')
    return conf


def _thread(conf: dict[str, Any]) -> str:
    return str(conf["thread_id"])


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _sort_key(write: list[Any]) -> tuple[str, str, int]:
    # LangGraph's writes_sort_key: (task_path, task_id, idx).
    return (write[4], write[0], write[5])


# -- the saver ----------------------------------------------------------------------------


class RedisMemSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over a redismem ``Memory`` (see the module docstring).

    ``ttl``: seconds a thread lives after its last write (None: until deleted,
    as with LangGraph's own savers, whatever the ``Memory``'s ``ttl``).
    ``serde``: LangGraph serializer (default ``JsonPlusSerializer``).
    """

    def __init__(
        self,
        memory: SessionMemory,
        *,
        ttl: float | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.memory = check_memory(memory)
        self.ttl = ttl
        self._ttl_ms = ttl_ms(ttl)
        self._layout = self.memory.layout

    def keys(self, thread_id: str) -> GraphThreadKeys:
        """The Redis keys of one thread."""
        return self._layout.graph_thread(str(thread_id))

    # -- versions ---------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``"<32-digit counter>.<random>"``, as LangGraph's own savers do."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- reads ------------------------------------------------------------------------

    def _decode(
        self, thread_id: str, keys: GraphThreadKeys, row: list[Any]
    ) -> tuple[CheckpointTuple, CheckpointMetadata] | None:
        if len(row) < 5:
            return None
        member, raw_ck, raw_ix, blobs, writes = row
        checkpoint_ns, checkpoint_id = _split_cid(_text(member))
        fields = _unpack(raw_ck, keys.ck)
        if len(fields) != 5:
            raise CorruptData(keys.ck, f"checkpoint {checkpoint_id!r} has {len(fields)} fields")
        ck_type, ck_bytes, md_type, md_bytes, parent = fields
        stored: dict[str, Any] = self.serde.loads_typed((ck_type, ck_bytes))
        metadata: CheckpointMetadata = self.serde.loads_typed((md_type, md_bytes))
        refs = _text(raw_ix).partition("|")[2].split()
        versions = stored.get("channel_versions", {})
        channels = {_blob_ref(channel, version): channel for channel, version in versions.items()}
        values: dict[str, Any] = {}
        for ref, raw in zip(refs, blobs, strict=True):
            if not raw or ref not in channels:
                continue
            blob_type, blob_bytes = _unpack(raw, keys.bl)
            values[channels[ref]] = self.serde.loads_typed((blob_type, blob_bytes))
        pending = sorted((_unpack(raw, keys.wr) for raw in writes if raw), key=_sort_key)
        pending_writes: list[PendingWrite] = [
            (task_id, channel, self.serde.loads_typed((value_type, value_bytes)))
            for task_id, channel, value_type, value_bytes, _path, _idx in pending
        ]
        checkpoint: Checkpoint = {**stored, "channel_values": values}  # type: ignore[typeddict-item]
        return (
            CheckpointTuple(
                config=_config(thread_id, checkpoint_ns, checkpoint_id),
                checkpoint=checkpoint,
                metadata=metadata,
                parent_config=(
                    _config(thread_id, checkpoint_ns, parent) if parent is not None else None
                ),
                pending_writes=pending_writes,
            ),
            metadata,
        )

    async def _read(
        self, backend: Backend, thread_id: str, args: Sequence[str]
    ) -> list[CheckpointTuple]:
        keys = self.keys(thread_id)
        rows = await _script(backend, "read", keys, args)
        found = []
        for row in rows:
            decoded = self._decode(thread_id, keys, row)
            if decoded is not None:
                found.append(decoded[0])
        return found

    async def _get_tuple(self, backend: Backend, config: RunnableConfig) -> CheckpointTuple | None:
        conf = _configurable(config)
        thread_id = _thread(conf)
        checkpoint_ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            args = ["0", _cid(checkpoint_ns, checkpoint_id)]
        else:
            args = ["1", escape_id(checkpoint_ns)]
        found = await self._read(backend, thread_id, args)
        return found[0] if found else None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), else the
        latest of its thread and namespace; None when there is none."""
        return await self._get_tuple(self.memory.backend, config)

    async def _members(
        self,
        backend: Backend,
        keys: GraphThreadKeys,
        checkpoint_ns: str | None,
        high: bytes,
        count: int,
    ) -> list[str]:
        """Up to ``count`` members of ``ids`` below ``high`` (a ZRANGEBYLEX
        bound), newest first, of one namespace or (``None``) of all."""
        low = b"-" if checkpoint_ns is None else b"[" + escape_id(checkpoint_ns).encode() + b"/"
        raw: list[bytes] = await backend.call(
            lambda redis: redis.zrevrangebylex(keys.ids, high, low, start=0, num=count)
        )
        return [_text(member) for member in raw]

    async def _list_thread(
        self,
        backend: Backend,
        thread_id: str,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before_id: str | None,
        limit: int | None,
    ) -> AsyncIterator[CheckpointTuple]:
        keys = self.keys(thread_id)
        if checkpoint_id is not None:
            if checkpoint_ns is None:
                # The checkpoint may be in any namespace of the thread.
                everything = await self._members(backend, keys, None, b"+", -1)
                members = [m for m in everything if _split_cid(m)[1] == checkpoint_id]
            else:
                members = [_cid(checkpoint_ns, checkpoint_id)]
        if checkpoint_ns is None:
            high = b"+"
        else:
            prefix = (escape_id(checkpoint_ns) + "/").encode()
            tail = escape_id(before_id).encode() if before_id is not None else b"\xff"
            high = b"(" + prefix + tail
        while limit is None or limit > 0:
            if checkpoint_id is None:
                page = _PAGE if filter or limit is None else min(_PAGE, limit)
                members = await self._members(backend, keys, checkpoint_ns, high, page)
                last = len(members) < page
                if members:
                    high = b"(" + members[-1].encode()
            else:
                last = True
            if before_id is not None:
                members = [m for m in members if _split_cid(m)[1] < before_id]
            if filter and members:
                records: list[bytes | None] = await _command(backend, "HMGET", keys.ck, *members)
                members = [
                    m
                    for m, raw in zip(members, records, strict=True)
                    if raw is not None and _matches(self._metadata(raw, keys.ck), filter)
                ]
            if members:
                for tup in await self._read(backend, thread_id, ["0", *members]):
                    if limit is not None:
                        if limit <= 0:
                            return
                        limit -= 1
                    yield tup
            if last:
                return

    def _metadata(self, raw: bytes, key: str) -> dict[str, Any]:
        fields = _unpack(raw, key)
        metadata: dict[str, Any] = self.serde.loads_typed((fields[2], fields[3]))
        return metadata

    async def _threads(self, backend: Backend) -> list[str]:
        """Every thread of the namespace (SCAN)."""
        threads: set[str] = set()
        cursor = "0"
        pattern = self._layout.graph_threads_pattern()
        while True:
            cursor, batch = await backend.call(
                functools.partial(scan_once, cursor=cursor, pattern=pattern)
            )
            for raw in batch:
                thread = self._layout.graph_thread_of(_text(raw))
                if thread is not None:
                    threads.add(thread)
            if cursor == "0":
                return sorted(threads)

    async def _list(
        self,
        backend: Backend,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidInput(f"limit must be an int or None, got {limit!r}")
        before_id = get_checkpoint_id(before) if before else None
        if config is not None:
            conf = _configurable(config)
            threads = [_thread(conf)]
            checkpoint_ns: str | None = conf.get("checkpoint_ns")
            checkpoint_id = get_checkpoint_id(config)
        else:
            threads = await self._threads(backend)
            checkpoint_ns = checkpoint_id = None
        for thread_id in threads:
            async for tup in self._list_thread(
                backend, thread_id, checkpoint_ns, checkpoint_id, filter, before_id, limit
            ):
                if limit is not None:
                    limit -= 1
                yield tup
            if limit is not None and limit <= 0:
                return

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, when
        it names one; every thread when ``config`` is None), whose metadata has
        every ``filter`` item, older than ``before``'s checkpoint, at most ``limit``."""
        async for tup in self._list(self.memory.backend, config, filter, before, limit):
            yield tup

    # -- writes -----------------------------------------------------------------------

    async def _put(
        self,
        backend: Backend,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = _configurable(config)
        thread_id = _thread(conf)
        checkpoint_ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = checkpoint["id"]
        parent = conf.get("checkpoint_id")
        values = checkpoint["channel_values"]
        stored = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        full_metadata = get_serializable_checkpoint_metadata(config, metadata)
        ck_type, ck_bytes = self.serde.dumps_typed(stored)
        md_type, md_bytes = self.serde.dumps_typed(full_metadata)
        record = _pack([ck_type, ck_bytes, md_type, md_bytes, parent])
        run_id = full_metadata.get("run_id")
        run = escape_id(str(run_id)) if run_id else ""
        refs = " ".join(
            _blob_ref(channel, version)
            for channel, version in checkpoint["channel_versions"].items()
        )
        ens = escape_id(checkpoint_ns)
        blobs: list[Any] = []
        for channel, version in new_versions.items():
            if channel in values:
                blobs += [
                    f"{ens}/{_blob_ref(channel, version)}",
                    _pack(self._dump(values[channel])),
                ]
        if run:
            await self._index_run(backend, run_id, thread_id)
        keys = self.keys(thread_id)
        await _script(
            backend,
            "put",
            keys,
            [self._ttl_ms, _cid(checkpoint_ns, checkpoint_id), record, f"{run}|{refs}", *blobs],
        )
        return _config(conf["thread_id"], checkpoint_ns, checkpoint_id)

    def _dump(self, value: Any) -> list[Any]:
        value_type, value_bytes = self.serde.dumps_typed(value)
        return [value_type, value_bytes]

    async def _index_run(self, backend: Backend, run_id: Any, thread_id: str) -> None:
        key = self._layout.graph_run(str(run_id))
        member = escape_id(thread_id)
        ttl = self._ttl_ms

        async def index(redis: Any) -> None:
            pipe = redis.pipeline(transaction=False)
            pipe.sadd(key, member)
            if ttl:
                pipe.pexpire(key, ttl)
            await pipe.execute()

        await backend.call(index)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (its parent is ``config``'s ``checkpoint_id``) and
        the values of the channels in ``new_versions``; returns its config."""
        return await self._put(self.memory.backend, config, checkpoint, metadata, new_versions)

    async def _put_writes(
        self,
        backend: Backend,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        conf = _configurable(config)
        thread_id = _thread(conf)
        checkpoint_ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = conf.get("checkpoint_id")
        if not checkpoint_id:
            raise InvalidInput("put_writes needs the checkpoint_id of the checkpoint in config")
        cid = _cid(checkpoint_ns, checkpoint_id)
        args: list[Any] = [self._ttl_ms]
        for idx, (channel, value) in enumerate(writes):
            index = WRITES_IDX_MAP.get(channel, idx)
            value_type, value_bytes = self.serde.dumps_typed(value)
            args += [
                f"{cid}/{escape_id(task_id)}/{index}",
                _pack([task_id, channel, value_type, value_bytes, task_path, index]),
                "1" if index < 0 else "0",
            ]
        if len(args) > 1:
            await _script(backend, "put_writes", self.keys(thread_id), args)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the pending writes of a task on ``config``'s checkpoint."""
        await self._put_writes(self.memory.backend, config, writes, task_id, task_path)

    # -- deletion and maintenance ---------------------------------------------------------

    async def _run_ids(self, backend: Backend, keys: GraphThreadKeys) -> set[str]:
        members: list[bytes] = await backend.call(lambda redis: redis.zrange(keys.runs, 0, -1))
        return {_text(m).partition("/")[0] for m in members}

    async def _forget_runs(self, backend: Backend, thread_id: str, runs: Sequence[str]) -> None:
        """Drop ``thread_id`` from the index of each escaped run id of ``runs``."""
        member = escape_id(thread_id)
        for run in runs:
            key = self._layout.graph_run(unescape_id(run))
            await _command(backend, "SREM", key, member)

    async def _delete_thread(self, backend: Backend, thread_id: str) -> None:
        keys = self.keys(str(thread_id))
        runs = await self._run_ids(backend, keys)
        await backend.call(lambda redis: redis.unlink(*keys.all()))
        await self._forget_runs(backend, str(thread_id), sorted(runs))

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and channel value of a thread."""
        await self._delete_thread(self.memory.backend, thread_id)

    async def _delete_for_runs(self, backend: Backend, run_ids: Sequence[str]) -> None:
        for run_id in run_ids:
            key = self._layout.graph_run(str(run_id))
            members: set[bytes] = await _command(backend, "SMEMBERS", key)
            for raw in sorted(members):
                thread_id = unescape_id(_text(raw))
                await _script(
                    backend, "delete_runs", self.keys(thread_id), [escape_id(str(run_id))]
                )
            await _command(backend, "UNLINK", key)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id``
        is one of ``run_ids``, in every thread."""
        await self._delete_for_runs(self.memory.backend, run_ids)

    async def _copy_thread(self, backend: Backend, source: str, target: str) -> None:
        src, dst = self.keys(str(source)), self.keys(str(target))
        ck, ix, bl, wr = await backend.atomic(
            [("HGETALL", src.ck), ("HGETALL", src.ix), ("HGETALL", src.bl), ("HGETALL", src.wr)],
            key=src.ck,
        )
        runs = {run for raw in _pairs(ix).values() if (run := _text(raw).partition("|")[0])}
        for run in sorted(runs):
            await self._index_run(backend, unescape_id(run), str(target))
        blobs = [x for pair in _pairs(bl).items() for x in pair]
        writes = [x for pair in _pairs(wr).items() for x in pair]
        ixs = _pairs(ix)
        checkpoints = [x for c, raw in _pairs(ck).items() if c in ixs for x in (c, raw, ixs[c])]
        for kind, flat, width in (("b", blobs, 2), ("w", writes, 2), ("c", checkpoints, 3)):
            step = _COPY_BATCH * width
            for start in range(0, len(flat), step):
                await _script(
                    backend, "import", dst, [self._ttl_ms, kind, *flat[start : start + step]]
                )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, write and channel value of a thread into
        another (checkpoints already in the target with the same id are replaced)."""
        await self._copy_thread(self.memory.backend, source_thread_id, target_thread_id)

    async def _prune(self, backend: Backend, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in _STRATEGIES:
            raise InvalidInput(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self._delete_thread(backend, thread_id)
                continue
            gone = await _script(backend, "prune", self.keys(str(thread_id)), [])
            await self._forget_runs(backend, str(thread_id), [_text(run) for run in gone])

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only the latest checkpoint of each namespace
        of each thread; ``"delete"``: delete the threads."""
        await self._prune(self.memory.backend, thread_ids, strategy)

    # -- sync methods (a background event loop; see redismem.adapters) ------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return run_sync(
            self.memory, lambda m: self._get_tuple(m.backend, config), "get_tuple()", "aget_tuple()"
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect(twin: SessionMemory) -> list[CheckpointTuple]:
            return [t async for t in self._list(twin.backend, config, filter, before, limit)]

        return iter(run_sync(self.memory, collect, "list()", "alist()"))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return run_sync(
            self.memory,
            lambda m: self._put(m.backend, config, checkpoint, metadata, new_versions),
            "put()",
            "aput()",
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        run_sync(
            self.memory,
            lambda m: self._put_writes(m.backend, config, writes, task_id, task_path),
            "put_writes()",
            "aput_writes()",
        )

    def delete_thread(self, thread_id: str) -> None:
        run_sync(
            self.memory,
            lambda m: self._delete_thread(m.backend, thread_id),
            "delete_thread()",
            "adelete_thread()",
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        run_sync(
            self.memory,
            lambda m: self._delete_for_runs(m.backend, run_ids),
            "delete_for_runs()",
            "adelete_for_runs()",
        )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        run_sync(
            self.memory,
            lambda m: self._copy_thread(m.backend, source_thread_id, target_thread_id),
            "copy_thread()",
            "acopy_thread()",
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        run_sync(
            self.memory,
            lambda m: self._prune(m.backend, thread_ids, strategy),
            "prune()",
            "aprune()",
        )

    def close(self) -> None:
        """Close the background twin of the ``Memory`` the sync methods use
        (the next sync call opens another). The ``Memory`` stays open."""
        close_twin(self.memory)

    async def aclose(self) -> None:
        """``close()`` for async code."""
        await aclose_twin(self.memory)


def _matches(metadata: Any, wanted: dict[str, Any]) -> bool:
    return all(metadata.get(key) == value for key, value in wanted.items())


def _pairs(reply: Any) -> dict[str, Any]:
    """A HGETALL reply (a dict, or a flat list through a MULTI) as str -> value."""
    if isinstance(reply, dict):
        return {_text(k): v for k, v in reply.items()}
    return {_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}
