"""The long-term store: namespaced, versioned, searchable JSON items (``mem.store``).

LangGraph ``BaseStore`` semantics, async::

    store = LongTermStore(mem)
    await store.put(("alice", "prefs"), "food", {"text": "likes ramen"}, source={"session": "s1"})
    await store.search(("alice",), query="ramen", filter={"stars": {"$gte": 4}})

A namespace is a non-empty tuple of labels; its first label is the tenant.
Every key of a tenant lies under its user hash tag (see ``keys``), so one
tenant's data shares one Cluster slot, ``Memory.clear_user(tenant)`` removes
it, and a search never reads another tenant unless its prefix is empty.

Writes (``put``, ``delete``, ``purge``) are Lua scripts: each lands whole or
not at all, and a put or delete re-sent with the same ``write_id`` applies
once. Timestamps and versions come from the server. Items put with a ``ttl``
expire with their history; index entries of expired items are cleaned up a
bounded batch per write (and before ``list_namespaces``), and reads never
return an expired item.

Search: without a query, the newest ``updated_at`` first; with one, BM25
over the indexed text of the items (terms from ``recall.terms``, scores from
``recall.bm25`` with ``K1`` and ``B`` below), with the document statistics of
the tenant; only items holding a query term are found
(a query of stop words alone finds nothing). ``filter`` matches value fields by
dotted path, exactly or with ``$eq $ne $gt $gte $lt $lte $in`` (the language:
``longterm.filters``); ``index`` names the searchable fields (``longterm.jsonpaths``),
and each put keeps the ``index`` it was given.
Ranking reads at most ``MAX_POSTINGS`` postings per query term (the highest
term frequencies), and a narrow prefix is found by walking the tenant's items
newest first: both are linear in the tenant's size, not the store's.

``histories`` lists a tenant's items with everything needed to put them back
(``redismem.portability`` exports a user with it): every version, deleted
items too, each item's ``index`` and deadline.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime
from itertools import combinations
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from redismem.checks import check_int, check_optional_int, check_optional_str, check_write_id
from redismem.core.backend import backend_of
from redismem.core.codec import ms_to_datetime
from redismem.core.connection import scan_once
from redismem.core.epochs import EpochMoved, in_epoch
from redismem.core.guard import read_guarded
from redismem.core.keys import (
    StoreKeys,
    escape_id,
    parse_store_namespace_ref,
    parse_store_ref,
    store_namespace_ref,
    store_ref,
    validate_id,
)
from redismem.errors import BackendUnavailable, CorruptData, InvalidInput, VersionConflict
from redismem.longterm import filters, jsonpaths
from redismem.longterm.items import (
    Item,
    ItemVersion,
    Record,
    SearchItem,
    check_namespace,
    check_pattern,
    decode_record,
    item_fields,
    namespace_matches,
    record_payload,
    search_item,
)
from redismem.recall import bm25
from redismem.recall.terms import terms
from redismem.values import check_json_value

if TYPE_CHECKING:
    from redismem.core.backend import Backend, HasBackend

__all__ = ["Item", "ItemHistory", "ItemVersion", "LongTermStore", "SearchItem"]

T = TypeVar("T")

#: Postings read per query term (the highest term frequencies first).
MAX_POSTINGS = 10_000
#: BM25 parameters (``redismem.recall.bm25``): the textbook values; recall
#: tunes its own (``recall.ranking``).
K1 = 1.2
B = 0.75
#: Longest ttl accepted, in seconds (100 years).
MAX_TTL = 100 * 365 * 86_400.0

_PAGE = 100
_PURGE_BATCH = 200
_PRUNE_BATCH = 500
_PRUNE_ROUNDS = 1_000
#: Most fields whose combinations are tried to find the index of an item
#: stored before puts kept it (``_index_of``).
_MAX_AMBIGUOUS = 12


# -- argument checks and replies ------------------------------------------------


def _check_json_dict(value: object, name: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise InvalidInput(f"{name} must be a dict, not {type(value).__name__}")
    try:
        check_json_value(value, name)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    return value


def _ttl_ms(ttl: object, name: str = "ttl") -> int:
    """Seconds -> milliseconds (at least 1); None -> 0 (never expires)."""
    if ttl is None:
        return 0
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not 0 < ttl <= MAX_TTL  # before isfinite: no OverflowError for a huge int
        or not math.isfinite(ttl)
    ):
        raise InvalidInput(f"{name} must be a number of seconds in (0, {MAX_TTL:.0f}] or None")
    return max(1, round(ttl * 1000))


def _text(raw: bytes, key: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptData(key, "member is not UTF-8") from exc


def _number(raw: Any, key: str) -> float:
    try:
        return float(raw or 0)
    except (TypeError, ValueError) as exc:
        raise CorruptData(key, f"not a number: {raw!r}") from exc


def _score_pairs(reply: Any) -> list[tuple[Any, Any]]:
    """``(member, score)`` pairs of a WITHSCORES reply, flat or already paired."""
    if reply and isinstance(reply[0], list | tuple):
        return [(m, s) for m, s in reply]
    return list(zip(reply[::2], reply[1::2], strict=True))


class ItemHistory(BaseModel):
    """An item with everything needed to put it back (``LongTermStore.histories``)."""

    model_config = ConfigDict(extra="forbid")

    namespace: tuple[str, ...]
    key: str
    #: Every version, oldest first: puts and delete tombstones (as ``history``).
    versions: list[ItemVersion]
    #: The ``index`` of its latest put, as given to ``put`` (None: every
    #: string; False: none; else field paths). A put stored before puts kept
    #: their index: found from the terms the store holds for the live version
    #: (exact paths such as ``"a.b"`` or ``"a[0]"`` where some set of fields
    #: gives exactly those terms, else the closest superset: None), False
    #: when the item is deleted.
    index: list[str] | Literal[False] | None
    #: When the item and its history expire (None: never).
    expires_at: datetime | None


# -- the store ----------------------------------------------------------------------------


class LongTermStore:
    """Namespaced long-term items of one ``Memory`` (see the module docstring)."""

    def __init__(self, backend: Backend | HasBackend, *, default_ttl: float | None = None) -> None:
        self._backend = backend_of(backend)
        self._default_ttl_ms = _ttl_ms(default_ttl, "default_ttl")

    def _keys(self, tenant: str, epoch: int) -> StoreKeys:
        return self._backend.layout.store(tenant, epoch)

    async def _in_epoch(self, tenant: str, op: Callable[[StoreKeys], Awaitable[T]]) -> T:
        """``op(keys)`` on the tenant's keys in its current epoch (built
        again when the tenant was cleared meanwhile; see ``redismem.core.guard``)."""
        return await in_epoch(self._backend.epochs, tenant, lambda e: op(self._keys(tenant, e)))

    async def _run(
        self, name: str, scope: StoreKeys, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run a store script on keys built for ``scope``'s epoch (guarded)."""
        return await self._backend.scripts.run_guarded(name, scope, keys, args)

    async def _read(self, keys: StoreKeys, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies of plain reads of ``keys``' epoch, in one MULTI with
        the guard: ``EpochMoved`` when the tenant was cleared meanwhile."""
        return await read_guarded(self._backend, keys, commands)

    # -- writes ---------------------------------------------------------------

    async def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        *,
        index: list[str] | Literal[False] | None = None,
        ttl: float | None = None,
        source: dict[str, Any] | None = None,
        write_id: str | None = None,
        if_version: int | None = None,
    ) -> Item:
        """Store ``value`` under ``(namespace, key)`` as a new version.

        ``index``: the field paths whose text is searchable (``"a.b"``,
        ``"a[*].b"``, ``"$"``); None: every string; False: not searchable.
        ``ttl``: seconds until the item (and its history) expires; None: the
        store's default. ``write_id`` names the put: re-sent with the same id
        (e.g. after ``BackendUnavailable``, whose ``write_id`` it is), it
        creates no second version. ``if_version``: put only if the item's
        live version is this one (0: only if there is no live item), else
        raise ``VersionConflict`` and write nothing: a read-modify-write
        that loses no concurrent update.
        """
        item = await self.put_guarded(
            namespace,
            key,
            value,
            index=index,
            ttl=ttl,
            source=source,
            write_id=write_id,
            if_version=if_version,
        )
        assert item is not None  # only a guarded put is ever refused
        return item

    async def put_guarded(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        *,
        index: list[str] | Literal[False] | None = None,
        ttl: float | None = None,
        source: dict[str, Any] | None = None,
        write_id: str | None = None,
        if_version: int | None = None,
        guard: tuple[str, str] | None = None,
        while_at: tuple[tuple[str, ...], str, int] | None = None,
    ) -> Item | None:
        """``put``, for redismem's own writers on behalf of a session:
        ``guard`` is ``(key, gen)``, a hash in the tenant's slot (the
        session's meta) whose ``gen`` field must still be ``gen``; returns
        None, writing nothing, when it is not (the session was cleared).
        ``while_at``: ``(namespace, key, version)`` of another item of the
        same tenant; the put lands only while that item is at that version
        (0: none), else ``VersionConflict`` and nothing is written."""
        ns = check_namespace(namespace, "namespace")
        item_key = validate_id(key, "key")
        item_value = _check_json_dict(value, "value")
        item_source = None if source is None else _check_json_dict(source, "source")
        paths = jsonpaths.check_index(index)
        spec: list[str] | Literal[False] | None = False if paths == [] else paths
        ttl_arg = self._default_ttl_ms if ttl is None else _ttl_ms(ttl)
        op = check_write_id(write_id)
        expected = "" if if_version is None else check_int("if_version", if_version)
        counts = jsonpaths.indexed_terms(item_value, paths)
        ref = store_ref(ns, item_key)
        other = None
        if while_at is not None:
            other_ns = check_namespace(while_at[0], "while_at namespace")
            if other_ns[0] != ns[0]:
                raise InvalidInput("while_at must name an item of the same tenant")
            other = store_ref(other_ns, validate_id(while_at[1], "while_at key"))
            check_int("while_at version", while_at[2])
        pairs = [part for term, n in counts.items() for part in (escape_id(term), n)]
        payload = record_payload(item_value, item_source, spec)

        def put(keys: StoreKeys) -> Awaitable[Any]:
            args = [
                *keys.key_prefixes(),
                ref,
                op,
                ttl_arg,
                payload,
                sum(counts.values()),
                expected,
                "" if guard is None else guard[1],
                "" if while_at is None else while_at[2],
                *pairs,
            ]
            script_keys = [
                *keys.tenant_keys(),
                keys.item(ref),
                keys.history(ref),
                keys.item(ref) if guard is None else guard[0],
                keys.item(ref) if other is None else keys.item(other),
                *(keys.term(term) for term in counts),
            ]
            return self._run("store_put", keys, script_keys, args)

        try:
            if guard is None:
                status, version, created, updated = await self._in_epoch(ns[0], put)
            else:
                # On behalf of a session: in that session's epoch only.
                epoch = self._backend.layout.parse_key(guard[0]).epoch
                try:
                    status, version, created, updated = await put(self._keys(ns[0], epoch))
                except EpochMoved:
                    return None
        except BackendUnavailable as exc:
            exc.write_id = op
            exc.add_note(f"the put may still land: retry it with write_id={op!r}")
            raise
        if status == -2:
            return None
        if status == -3:
            assert while_at is not None
            raise VersionConflict(f"item {while_at[1]!r}", while_at[2], int(version))
        if status == -1:
            raise VersionConflict(f"item {key!r} of {namespace!r}", int(expected), int(version))
        record = Record(version, created, updated, False, item_value, item_source, spec, True)
        return Item(**item_fields(ns, item_key, record))

    async def delete(
        self,
        namespace: tuple[str, ...],
        key: str,
        *,
        source: dict[str, Any] | None = None,
        write_id: str | None = None,
    ) -> None:
        """Delete an item; its history keeps the last version and a tombstone
        (carrying ``source``). Deleting a missing item does nothing."""
        ns = check_namespace(namespace, "namespace")
        item_key = validate_id(key, "key")
        item_source = None if source is None else _check_json_dict(source, "source")
        op = check_write_id(write_id)
        ref = store_ref(ns, item_key)
        tombstone = record_payload(None, item_source)

        def delete(keys: StoreKeys) -> Awaitable[Any]:
            script_keys = [*keys.tenant_keys(), keys.item(ref), keys.history(ref)]
            args = [*keys.key_prefixes(), ref, op, tombstone]
            return self._run("store_delete", keys, script_keys, args)

        try:
            await self._in_epoch(ns[0], delete)
        except BackendUnavailable as exc:
            exc.write_id = op
            exc.add_note(f"the delete may still land: retry it with write_id={op!r}")
            raise

    async def purge(self, namespace_prefix: tuple[str, ...]) -> int:
        """Remove for good every item under ``namespace_prefix`` (at least the
        tenant), with its history and index entries: a data-deletion request.
        Returns the number of items removed (live or with a history).

        Runs in batches, each atomic: an item put under the prefix while the
        purge runs may survive it."""
        prefix = check_namespace(namespace_prefix, "namespace_prefix")

        async def purge(keys: StoreKeys) -> int:
            args = [*keys.key_prefixes(), store_namespace_ref(prefix), _PURGE_BATCH, "0"]
            total = 0
            while True:
                removed, more = await self._run("store_purge", keys, keys.tenant_keys(), args)
                total += int(removed)
                if not more:
                    return total

        return await self._in_epoch(prefix[0], purge)

    async def purge_item(self, namespace: tuple[str, ...], key: str) -> bool:
        """Remove one item for good, with its history: True if there was one."""
        ns = check_namespace(namespace, "namespace")
        item_key = validate_id(key, "key")

        async def purge(keys: StoreKeys) -> bool:
            args = [*keys.key_prefixes(), store_ref(ns, item_key), 1, "1"]
            removed, _more = await self._run("store_purge", keys, keys.tenant_keys(), args)
            return bool(removed)

        return await self._in_epoch(ns[0], purge)

    async def _prune(self, keys: StoreKeys) -> None:
        """Clean up after the tenant's expired items (a batch per script call)."""
        args = [*keys.key_prefixes(), _PRUNE_BATCH]
        for _ in range(_PRUNE_ROUNDS):
            if not await self._run("store_prune", keys, keys.tenant_keys(), args):
                return

    # -- reads ------------------------------------------------------------------

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """The item's current version, or None (never put, deleted or expired)."""
        ns = check_namespace(namespace, "namespace")
        item_key = validate_id(key, "key")
        ref = store_ref(ns, item_key)

        async def get(keys: StoreKeys) -> Item | None:
            [raw] = await self._read(keys, [("GET", keys.item(ref))])
            if raw is None:
                return None
            return Item(**item_fields(ns, item_key, decode_record(keys.item(ref), raw)))

        return await self._in_epoch(ns[0], get)

    async def history(self, namespace: tuple[str, ...], key: str) -> list[ItemVersion]:
        """Every version of the item, oldest first: earlier puts, delete
        tombstones and the current version. Empty once purged or expired."""
        ns = check_namespace(namespace, "namespace")
        item_key = validate_id(key, "key")
        ref = store_ref(ns, item_key)

        async def history(keys: StoreKeys) -> list[ItemVersion]:
            old, current = await self._read(
                keys, [("LRANGE", keys.history(ref), 0, -1), ("GET", keys.item(ref))]
            )
            records = [decode_record(keys.history(ref), raw) for raw in old]
            if current is not None:
                records.append(decode_record(keys.item(ref), current))
            return [ItemVersion(**item_fields(ns, item_key, r), deleted=r.deleted) for r in records]

        return await self._in_epoch(ns[0], history)

    async def histories(self, namespace_prefix: tuple[str, ...], /) -> list[ItemHistory]:
        """Every item under ``namespace_prefix`` (at least the tenant) that
        has a version, deleted items too (until purged or expired), sorted by
        namespace and key, each with its whole ``history``, the ``index`` of
        its latest put and its deadline: what putting it back needs.

        Read a page of items at a time, the versions and deadlines of a page
        as of one instant (not the whole prefix); started again if the tenant
        is cleared meanwhile."""
        prefix = check_namespace(namespace_prefix, "namespace_prefix")
        ref_prefix = store_namespace_ref(prefix)

        async def histories(keys: StoreKeys) -> list[ItemHistory]:
            found: list[ItemHistory] = []
            low = "[" + ref_prefix
            while True:
                [page] = await self._read(
                    keys, [("ZRANGEBYLEX", keys.refs, low, "+", "LIMIT", 0, _PAGE)]
                )
                refs = [_text(raw, keys.refs) for raw in page]
                mine = [ref for ref in refs if ref.startswith(ref_prefix)]
                found += await self._histories(keys, mine)
                if len(mine) < _PAGE:
                    return sorted(found, key=lambda i: (i.namespace, i.key))
                low = "(" + refs[-1]

        return await self._in_epoch(prefix[0], histories)

    async def _histories(self, keys: StoreKeys, refs: list[str]) -> list[ItemHistory]:
        """``ItemHistory`` of the items ``refs`` (those still there)."""
        if not refs:
            return []
        commands: list[tuple[Any, ...]] = []
        for ref in refs:
            commands += [
                ("LRANGE", keys.history(ref), 0, -1),
                ("GET", keys.item(ref)),
                ("ZSCORE", keys.expiry, ref),
            ]
        replies = await self._read(keys, commands)
        read: list[tuple[str, list[Record], Any]] = []
        for n, ref in enumerate(refs):
            old, current, deadline = replies[3 * n : 3 * n + 3]
            records = [decode_record(keys.history(ref), raw) for raw in old]
            if current is not None:
                records.append(decode_record(keys.item(ref), current))
            if records:  # else expired since the refs were read
                read.append((ref, records, deadline))
        # Items whose live version was put before puts kept their index: the
        # frequencies of its terms in the postings (a term not indexed has none).
        guess = {
            ref: list(jsonpaths.indexed_terms(records[-1].value, None))
            for ref, records, _ in read
            if not records[-1].deleted and not records[-1].index_kept
        }
        postings = [("ZSCORE", keys.term(t), ref) for ref, found in guess.items() for t in found]
        scores = iter(await self._read(keys, postings) if postings else [])
        out = []
        for ref, records, deadline in read:
            try:
                namespace, key = parse_store_ref(ref)
            except InvalidInput as exc:
                raise CorruptData(keys.refs, f"bad item ref {ref!r}") from exc
            if ref in guess:
                held = {t: next(scores) for t in guess[ref]}
                indexed = Counter(
                    {t: round(_number(f, keys.term(t))) for t, f in held.items() if f is not None}
                )
                index = _index_of(records[-1].value, indexed)
            else:
                puts = [r for r in records if not r.deleted]
                index = puts[-1].index if puts and puts[-1].index_kept else False
            out.append(
                ItemHistory(
                    namespace=namespace,
                    key=key,
                    versions=[
                        ItemVersion(**item_fields(namespace, key, r), deleted=r.deleted)
                        for r in records
                    ],
                    index=index,
                    expires_at=None
                    if deadline is None
                    else ms_to_datetime(_number(deadline, keys.expiry)),
                )
            )
        return out

    async def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        """Items whose namespace starts with ``namespace_prefix`` (``()``:
        every tenant's), matching ``filter``; ranked by keyword relevance to
        ``query`` (only items with a query term), else newest first."""
        prefix = check_namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
        flt = filters.check_filter(filter)
        count = check_int("limit", limit)
        skip = check_int("offset", offset)
        check_optional_str("query", query)
        if count == 0:
            return []
        want = skip + count
        weights = Counter(terms(query)) if query else None
        tenants = [prefix[0]] if prefix else await self._tenants("updated")
        ref_prefix = store_namespace_ref(prefix)
        found: list[SearchItem] = []
        for tenant in tenants:
            if weights is None:
                found += await self._in_epoch(
                    tenant, lambda keys: self._newest(keys, ref_prefix, flt, want)
                )
            elif weights:
                found += await self._in_epoch(
                    tenant, lambda keys: self._ranked(keys, ref_prefix, weights, flt, want)
                )
        if weights is None:
            found.sort(key=lambda i: (i.updated_at, i.namespace, i.key), reverse=True)
        else:
            found.sort(key=lambda i: (-(i.score or 0.0), -i.updated_at.timestamp()))
        return found[skip:want]

    async def _load(
        self, keys: StoreKeys, refs: Sequence[str], flt: dict[str, Any], scores: dict[str, float]
    ) -> list[SearchItem]:
        """The live items among ``refs`` that match ``flt``, in order."""
        if not refs:
            return []
        redis_keys = [keys.item(ref) for ref in refs]
        [raws] = await self._read(keys, [("MGET", *redis_keys)])
        out = []
        for ref, redis_key, raw in zip(refs, redis_keys, raws, strict=True):
            if raw is None:
                continue  # expired or deleted since the index was read
            record = decode_record(redis_key, raw)
            if filters.matches(record.value, flt):
                out.append(search_item(ref, redis_key, record, scores.get(ref)))
        return out

    async def _newest(
        self, keys: StoreKeys, ref_prefix: str, flt: dict[str, Any], want: int
    ) -> list[SearchItem]:
        """Up to ``want`` of the tenant's matching items, newest first."""
        out: list[SearchItem] = []
        seen: set[str] = set()
        start, page = 0, _PAGE
        while len(out) < want:
            [raw] = await self._read(keys, [("ZREVRANGE", keys.updated, start, start + page - 1)])
            if not raw:
                break
            start, page = start + page, min(page * 2, 1000)
            refs = [_text(r, keys.updated) for r in raw]
            picked = [r for r in refs if r.startswith(ref_prefix) and r not in seen]
            seen.update(picked)
            out += await self._load(keys, picked, flt, {})
        return out[:want]

    async def _ranked(
        self,
        keys: StoreKeys,
        ref_prefix: str,
        weights: Counter[str],
        flt: dict[str, Any],
        want: int,
    ) -> list[SearchItem]:
        """Up to ``want`` of the tenant's matching items, by BM25 score."""
        query_terms = list(weights)
        commands: list[tuple[Any, ...]] = [("HMGET", keys.stats, "docs", "len")]
        for term in query_terms:
            commands.append(("ZCARD", keys.term(term)))
            commands.append(("ZREVRANGE", keys.term(term), 0, MAX_POSTINGS - 1, "WITHSCORES"))
        (docs_raw, length_raw), *per_term = await self._read(keys, commands)
        docs = _number(docs_raw, keys.stats)
        average = _number(length_raw, keys.stats) / docs if docs > 0 else 1.0
        hits: dict[str, list[tuple[float, float]]] = {}
        for position, term in enumerate(query_terms):
            df, members = per_term[2 * position], _score_pairs(per_term[2 * position + 1])
            n = max(docs, df)
            idf = bm25.idf(df, n) * weights[term]
            for member, tf in members:
                ref = _text(member, keys.term(term))
                if ref.startswith(ref_prefix):
                    hits.setdefault(ref, []).append((idf, float(tf)))
        if not hits:
            return []
        refs = list(hits)
        [lengths] = await self._read(keys, [("HMGET", keys.doclen, *refs)])
        scores = {
            ref: sum(
                bm25.score(
                    tf, _number(length, keys.doclen), max(average, 1e-9), k1=K1, b=B, idf=idf
                )
                for idf, tf in hits[ref]
            )
            for ref, length in zip(refs, lengths, strict=True)
        }
        ranked = sorted(refs, key=lambda r: (-scores[r], r))
        out: list[SearchItem] = []
        for start in range(0, len(ranked), _PAGE):
            if len(out) >= want:
                break
            out += await self._load(keys, ranked[start : start + _PAGE], flt, scores)
        return out[:want]

    async def list_namespaces(
        self,
        *,
        prefix: tuple[str, ...] | None = None,
        suffix: tuple[str, ...] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The namespaces holding live items, sorted. ``prefix``/``suffix``
        match labels from the start/end, ``"*"`` matching any one label;
        ``max_depth`` cuts longer namespaces to their first labels (merged)."""
        pre = check_pattern(prefix, "prefix")
        suf = check_pattern(suffix, "suffix")
        depth = check_optional_int("max_depth", max_depth, minimum=1)
        count = check_int("limit", limit)
        skip = check_int("offset", offset)
        if pre and pre[0] != "*":
            tenants = [pre[0]]
        else:
            tenants = await self._tenants("namespaces")
        found: set[tuple[str, ...]] = set()
        for tenant in tenants:
            for namespace in await self._in_epoch(tenant, self._namespaces):
                if namespace_matches(namespace, pre, suf):
                    found.add(namespace if depth is None else namespace[:depth])
        return sorted(found)[skip : skip + count]

    async def _namespaces(self, keys: StoreKeys) -> list[tuple[str, ...]]:
        await self._prune(keys)
        key = keys.namespaces
        [fields] = await self._read(keys, [("HKEYS", key)])
        out = []
        for field in fields:
            try:
                out.append(parse_store_namespace_ref(_text(field, key)))
            except InvalidInput as exc:
                raise CorruptData(key, f"bad namespace ref {field!r}") from exc
        return out

    async def _tenants(self, kind: str) -> list[str]:
        """Tenants having a store key of ``kind``, found with SCAN (never KEYS)."""
        layout = self._backend.layout
        pattern = layout.store_pattern(kind)
        tenants: set[str] = set()
        cursor = "0"
        while True:
            scan = functools.partial(scan_once, cursor=cursor, pattern=pattern)
            cursor, batch = await self._backend.call(scan)
            for raw in batch:
                try:
                    parsed = layout.parse_key(raw.decode("utf-8"))
                except (InvalidInput, UnicodeDecodeError):
                    continue
                if parsed.session_id is None and parsed.kind == f"kv:{kind}":
                    tenants.add(parsed.user_id)
            if cursor == "0":
                return sorted(tenants)


# -- the index of an item stored before puts kept it -----------------------------------------


def _index_of(
    value: dict[str, Any], indexed: Counter[str] | None
) -> list[str] | Literal[False] | None:
    """The ``index`` argument that indexes ``value`` as the store holds it:
    the ``indexed`` terms with their frequencies (None or empty: not indexed)."""
    if not indexed:
        return False
    if jsonpaths.indexed_terms(value, None) == indexed:
        return None
    fields = [
        (path, counts)
        for path, text in _leaves(value, "")
        if path is not None and (counts := Counter(terms(text))) and set(counts) <= set(indexed)
    ]
    if not set(indexed) <= {term for _, counts in fields for term in counts}:
        return None  # terms of fields no path can name: index every string
    # A field holding a term no other field holds is indexed; of the others,
    # the fewest that give exactly the indexed terms and frequencies.
    needed: list[int] = []
    ambiguous: list[int] = []
    for n, (_, counts) in enumerate(fields):
        others = {term for m, (_, c) in enumerate(fields) if m != n for term in c}
        (ambiguous if set(counts) <= others else needed).append(n)
    if len(ambiguous) <= _MAX_AMBIGUOUS:
        for size in range(len(ambiguous) + 1):
            for extra in combinations(ambiguous, size):
                chosen = sorted([*needed, *extra])
                total: Counter[str] = Counter()
                for n in chosen:
                    total.update(fields[n][1])
                if total == indexed:
                    return [fields[n][0] for n in chosen]
    return [path for path, _ in fields]


def _leaves(node: Any, path: str | None) -> Iterator[tuple[str | None, str]]:
    """Every string inside ``node`` with the field path naming it (``path``
    "" at the top; None where the path syntax cannot name it: under a key
    holding ``.``, ``[`` or ``]``, an empty key, a top-level ``$``)."""
    if type(node) is str:
        yield path or None, node
    elif type(node) is list:
        for n, element in enumerate(node):
            yield from _leaves(element, None if not path else f"{path}[{n}]")
    elif type(node) is dict:
        for key, element in node.items():
            nameable = (
                path is not None
                and bool(key)
                and not any(c in key for c in ".[]")
                and (path != "" or key != "$")
            )
            if not nameable:
                yield from _leaves(element, None)
            else:
                yield from _leaves(element, f"{path}.{key}" if path else key)
