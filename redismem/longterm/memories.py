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
then the records are brought in line with it (``_settle``): the old value
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
import hashlib
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from pydantic import TypeAdapter, ValidationError

from redismem.checks import (
    check_bool,
    check_int,
    check_optional_number,
    check_optional_str,
    check_tags,
    check_write_id,
)
from redismem.core.backend import backend_of
from redismem.core.codec import ms_to_datetime
from redismem.core.keys import validate_id
from redismem.errors import CorruptData, InvalidInput, VersionConflict
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
from redismem.longterm.records import (
    Document,
    DocumentChunk,
    Fact,
    MemoryChange,
    MemoryKind,
    MemoryRecord,
    MemoryStatus,
    Provenance,
    Relationship,
    normalize_predicate,
    normalize_text,
    predicate_words,
)
from redismem.longterm.store import Item, ItemVersion, LongTermStore
from redismem.models import Message

if TYPE_CHECKING:
    from redismem.core.backend import Backend, HasBackend
    from redismem.longterm.consolidation import Consolidator

__all__ = ["AddOutcome", "AddResult", "MemoryHit", "Knowledge"]

AddOutcome = Literal["added", "duplicate", "superseded", "outdated", "updated", "noop"]

RECORDS = "memories"
CHUNKS = "memories-chunks"
LOOKUPS = "memories-keys"
#: The fields of a record whose words are searchable.
_INDEXED = ["text", "title", "summary", "subject", "object", "target", "name", "result", "cues"]
#: Tries of one ``add`` against concurrent changes before giving up.
_MAX_TRIES = 16
#: ``get_all``'s limit when none is given: every record.
_EVERY = 1 << 40
#: Fields that name a fact's value slot or link records: ``update`` leaves them.
_FIXED = {"id", "kind", "sources", "created_at", "updated_at", "status"}
_LINKS = {"supersedes", "superseded_by", "superseded_at"}
_SLOT_FIELDS = {"subject", "predicate", "single_valued"}
#: Characters per document chunk (cut at a word boundary), and the overlap.
CHUNK_CHARS = 800
_RECORD = TypeAdapter[Any](MemoryRecord)


@dataclass(frozen=True, slots=True)
class AddResult:
    """What ``add`` did: the record now holding the memory, and how
    (``outdated``: a value said before the current one, kept in history)."""

    record: MemoryRecord
    outcome: AddOutcome
    #: The record the new one superseded, updated or deleted, if any (for
    #: ``outdated``: the current value it is superseded by).
    other: str | None = None

    @property
    def id(self) -> str:
        """The record's id (mem0's ``id``)."""
        return self.record.id

    @property
    def memory(self) -> str:
        """The record's text (mem0's ``memory``)."""
        return self.record.text

    @property
    def event(self) -> Literal["ADD", "UPDATE", "NONE"]:
        """mem0's ``event``: ADD for a new record (one that supersedes the
        current value too), UPDATE for one merged into a record, NONE for
        what was known already or kept only in history."""
        if self.outcome in ("added", "superseded"):
            return "ADD"
        return "UPDATE" if self.outcome == "updated" else "NONE"


@dataclass(frozen=True, slots=True)
class MemoryHit:
    record: MemoryRecord
    #: Keyword relevance to the query (None without one).
    score: float | None
    #: For a document found by one of its chunks: that chunk's index.
    chunk: int | None = None


@dataclass(frozen=True, slots=True)
class _Stored:
    record: MemoryRecord
    version: int


@dataclass(frozen=True, slots=True)
class _Slot:
    """The lookup item of a (subject, single-valued predicate): which record
    is the current value, when that value was said, the value it replaced,
    and the records that may be active (``_settle`` keeps their statuses in
    line with it)."""

    key: str
    version: int
    current: str | None
    said: tuple[int, str] | None
    previous: str | None
    #: Made current since a writer last saw them superseded or deleted (and
    #: any not stored yet): the records a settle reads, not the history.
    open: list[str]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def _text_key(record: MemoryRecord) -> str:
    return "t" + _digest(record.kind, normalize_text(record.text))


