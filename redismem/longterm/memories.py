"""Typed long-term memories of a user (``mem.memories``), on the long-term store.

Each record (``redismem.longterm.records``) is one store item under
``(user_id, "memories")``, keyed by its id; every change is a new version
of that item, so ``history`` explains every state a record went through,
with the change and its reason. Document chunks are items of their own,
under ``(user_id, "memories-chunks", document_id)``, searchable one by one.
Lookup items under ``(user_id, "memories-keys")`` find a record by its
normalized text (exact duplicates) and a fact by its subject and
single-valued predicate (the current value).

How ``add`` consolidates, deterministically:

* **Exact duplicate** (same kind and normalized text as an active record):
  the new source is added to that record, which is refreshed; no copy.
* **One current value** (a fact with a single-valued predicate): its
  subject and predicate name a *slot*, whose lookup item says which record
  is the current value and when it was *said* (the latest of its sources:
  ``Provenance.at`` - the message's time for extracted facts, ``created_at``
  for dated imports, else now - then message id). A new value said later
  supersedes the current one: the new record is active, the old one kept
  with status ``superseded``, linked both ways (``supersedes``,
  ``superseded_by``, ``superseded_at``). A value said *before* the current
  one (an import, or workers extracting out of order) goes straight into
  history: outcome ``outdated``, status ``superseded``, ``superseded_by``
  the current one. ``restore`` makes a record the current value, said now,
  superseding the one it replaces; deleting or purging the current value
  leaves the slot without one. So at most one record of a slot is active.
* **Near duplicate** (with a ``Consolidator``): the records most like the
  new one, by keyword search, go to it; its decision (add, update, no-op,
  delete) is applied and recorded in the history of the records it touched.

Nothing is removed by these: ``delete`` marks a record ``deleted``, and only
``purge`` removes records for good (a data-deletion request).

Concurrency and faults: every put is conditional on the version read
(``if_version``), so concurrent adds never overwrite each other: the loser
reads again and re-decides. A slot is decided by compare-and-set on its
lookup item (which value is current, when it was said, the value it
replaced, and the few records that may be active: a settle reads these,
not the whole history);
then the records are brought in line with it (``Slots.settle``: slots
live in ``redismem.longterm.slots``, a helper ``Knowledge`` owns): the old value
is superseded before the new one is stored active, and every writer settles
again until the slot holds still, so once the writers are done at most one
record is active, whatever they raced. An ``add`` is idempotent per
``write_id``: its record id derives from it, and its steps each check what
is already done, so an add re-run after a crash or a timeout finishes what
the first run started and adds nothing twice (an add that died after
deciding and is never re-sent leaves its slot without a current value until
the next value is said). Writes on behalf of a session carry a guard (the
session's incarnation), so a session cleared meanwhile gets no memories.

Search finds a fact by its predicate's words too (``predicate_words``:
``lives_in`` is found by "where do I live"), indexed with its text.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from redismem.checks import (
    check_bool,
    check_int,
    check_optional_number,
    check_optional_str,
    check_tags,
    check_write_id,
)
from redismem.core.backend import backend_of
from redismem.core.keys import validate_id
from redismem.errors import InvalidInput, VersionConflict
from redismem.longterm.inputs import (
    as_messages,
    check_kinds,
    check_record,
    check_statuses,
    check_time,
    keyword_user_id,
    notes_or_extracted,
    with_metadata,
)
from redismem.longterm.memory_items import (
    CHUNKS,
    LOOKUPS,
    MAX_TRIES,
    RECORDS,
    AddOutcome,
    AddResult,
    MemoryItems,
    digest,
    utc_now,
)
from redismem.longterm.records import (
    Document,
    DocumentChunk,
    Fact,
    MemoryChange,
    MemoryKind,
    MemoryRecord,
    MemoryStatus,
    Provenance,
    normalize_text,
)
from redismem.longterm.slots import Slots, is_slotted, slot_key, when_said
from redismem.longterm.store import ItemVersion, LongTermStore
from redismem.models import Message

if TYPE_CHECKING:
    from redismem.core.backend import Backend, HasBackend
    from redismem.longterm.consolidation import Consolidator

__all__ = ["AddOutcome", "AddResult", "MemoryHit", "Knowledge"]

#: ``get_all``'s limit when none is given: every record.
_EVERY = 1 << 40
#: Fields that name a fact's value slot or link records: ``update`` leaves them.
_FIXED = {"id", "kind", "sources", "created_at", "updated_at", "status"}
_LINKS = {"supersedes", "superseded_by", "superseded_at"}
_SLOT_FIELDS = {"subject", "predicate", "single_valued"}
#: Characters per document chunk (cut at a word boundary), and the overlap.
CHUNK_CHARS = 800


@dataclass(frozen=True, slots=True)
class MemoryHit:
    record: MemoryRecord
    #: Keyword relevance to the query (None without one).
    score: float | None
    #: For a document found by one of its chunks: that chunk's index.
    chunk: int | None = None


def _text_key(record: MemoryRecord) -> str:
    return "t" + digest(record.kind, normalize_text(record.text))


def _record_id(op: str) -> str:
    return "m" + digest("record", op)


def chunk_text(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """``text`` cut into pieces of at most ``size`` characters, at spaces
    where there are any; every character lands in exactly one piece."""
    pieces: list[str] = []
    rest = text
    while len(rest) > size:
        cut = rest.rfind(" ", size // 2, size)
        cut = size if cut <= 0 else cut + 1
        pieces.append(rest[:cut])
        rest = rest[cut:]
    if rest or not pieces:
        pieces.append(rest)
    return pieces


def _range(field: str, after: int | None, before: int | None) -> dict[str, Any]:
    condition: dict[str, Any] = {}
    if after is not None:
        condition["$gte"] = after
    if before is not None:
        condition["$lt"] = before
    return {field: condition} if condition else {}


class Knowledge:
    """A user's typed long-term memories (see the module docstring)."""

    def __init__(
        self,
        backend: Backend | HasBackend,
        *,
        consolidator: Consolidator | None = None,
        store: LongTermStore | None = None,
    ) -> None:
        self._backend = backend_of(backend)
        self._store = store if store is not None else LongTermStore(self._backend)
        self._consolidator = consolidator
        ttl_ms = self._backend.config.memory_ttl_ms
        # Records, lookups and chunks as store items; single-valued facts'
        # slots on top of them (``redismem.longterm.slots``).
        self._items = MemoryItems(self._store, ttl=None if ttl_ms is None else ttl_ms / 1000)
        self._slots = Slots(self._items)

    @property
    def consolidator(self) -> Consolidator | None:
        return self._consolidator

    # -- writes ---------------------------------------------------------------------

    @overload
    async def add(
        self,
        record: MemoryRecord | Mapping[str, Any],
        *,
        user_id: str,
        source: Provenance | None = None,
        write_id: str | None = None,
        infer: bool = True,
        metadata: Mapping[str, str] | None = None,
    ) -> AddResult: ...

    @overload
    async def add(
        self,
        record: str | Sequence[Mapping[str, Any] | Message],
        *,
        user_id: str,
        source: Provenance | None = None,
        write_id: str | None = None,
        infer: bool = True,
        metadata: Mapping[str, str] | None = None,
    ) -> list[AddResult]: ...

    @keyword_user_id
    async def add(
        self,
        record: MemoryRecord | Mapping[str, Any] | str | Sequence[Mapping[str, Any] | Message],
        *,
        user_id: str,
        source: Provenance | None = None,
        write_id: str | None = None,
        infer: bool = True,
        metadata: Mapping[str, str] | None = None,
    ) -> AddResult | list[AddResult]:
        """Remember ``record`` for ``user_id``, consolidated with what is
        remembered already (see the module docstring).

        ``record`` is a ``Fact``, ``Document``, ``Relationship``, ``Goal``,
        ``AgentTask`` or ``Action`` (or its dict): the ``AddResult`` is
        returned. Or, as in mem0, plain text (``"I like tea"``) or chat
        messages (``[{"role": "user", "content": ...}, ...]``): the memories
        the rule extractor finds in what the user says are added (``infer``;
        plain text it finds nothing in, or any text with ``infer=False``, is
        kept as a note, a ``Document``), and a list of ``AddResult`` is
        returned, one per memory (empty when the messages hold none).

        ``source`` is the provenance (default: the record's own last
        source, else an "api" one); ``write_id`` names the add: re-sent with
        the same id (after ``BackendUnavailable``), it adds nothing twice
        and finishes what the first try started. ``metadata`` (mem0's) is
        added to the tags of every record added (``inputs.with_metadata``)."""
        messages = as_messages(record)
        if messages is None:
            [tagged] = with_metadata([cast("MemoryRecord | Mapping[str, Any]", record)], metadata)
            result = await self.add_guarded(
                tagged,
                user_id=user_id,
                source=source,
                write_id=write_id,
            )
            assert result is not None  # only a guarded add is ever refused
            return result
        op = check_write_id(write_id)
        found = notes_or_extracted(messages, infer=check_bool("infer", infer), text=record)
        drafts = with_metadata(list(found), metadata)
        results = []
        for position, draft in enumerate(drafts):
            added = await self.add_guarded(
                draft, user_id=user_id, source=source, write_id=f"{op}:{position}"
            )
            assert added is not None  # only a guarded add is ever refused
            results.append(added)
        return results

    @keyword_user_id
    async def add_guarded(
        self,
        record: MemoryRecord | Mapping[str, Any],
        *,
        user_id: str,
        source: Provenance | None = None,
        write_id: str | None = None,
        guard: tuple[str, str] | None = None,
    ) -> AddResult | None:
        """``add`` of one record, for redismem's workers, on behalf of a
        session: ``guard`` is the session's ``(meta key, gen)``; None is
        returned, and nothing added, once that session was cleared."""
        uid = validate_id(user_id, "user_id")
        new = check_record(record)
        op = check_write_id(write_id)
        if source is not None and not isinstance(source, Provenance):
            raise InvalidInput(f"source must be a Provenance, not {type(source).__name__}")
        base = source or (new.sources[-1] if new.sources else Provenance())
        # When it was said: the source's time, else the record's (a dated
        # import, or the message an extractor read it from), else now.
        said_at = base.at or new.created_at or utc_now()
        provenance = base.model_copy(update={"write_id": op, "at": said_at})
        if isinstance(new, Document) and not new.chunks:
            pieces = chunk_text(new.text)
            new = new.model_copy(
                update={"chunks": [DocumentChunk(index=i, text=t) for i, t in enumerate(pieces)]}
            )
        new = new.model_copy(
            update={
                "id": _record_id(op),
                "sources": [provenance],
                "status": "active",
                "created_at": new.created_at or said_at,
            }
        )
        for attempt in range(MAX_TRIES):
            try:
                return await self._add_once(uid, new, op, guard)
            except VersionConflict:
                # Someone changed a record or lookup this add read: read again.
                await asyncio.sleep(random.uniform(0, 0.002 * 2**attempt))
        raise VersionConflict(f"memories of {uid!r}", 0, 0)

    async def _add_once(
        self, uid: str, new: MemoryRecord, op: str, guard: tuple[str, str] | None
    ) -> AddResult | None:
        text_key = _text_key(new)
        mine = await self._items.get(uid, new.id)
        same_id, same_version = await self._items.lookup(uid, text_key)
        if same_id is not None and same_id != new.id:
            same = await self._items.get(uid, same_id)
            if (
                same is not None
                and same.record.status == "active"
                and normalize_text(same.record.text) == normalize_text(new.text)
            ):
                result = await self._items.add_source(uid, same, new, op, guard)
                if result is not None and is_slotted(same.record):
                    await self._slots.raise_said(uid, same.record, when_said(new), guard)
                if mine is not None:
                    # This add put its record, then lost the race for the
                    # text to a concurrent add of the same memory: its
                    # record (never returned, nothing links to it yet) goes.
                    await self._store.purge((uid, CHUNKS, new.id))
                    await self._store.purge_item((uid, RECORDS), new.id)
                return result
        if isinstance(new, Fact) and new.is_single_valued():
            consult = None
            if self._consolidator is not None:
                consult = functools.partial(self._consult, uid, new, op, guard)
            return await self._slots.add(
                uid, new, mine, op, guard, text_key, same_id, same_version, consult=consult
            )
        if mine is not None and mine.record.status != "active":
            # This add finished long ago and its record changed since.
            return AddResult(mine.record, "added")

        decided: AddResult | None = None
        if mine is None and self._consolidator is not None:
            decided = await self._consult(uid, new, op, guard)
            if decided is not None and decided.outcome in ("noop", "updated"):
                return decided
        if mine is None:
            if not await self._items.put(
                uid, new, version=0, change="added", reason="", guard=guard
            ):
                return None
        else:
            new = mine.record
        if same_id != new.id:
            await self._items.point(uid, text_key, new.id, same_version, guard)
        if decided is not None and decided.outcome == "added" and decided.other:
            return AddResult(new, "added", decided.other)
        return AddResult(new, "added")

    async def _consult(
        self, uid: str, new: MemoryRecord, op: str, guard: tuple[str, str] | None
    ) -> AddResult | None:
        """Ask the consolidator about the records most like ``new``."""
        assert self._consolidator is not None
        hits = await self.search(new.text, user_id=uid, kinds=[new.kind], limit=5)
        existing = [hit.record for hit in hits]
        if not existing:
            return None
        decision = await self._consolidator.decide(new, existing)
        if decision.action == "add":
            return None
        target = next((r for r in existing if r.id == decision.target), None)
        if target is None:
            return None
        stored = await self._items.get(uid, target.id)
        if stored is None or stored.record.status != "active":
            return None
        if stored.record.updated_at != target.updated_at:
            # Changed while the consolidator decided (e.g. corrected): its
            # decision, and any merged text, is about what it was shown.
            raise VersionConflict(f"memory {target.id!r}", 0, stored.version)
        if decision.action == "noop":
            return await self._items.add_source(uid, stored, new, op, guard, "noop")
        if decision.action == "update":
            text = decision.text or new.text
            changed = stored.record.model_copy(
                update={"text": text, "sources": [*stored.record.sources, *new.sources]}
            )
            if not await self._items.put(
                uid,
                changed,
                version=stored.version,
                change="updated",
                reason=decision.reason or "merged with a near duplicate",
                guard=guard,
            ):
                return None
            return AddResult(changed, "updated", stored.record.id)
        # delete: the new record replaces one it contradicts.
        gone = stored.record.model_copy(update={"status": "deleted"})
        if not await self._items.put(
            uid,
            gone,
            version=stored.version,
            change="deleted",
            reason=decision.reason or f"contradicted by {new.id}",
            guard=guard,
        ):
            return None
        return AddResult(new, "added", stored.record.id)

    @keyword_user_id
    async def update(
        self,
        memory_id: str,
        *,
        user_id: str,
        reason: str = "",
        source: Provenance | None = None,
        **changes: Any,
    ) -> MemoryRecord:
        """Correct a record (e.g. ``text=``, ``object=``, ``tags=``): a new
        version, recorded in its history with ``reason``. ``InvalidInput``
        for an unknown id, fields the record's kind does not have, the links
        between records, or a fact's subject, predicate or ``single_valued``
        in another slot (delete it and add the corrected fact instead)."""
        uid = validate_id(user_id, "user_id")
        mid = validate_id(memory_id, "memory_id")
        forbidden = (_FIXED | _LINKS) & set(changes)
        if forbidden:
            raise InvalidInput(f"update cannot change {sorted(forbidden)}")
        if not isinstance(reason, str):
            raise InvalidInput("reason must be a str")
        for _attempt in range(MAX_TRIES):
            stored = await self._items.get(uid, mid)
            if stored is None:
                raise InvalidInput(f"no memory {mid!r} for user {uid!r}")
            values = stored.record.model_dump()
            unknown = set(changes) - set(values)
            if unknown:
                raise InvalidInput(f"a {stored.record.kind} has no field(s) {sorted(unknown)}")
            values.update(changes)
            values["sources"] = [
                *stored.record.sources,
                source or Provenance(origin="api", at=utc_now()),
            ]
            changed = check_record(values)
            if isinstance(changed, Fact) and _SLOT_FIELDS & set(changes):
                before = stored.record
                assert isinstance(before, Fact)
                if changed.is_single_valued() != before.is_single_valued() or (
                    changed.is_single_valued() and slot_key(changed) != slot_key(before)
                ):
                    raise InvalidInput(
                        "update cannot move a fact to another subject or predicate (or make "
                        "it single- or multi-valued): delete it and add the corrected fact"
                    )
            if isinstance(changed, Document) and "text" in changes and "chunks" not in changes:
                pieces = chunk_text(changed.text)
                changed = changed.model_copy(
                    update={
                        "chunks": [DocumentChunk(index=i, text=t) for i, t in enumerate(pieces)]
                    }
                )
            try:
                await self._items.put(
                    uid,
                    changed,
                    version=stored.version,
                    change="updated",
                    reason=reason,
                    guard=None,
                )
            except VersionConflict:
                continue
            if normalize_text(changed.text) != normalize_text(stored.record.text):
                key = _text_key(changed)
                _current, version = await self._items.lookup(uid, key)
                await self._items.point(uid, key, changed.id, version, None)
            got = await self._items.get(uid, mid)
            if got is None:
                raise InvalidInput(f"no memory {mid!r} for user {uid!r} (purged meanwhile)")
            return got.record
        raise VersionConflict(f"memory {mid!r}", 0, 0)

    @keyword_user_id
    async def delete(self, memory_id: str, *, user_id: str, reason: str = "") -> bool:
        """Mark a record ``deleted`` (kept, with its history; ``purge``
        removes it for good). False when there is no such active record."""
        return await self._set_status(user_id, memory_id, "deleted", reason)

    @keyword_user_id
    async def restore(self, memory_id: str, *, user_id: str, reason: str = "") -> bool:
        """Make a deleted or superseded record active again. A fact with a
        single-valued predicate becomes its slot's current value, said now:
        the value current until then is superseded by it (linked both ways,
        in both histories). False when it is active already or missing."""
        return await self._set_status(user_id, memory_id, "active", reason)

    async def _set_status(
        self, user_id: str, memory_id: str, status: MemoryStatus, reason: str
    ) -> bool:
        uid = validate_id(user_id, "user_id")
        mid = validate_id(memory_id, "memory_id")
        if not isinstance(reason, str):
            raise InvalidInput("reason must be a str")
        for _attempt in range(MAX_TRIES):
            stored = await self._items.get(uid, mid)
            if stored is None or stored.record.status == status:
                return False
            if status != "active" and stored.record.status != "active":
                return False
            try:
                if status == "active" and is_slotted(stored.record):
                    return await self._slots.make_current(uid, stored, reason)
                changed = stored.record.model_copy(update={"status": status})
                await self._items.put(
                    uid,
                    changed,
                    version=stored.version,
                    change="deleted" if status == "deleted" else "restored",
                    reason=reason,
                    guard=None,
                )
            except VersionConflict:
                continue
            if status == "deleted":
                await self._slots.leave(uid, changed, purged=False)
            return True
        raise VersionConflict(f"memory {mid!r}", 0, 0)

    @keyword_user_id
    async def purge(self, memory_id: str | None = None, *, user_id: str) -> int:
        """Remove for good one record (with its history and chunks), or all
        of the user's memories. Returns the number of records removed."""
        uid = validate_id(user_id, "user_id")
        store = self._store
        if memory_id is None:
            removed = await store.purge((uid, RECORDS))
            await store.purge((uid, CHUNKS))
            await store.purge((uid, LOOKUPS))
            return removed
        mid = validate_id(memory_id, "memory_id")
        stored = await self._items.get(uid, mid)
        # The record first: a document's chunks are put only while their
        # record holds still (``MemoryItems._put_chunks``), so none lands
        # after it, and the chunks purged next are all there will be.
        removed = await store.purge_item((uid, RECORDS), mid)
        await store.purge((uid, CHUNKS, mid))
        if stored is not None:
            await self._slots.leave(uid, stored.record, purged=True)
        return int(removed)

    # -- reads ----------------------------------------------------------------------

    @keyword_user_id
    async def get(self, memory_id: str, *, user_id: str) -> MemoryRecord | None:
        """A record in its current state (whatever its status), or None."""
        uid = validate_id(user_id, "user_id")
        stored = await self._items.get(uid, validate_id(memory_id, "memory_id"))
        return None if stored is None else stored.record

    @keyword_user_id
    async def history(self, memory_id: str, *, user_id: str) -> list[MemoryChange]:
        """Every state of a record, oldest first, with what changed it and why."""
        uid = validate_id(user_id, "user_id")
        mid = validate_id(memory_id, "memory_id")
        versions = await self._store.history((uid, RECORDS), mid)
        return [self._change(version) for version in versions]

    def _change(self, version: ItemVersion) -> MemoryChange:
        if version.deleted:
            return MemoryChange(
                version=version.version, at=version.updated_at, change="purged", record=None
            )
        return MemoryChange(
            version=version.version,
            at=version.updated_at,
            change=str(version.value.get("change", "")),
            reason=str(version.value.get("reason", "")),
            record=self._items.decode(version),
        )

    @keyword_user_id
    async def search(
        self,
        query: str | None = None,
        *,
        user_id: str,
        kinds: Sequence[MemoryKind] | MemoryKind | None = None,
        tags: dict[str, str] | None = None,
        status: MemoryStatus | Sequence[MemoryStatus] | Literal["any"] | None = "active",
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        event_after: datetime | None = None,
        event_before: datetime | None = None,
        min_score: float | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryHit]:
        """The user's records matching the filters: by keyword relevance to
        ``query`` (only records holding a query word; at least ``min_score``),
        else newest first. ``status`` defaults to active records only (``"any"``:
        every status). Time filters: ``created_*`` on when a record was
        learned, ``event_*`` on its ``event_date`` (records without one never
        match those)."""
        uid = validate_id(user_id, "user_id")
        wanted = check_kinds(kinds)
        statuses = check_statuses(status)
        tag_filter = check_tags(tags)
        count = check_int("limit", limit)
        skip = check_int("offset", offset)
        check_optional_str("query", query)
        threshold = check_optional_number("min_score", min_score)
        flt: dict[str, Any] = {}
        if wanted is not None:
            flt["kind"] = {"$in": wanted}
        if statuses is not None:
            flt["status"] = {"$in": statuses}
        for key, value in tag_filter.items():
            flt[f"tags.{key}"] = value
        flt.update(
            _range(
                "created_ms",
                check_time(created_after, "created_after"),
                check_time(created_before, "created_before"),
            )
        )
        flt.update(
            _range(
                "event_ms",
                check_time(event_after, "event_after"),
                check_time(event_before, "event_before"),
            )
        )
        if count == 0:
            return []
        want = skip + count
        store = self._store
        found = await store.search((uid, RECORDS), query=query, filter=flt, limit=want)
        hits = [MemoryHit(self._items.decode(item), item.score) for item in found]
        if query and (wanted is None or "document" in wanted):
            hits = self._merge(hits, await self._chunk_hits(uid, query, flt, want))
        if threshold is not None:
            hits = [h for h in hits if h.score is not None and h.score >= threshold]
        return hits[skip:want]

    async def _chunk_hits(
        self, uid: str, query: str, flt: dict[str, Any], want: int
    ) -> list[MemoryHit]:
        chunk_filter = {k: v for k, v in flt.items() if k != "kind"}
        store = self._store
        found = await store.search((uid, CHUNKS), query=query, filter=chunk_filter, limit=want)
        hits: list[MemoryHit] = []
        seen: set[str] = set()
        for item in found:
            document = item.value.get("document")
            if not isinstance(document, str) or document in seen:
                continue
            seen.add(document)
            got = await store.get((uid, RECORDS), document)
            if got is None:
                continue
            index = item.value.get("index")
            hits.append(
                MemoryHit(
                    self._items.decode(got), item.score, index if isinstance(index, int) else None
                )
            )
        return hits

    @staticmethod
    def _merge(first: list[MemoryHit], second: list[MemoryHit]) -> list[MemoryHit]:
        best: dict[str, MemoryHit] = {}
        for hit in [*first, *second]:
            held = best.get(hit.record.id)
            if held is None or (hit.score or 0.0) > (held.score or 0.0):
                best[hit.record.id] = hit
        return sorted(best.values(), key=lambda h: -(h.score or 0.0))

    @keyword_user_id
    async def get_all(
        self,
        *,
        user_id: str,
        kinds: Sequence[MemoryKind] | MemoryKind | None = None,
        tags: dict[str, str] | None = None,
        status: MemoryStatus | Sequence[MemoryStatus] | Literal["any"] | None = "active",
        limit: int | None = None,
    ) -> list[MemoryRecord]:
        """The user's records (active ones unless ``status`` says otherwise),
        newest first: all of them, or the newest ``limit``."""
        count = _EVERY if limit is None else check_int("limit", limit)
        hits = await self.search(
            user_id=user_id, kinds=kinds, tags=tags, status=status, limit=count
        )
        return [hit.record for hit in hits]

    @keyword_user_id
    async def delete_all(self, *, user_id: str, reason: str = "") -> int:
        """Mark every active record of the user ``deleted``, as ``delete``
        does (kept, with their history; ``purge`` removes them for good).
        Returns the number of records deleted."""
        uid = validate_id(user_id, "user_id")
        if not isinstance(reason, str):
            raise InvalidInput("reason must be a str")
        deleted = 0
        for record in await self.get_all(user_id=uid):
            deleted += await self._set_status(uid, record.id, "deleted", reason)
        return deleted

    @keyword_user_id
    async def profile(self, *, user_id: str, limit: int = 20) -> list[Fact]:
        """The user's active facts about themselves (subject "user"), newest first."""
        hits = await self.search(user_id=user_id, kinds=["fact"], limit=max(limit * 4, 50))
        facts = [
            h.record
            for h in hits
            if isinstance(h.record, Fact) and normalize_text(h.record.subject) in ("user", "i")
        ]
        return facts[: check_int("limit", limit)]


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