def _slot_key(fact: Fact) -> str:
    return "s" + _digest(normalize_text(fact.subject), normalize_predicate(fact.predicate))


def _is_slotted(record: MemoryRecord) -> bool:
    return isinstance(record, Fact) and record.is_single_valued()


def _said(record: MemoryRecord) -> tuple[int, str]:
    """When ``record`` was last said: the latest of its sources by time
    (``at``, else the record's ``created_at``), then by message id."""
    default = _ms(record.created_at) or 0
    best = (default, "")
    for source in record.sources:
        best = max(best, (_ms(source.at) or default, max(source.message_ids, default="")))
    return best


def _said_of(stored: _Stored | None) -> tuple[int, str] | None:
    return None if stored is None else _said(stored.record)


def _record_id(op: str) -> str:
    return "m" + _digest("record", op)


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _now() -> datetime:
    return datetime.now(UTC)


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
        #: Seconds a record, its lookups and chunks live after their last put.
        self._ttl = None if ttl_ms is None else ttl_ms / 1000

    @property
    def consolidator(self) -> Consolidator | None:
        return self._consolidator

    # -- storage helpers ------------------------------------------------------------

    def _decode(self, item: Item) -> MemoryRecord:
        value = dict(item.value)
        value.pop("change", None)
        value.pop("reason", None)
        value.pop("created_ms", None)
        value.pop("event_ms", None)
        value.pop("cues", None)
        value["id"] = item.key
        value["updated_at"] = item.updated_at
        created = item.value.get("created_ms")
        value["created_at"] = (
            ms_to_datetime(created) if isinstance(created, int) else item.created_at
        )
        try:
            return _RECORD.validate_python(value)  # type: ignore[no-any-return]
        except ValidationError as exc:
            raise CorruptData(f"memory {item.key!r} of {item.namespace!r}", str(exc)) from exc

    def _encode(self, record: MemoryRecord, change: str, reason: str) -> dict[str, Any]:
        value = record.model_dump(mode="json", exclude={"id", "created_at", "updated_at"})
        value["change"] = change
        value["reason"] = reason
        value["created_ms"] = _ms(record.created_at) or int(time.time() * 1000)
        value["event_ms"] = _ms(record.event_date)
        if isinstance(record, Fact):
            value["cues"] = " ".join(predicate_words(record.predicate))
        elif isinstance(record, Relationship):
            value["cues"] = " ".join(predicate_words(record.relation))
        return value

    async def _get(self, user_id: str, memory_id: str) -> _Stored | None:
        item = await self._store.get((user_id, RECORDS), memory_id)
        if item is None:
            return None
        return _Stored(self._decode(item), item.version)

    async def _put(
        self,
        user_id: str,
        record: MemoryRecord,
        *,
        version: int,
        change: str,
        reason: str,
        guard: tuple[str, str] | None,
        slot: _Slot | None = None,
    ) -> bool:
        """Put ``record`` if its item is at ``version`` (0: none): False when
        the guard refused it (the session is gone); ``VersionConflict`` when
        the version moved, or, with ``slot``, when the slot moved: a value is
        made current only while its slot, settled, holds still, so that two
        values of one slot are never active at once."""
        put = await self._store.put_guarded(
            (user_id, RECORDS),
            record.id,
            self._encode(record, change, reason),
            index=_INDEXED,
            ttl=self._ttl,
            if_version=version,
            guard=guard,
            while_at=None if slot is None else ((user_id, LOOKUPS), slot.key, slot.version),
        )
        if put is not None and isinstance(record, Document):
            await self._put_chunks(user_id, record, guard)
        return put is not None

    async def _put_chunks(
        self, user_id: str, document: Document, guard: tuple[str, str] | None
    ) -> None:
        namespace = (user_id, CHUNKS, document.id)
        await self._store.purge(namespace)
        for chunk in document.chunks:
            # The record's filter fields, so a chunk matches the filters its
            # document matches.
            value = {
                "document": document.id,
                "index": chunk.index,
                "text": chunk.text,
                "status": document.status,
                "tags": document.tags,
                "created_ms": _ms(document.created_at),
                "event_ms": _ms(document.event_date),
            }
            await self._store.put_guarded(
                namespace, f"c{chunk.index}", value, index=["text"], ttl=self._ttl, guard=guard
            )

    async def _lookup(self, user_id: str, key: str) -> tuple[str | None, int]:
        item = await self._store.get((user_id, LOOKUPS), key)
        if item is None:
            return None, 0
        target = item.value.get("id")
        return (target if isinstance(target, str) else None), item.version

    async def _point(
        self,
        user_id: str,
        key: str,
        target: str,
        version: int,
        guard: tuple[str, str] | None,
    ) -> None:
        await self._store.put_guarded(
            (user_id, LOOKUPS),
            key,
            {"id": target},
            index=False,
            ttl=self._ttl,
            if_version=version,
            guard=guard,
        )

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
        said_at = base.at or new.created_at or _now()
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
        for attempt in range(_MAX_TRIES):
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
        mine = await self._get(uid, new.id)
        same_id, same_version = await self._lookup(uid, text_key)
        if same_id is not None and same_id != new.id:
            same = await self._get(uid, same_id)
            if (
                same is not None
                and same.record.status == "active"
                and normalize_text(same.record.text) == normalize_text(new.text)
            ):
                result = await self._add_source(uid, same, new, op, guard)
                if result is not None and _is_slotted(same.record):
                    await self._raise_said(uid, same.record, _said(new), guard)
                if mine is not None:
                    # This add put its record, then lost the race for the
                    # text to a concurrent add of the same memory: its
                    # record (never returned, nothing links to it yet) goes.
                    await self._store.purge((uid, CHUNKS, new.id))
                    await self._store.purge_item((uid, RECORDS), new.id)
                return result
        if isinstance(new, Fact) and new.is_single_valued():
            return await self._add_to_slot(
                uid, new, mine, op, guard, text_key, same_id, same_version
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
            if not await self._put(uid, new, version=0, change="added", reason="", guard=guard):
                return None
        else:
            new = mine.record
        if same_id != new.id:
            await self._point(uid, text_key, new.id, same_version, guard)
        if decided is not None and decided.outcome == "added" and decided.other:
            return AddResult(new, "added", decided.other)
        return AddResult(new, "added")

    # -- single-valued facts: one current value per slot ---------------------------------

    async def _add_to_slot(
        self,
        uid: str,
        new: Fact,
        mine: _Stored | None,
        op: str,
        guard: tuple[str, str] | None,
        text_key: str,
        same_id: str | None,
        text_version: int,
    ) -> AddResult | None:
        """Add a single-valued fact: a value said later than the current one
        takes the slot (compare-and-set), then the records are brought in
        line with it (see ``_settle``); one said before goes into history.
        ``same_id``: the record the text lookup names (of the same text)."""
        slot = await self._slot(uid, _slot_key(new))
        said = _said(new)
        replaced: str | None = None  # a record the consolidator deleted for this one
        current = None
        if slot.current is not None and slot.current != new.id:
            current = await self._get(uid, slot.current)
        live = slot.current is not None and (current is None or current.record.status != "deleted")
        if mine is None and slot.current != new.id:
            if (
                current is not None
                and current.record.status == "active"
                and isinstance(current.record, Fact)
                and normalize_text(current.record.object) == normalize_text(new.object)
            ):
                # The current value said again in other words: one more source.
                result = await self._add_source(uid, current, new, op, guard)
                if result is not None:
                    await self._raise_said(uid, current.record, said, guard)
                return result
            if not live and self._consolidator is not None:
                decided = await self._consult(uid, new, op, guard)
                if decided is not None and decided.outcome in ("noop", "updated"):
                    return decided
                replaced = decided.other if decided is not None else None
            held = slot.said if slot.said is not None else _said_of(current)
            # Said at the same moment (one message, two values): the later
            # add wins, as the later clause of the message does.
            if live and held is not None and said < held:
                earlier = None if same_id is None else await self._get(uid, same_id)
                if (
                    earlier is not None
                    and earlier.record.status == "superseded"
                    and isinstance(earlier.record, Fact)
                    and _slot_key(earlier.record) == slot.key
                    and normalize_text(earlier.record.text) == normalize_text(new.text)
                ):
                    # An old statement of a value in the history, in the same
                    # words: one more source of that record, no copy.
                    added = await self._add_source(uid, earlier, new, op, guard, "outdated")
                    if added is None:
                        return None
                    return AddResult(added.record, "outdated", added.record.superseded_by)
            else:
                written = await self._take_slot(
                    uid, slot, new.id, said, slot.current if live else None, guard
                )
                if written is None:
                    return None
                slot = written
        settled = slot.version
        if mine is None:
            becomes = slot.current == new.id
            if becomes:
                # The old value goes first: never two current values at once.
                done = await self._settle(uid, slot, guard, arriving=new.id)
                if done is None:
                    return None
                slot = done
                becomes = slot.current == new.id
                settled = slot.version
            if becomes:
                record = new.model_copy(update={"supersedes": slot.previous})
                change, reason = "added", ""
            else:
                # Said before the current value (or a later one took the
                # slot meanwhile): straight into history.
                record = new.model_copy(
                    update={
                        "status": "superseded",
                        "superseded_by": slot.current,
                        "superseded_at": _now(),
                    }
                )
                change = "added"
                reason = f"said before the current value {slot.current}"
            try:
                if not await self._put(
                    uid,
                    record,
                    version=0,
                    change=change,
                    reason=reason,
                    guard=guard,
                    slot=slot if becomes else None,
                ):
                    return None
            except VersionConflict:
                # A concurrent re-send of this add put it (read below), or the
                # slot moved since it was settled (then nothing was put: the
                # add starts again).
                pass
            got = await self._get(uid, new.id)
            if got is None:
                raise VersionConflict(f"memory {new.id!r}", 0, 0)
            mine = got
            fresh = True
        else:
            fresh = False  # a re-send: whatever happened since, settle
        await self._point(uid, text_key, new.id, text_version, guard)
        # Settle again unless the slot held still since it was last settled:
        # a writer that moved it meanwhile may have missed this record.
        again = await self._slot(uid, slot.key)
        if again.version != settled or not fresh:
            if await self._settle(uid, again, guard, own=new.id) is None:
                return None
            got = await self._get(uid, new.id)
            mine = got if got is not None else mine
        final = mine.record
        if final.status == "superseded" and slot.current != new.id:
            return AddResult(final, "outdated", final.superseded_by)
        outcome: AddOutcome = "superseded" if final.supersedes else "added"
        return AddResult(final, outcome, final.supersedes or replaced)

    async def _slot(self, uid: str, key: str) -> _Slot:
        item = await self._store.get((uid, LOOKUPS), key)
        if item is None:
            return _Slot(key, 0, None, None, None, [])
        value = item.value
        current = value.get("id")
        current = current if isinstance(current, str) else None
        previous = value.get("prev")
        said = value.get("said")
        held: tuple[int, str] | None = None
        if (
            isinstance(said, list)
            and len(said) == 2
            and isinstance(said[0], int)
            and isinstance(said[1], str)
        ):
            held = (said[0], said[1])
        open_ = value.get("open")
        if isinstance(open_, list):
            maybe = [m for m in open_ if isinstance(m, str)]
        else:
            maybe = await self._legacy_open(uid, key, current)
        return _Slot(
            key,
            item.version,
            current,
            held,
            previous if isinstance(previous, str) else None,
            maybe,
        )

    async def _legacy_open(self, uid: str, key: str, current: str | None) -> list[str]:
        """The records that may be active in a slot written before slots
        listed them: its current record and every active fact of the slot (a
        restore then could leave several), found once by reading the user's
        active facts; the next write of the slot lists them."""
        store = self._store
        found = await store.search(
            (uid, RECORDS), filter={"kind": "fact", "status": "active"}, limit=100_000
        )
        ids = [current] if current else []
        for item in found:
            record = self._decode(item)
            slotted = isinstance(record, Fact) and record.is_single_valued()
            if slotted and isinstance(record, Fact) and _slot_key(record) == key:
                ids.append(record.id)
        return list(dict.fromkeys(ids))

    async def _write_slot(
        self,
        uid: str,
        slot: _Slot,
        guard: tuple[str, str] | None,
        **changes: Any,
    ) -> _Slot | None:
        """Compare-and-set the slot with ``changes`` (fields of ``_Slot``):
        the slot as written; ``VersionConflict`` when it moved; None when
        the guard refused (the session is gone)."""
        current = changes.get("current", slot.current)
        said = changes.get("said", slot.said)
        previous = changes.get("previous", slot.previous)
        open_ = changes.get("open", slot.open)
        value = {
            "id": current,
            "said": None if said is None else list(said),
            "prev": previous,
            "open": open_,
        }
        put = await self._store.put_guarded(
            (uid, LOOKUPS),
            slot.key,
            value,
            index=False,
            ttl=self._ttl,
            if_version=slot.version,
            guard=guard,
        )
        if put is None:
            return None
        return _Slot(slot.key, put.version, current, said, previous, open_)

    async def _take_slot(
        self,
        uid: str,
        slot: _Slot,
        memory_id: str,
        said: tuple[int, str],
        previous: str | None,
        guard: tuple[str, str] | None,
    ) -> _Slot | None:
        """Make ``memory_id`` the slot's current value (compare-and-set),
        said at ``said``, replacing ``previous``. Its ``open`` list keeps the
        old current value and the records not seen superseded or deleted
        (they may still be active; they are few)."""
        others = [m for m in slot.open if m not in (slot.current, memory_id)]
        stored = await asyncio.gather(*(self._get(uid, m) for m in others))
        still = [
            m
            for m, held in zip(others, stored, strict=True)
            if held is None or held.record.status == "active"
        ]
        ahead = [slot.current] if slot.current is not None else []
        open_ = list(dict.fromkeys([*still, *ahead, memory_id]))
        return await self._write_slot(
            uid, slot, guard, current=memory_id, said=said, previous=previous, open=open_
        )

    async def _raise_said(
        self, uid: str, record: MemoryRecord, said: tuple[int, str], guard: tuple[str, str] | None
    ) -> None:
        """The current value was said again at ``said``: later than the slot
        holds, it counts from then on (an older statement then loses to it)."""
        if not isinstance(record, Fact):
            return
        for _attempt in range(_MAX_TRIES):
            slot = await self._slot(uid, _slot_key(record))
            if slot.current != record.id or (slot.said is not None and slot.said >= said):
                return
            try:
                await self._write_slot(uid, slot, guard, said=said)
                return
            except VersionConflict:
                continue

    async def _settle(
        self,
        uid: str,
        slot: _Slot,
        guard: tuple[str, str] | None,
        *,
        arriving: str | None = None,
        own: str | None = None,
    ) -> _Slot | None:
        """Bring the slot's records in line with it: every record that may
        be active (``open``) but the current one superseded by it, first;
        then the current one active again if a stale settle had superseded
        it. Repeated until the slot holds still, so whoever changed it last
        settles last. Returns the slot as settled, or None when the guard
        refused. ``arriving``: the current record is being added or
        restored by the caller, who makes it active. ``own``: a record the
        caller stored (looked at whether or not the slot lists it)."""
        touched: set[str] = set()
        for _round in range(_MAX_TRIES):
            extra = [m for m in (slot.current, own, *sorted(touched)) if m is not None]
            ids = list(dict.fromkeys([*slot.open, *extra]))
            stored = await asyncio.gather(*(self._get(uid, m) for m in ids))
            records = {m: s for m, s in zip(ids, stored, strict=True) if s is not None}
            target = records.get(slot.current) if slot.current else None
            live = slot.current
            if target is not None and target.record.status == "deleted" and live != arriving:
                live = None  # a deleted current value: there is none
            try:
                for member, held in records.items():
                    if member == slot.current or held.record.status != "active":
                        continue
                    retired = held.record.model_copy(
                        update={
                            "status": "superseded",
                            "superseded_by": live,
                            "superseded_at": _now(),
                        }
                    )
                    reason = f"superseded by {live}" if live else "no longer current"
                    if not await self._put(
                        uid,
                        retired,
                        version=held.version,
                        change="superseded",
                        reason=reason,
                        guard=guard,
                    ):
                        return None
                if (
                    target is not None
                    and target.record.status == "superseded"
                    and slot.current != arriving
                ):
                    back = target.record.model_copy(
                        update={"status": "active", "superseded_by": None, "superseded_at": None}
                    )
                    touched.add(target.record.id)
                    if not await self._put(
                        uid,
                        back,
                        version=target.version,
                        change="restored",
                        reason="the current value again",
                        guard=guard,
                        slot=slot,
                    ):
                        return None
            except VersionConflict:
                slot = await self._slot(uid, slot.key)
                continue
            again = await self._slot(uid, slot.key)
            if again.version == slot.version:
                return slot
            slot = again
        raise VersionConflict(f"memory slot {slot.key!r}", slot.version, 0)

    async def _make_current(self, uid: str, stored: _Stored, reason: str) -> bool:
        """``restore`` of a single-valued fact: it becomes the slot's current
        value, said now; the value it replaces is superseded by it."""
        record = stored.record
        assert isinstance(record, Fact)
        slot = await self._slot(uid, _slot_key(record))
        previous = slot.current if slot.current != record.id else slot.previous
        now = (int(time.time() * 1000), "")
        written = await self._take_slot(uid, slot, record.id, now, previous, None)
        assert written is not None  # only a guarded write is ever refused
        # The old value goes first: never two current values at once.
        settled = await self._settle(uid, written, None, arriving=record.id)
        assert settled is not None  # only a guarded write is ever refused
        update: dict[str, Any] = {
            "status": "active",
            "superseded_by": None,
            "superseded_at": None,
        }
        if previous is not None:
            update["supersedes"] = previous
        for _attempt in range(_MAX_TRIES):
            if settled.current != record.id:
                break  # a later value took the slot meanwhile: this one stays in history
            try:
                await self._put(
                    uid,
                    stored.record.model_copy(update=update),
                    version=stored.version,
                    change="restored",
                    reason=reason,
                    guard=None,
                    slot=settled,
                )
                break
            except VersionConflict:
                # A settle found it current and made it active meanwhile
                # (this restore still records itself, on the latest
                # version), or the slot moved: settled again, it is current
                # still, or a later value took the slot and this one stays
                # in history.
                again = await self._get(uid, record.id)
                if again is None:
                    return False  # purged meanwhile
                stored = again
                slot_now = await self._slot(uid, slot.key)
                if slot_now.current == record.id:
                    slot_now = (
                        await self._settle(uid, slot_now, None, arriving=record.id) or slot_now
                    )
                settled = slot_now
        await self._settle(uid, await self._slot(uid, slot.key), None, own=record.id)
        return True

    async def _leave_slot(self, uid: str, record: MemoryRecord, *, purged: bool) -> None:
        """After ``record`` was deleted (or purged): it is no longer the
        slot's current value (and, purged, no longer listed by it)."""
        if not _is_slotted(record):
            return
        assert isinstance(record, Fact)
        for _attempt in range(_MAX_TRIES):
            slot = await self._slot(uid, _slot_key(record))
            open_ = [m for m in slot.open if m != record.id] if purged else slot.open
            mine = slot.current == record.id
            if not mine and open_ == slot.open and not (purged and slot.previous == record.id):
                return
            changes: dict[str, Any] = {"open": open_}
            if mine:
                changes.update(current=None, said=None, previous=None)
            if purged and slot.previous == record.id:
                changes["previous"] = None
            try:
                await self._write_slot(uid, slot, None, **changes)
                return
            except VersionConflict:
                continue

    async def _add_source(
        self,
        uid: str,
        same: _Stored,
        new: MemoryRecord,
        op: str,
        guard: tuple[str, str] | None,
        outcome: AddOutcome = "duplicate",
    ) -> AddResult | None:
        record = same.record
        if any(s.write_id == op for s in record.sources):
            return AddResult(record, outcome)  # a re-send of this very add
        refreshed = record.model_copy(
            update={
                "sources": [*record.sources, *new.sources],
                "confidence": max(record.confidence, new.confidence),
                "event_date": new.event_date or record.event_date,
            }
        )
        if not await self._put(
            uid,
            refreshed,
            version=same.version,
            change="source_added",
            reason=f"said again ({new.sources[-1].origin})" if new.sources else "said again",
            guard=guard,
        ):
            return None
        return AddResult(refreshed, outcome)

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
        stored = await self._get(uid, target.id)
        if stored is None or stored.record.status != "active":
            return None
        if decision.action == "noop":
            return await self._add_source(uid, stored, new, op, guard, "noop")
        if decision.action == "update":
            text = decision.text or new.text
            changed = stored.record.model_copy(
                update={"text": text, "sources": [*stored.record.sources, *new.sources]}
            )
            if not await self._put(
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
        if not await self._put(
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
        for _attempt in range(_MAX_TRIES):
            stored = await self._get(uid, mid)
            if stored is None:
                raise InvalidInput(f"no memory {mid!r} for user {uid!r}")
            values = stored.record.model_dump()
            unknown = set(changes) - set(values)
            if unknown:
                raise InvalidInput(f"a {stored.record.kind} has no field(s) {sorted(unknown)}")
            values.update(changes)
            values["sources"] = [
                *stored.record.sources,
                source or Provenance(origin="api", at=_now()),
            ]
            changed = check_record(values)
            if isinstance(changed, Fact) and _SLOT_FIELDS & set(changes):
                before = stored.record
                assert isinstance(before, Fact)
                if changed.is_single_valued() != before.is_single_valued() or (
                    changed.is_single_valued() and _slot_key(changed) != _slot_key(before)
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
                await self._put(
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
                _current, version = await self._lookup(uid, key)
                await self._point(uid, key, changed.id, version, None)
            got = await self._get(uid, mid)
            assert got is not None
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
        for _attempt in range(_MAX_TRIES):
            stored = await self._get(uid, mid)
            if stored is None or stored.record.status == status:
                return False
            if status != "active" and stored.record.status != "active":
                return False
            try:
                if status == "active" and _is_slotted(stored.record):
                    return await self._make_current(uid, stored, reason)
                changed = stored.record.model_copy(update={"status": status})
                await self._put(
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
                await self._leave_slot(uid, changed, purged=False)
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
        stored = await self._get(uid, mid)
        await store.purge((uid, CHUNKS, mid))
        removed = await store.purge_item((uid, RECORDS), mid)
        if stored is not None:
            await self._leave_slot(uid, stored.record, purged=True)
        return int(removed)

    # -- reads ----------------------------------------------------------------------

    @keyword_user_id
    async def get(self, memory_id: str, *, user_id: str) -> MemoryRecord | None:
        """A record in its current state (whatever its status), or None."""
        uid = validate_id(user_id, "user_id")
        stored = await self._get(uid, validate_id(memory_id, "memory_id"))
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
            record=self._decode(version),
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
        hits = [MemoryHit(self._decode(item), item.score) for item in found]
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
                MemoryHit(self._decode(got), item.score, index if isinstance(index, int) else None)
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
