"""A user's memory records as long-term store items, for ``Knowledge`` and its slots.

``redismem.longterm.memories`` (``Knowledge``) and ``redismem.longterm.slots``
(single-valued facts) both read and write records through ``MemoryItems``:
one item per record under ``(user_id, RECORDS)``, its document chunks under
``(user_id, CHUNKS, document_id)``, lookups (by text, by slot) under
``(user_id, LOOKUPS)``. Every put is conditional on the version read and may
carry a session's guard. Internal: the public names are re-exported by
``redismem.longterm.memories``.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from redismem.core.codec import ms_to_datetime
from redismem.errors import CorruptData, VersionConflict
from redismem.longterm.records import (
    Document,
    Fact,
    MemoryRecord,
    Relationship,
    predicate_words,
)
from redismem.longterm.store import Item, LongTermStore

__all__ = [
    "CHUNKS",
    "INDEXED",
    "LOOKUPS",
    "MAX_TRIES",
    "RECORDS",
    "AddOutcome",
    "AddResult",
    "MemoryItems",
    "Stored",
    "digest",
    "to_ms",
    "utc_now",
]

RECORDS = "memories"
CHUNKS = "memories-chunks"
LOOKUPS = "memories-keys"
#: The fields of a record whose words are searchable.
INDEXED = ["text", "title", "summary", "subject", "object", "target", "name", "result", "cues"]
#: Tries of one ``add`` (or slot write) against concurrent changes before giving up.
MAX_TRIES = 16
_RECORD = TypeAdapter[Any](MemoryRecord)

AddOutcome = Literal["added", "duplicate", "superseded", "outdated", "updated", "noop"]


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
class Stored:
    """A record as read, with its item's version (what a conditional put names)."""

    record: MemoryRecord
    version: int


def digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def to_ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def utc_now() -> datetime:
    return datetime.now(UTC)


class MemoryItems:
    """Records, their chunks and lookups as items of ``store``, each living
    ``ttl`` seconds after its last put (None: for good)."""

    def __init__(self, store: LongTermStore, *, ttl: float | None) -> None:
        self.store = store
        self.ttl = ttl

    def decode(self, item: Item) -> MemoryRecord:
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

    def encode(self, record: MemoryRecord, change: str, reason: str) -> dict[str, Any]:
        value = record.model_dump(mode="json", exclude={"id", "created_at", "updated_at"})
        value["change"] = change
        value["reason"] = reason
        value["created_ms"] = to_ms(record.created_at) or int(time.time() * 1000)
        value["event_ms"] = to_ms(record.event_date)
        if isinstance(record, Fact):
            value["cues"] = " ".join(predicate_words(record.predicate))
        elif isinstance(record, Relationship):
            value["cues"] = " ".join(predicate_words(record.relation))
        return value

    async def get(self, user_id: str, memory_id: str) -> Stored | None:
        item = await self.store.get((user_id, RECORDS), memory_id)
        if item is None:
            return None
        return Stored(self.decode(item), item.version)

    async def put(
        self,
        user_id: str,
        record: MemoryRecord,
        *,
        version: int,
        change: str,
        reason: str,
        guard: tuple[str, str] | None,
        while_slot: tuple[str, int] | None = None,
    ) -> bool:
        """Put ``record`` if its item is at ``version`` (0: none): False when
        the guard refused it (the session is gone); ``VersionConflict`` when
        the version moved, or, with ``while_slot`` (a slot's lookup key and
        version), when the slot moved: a value is made current only while
        its slot, settled, holds still, so that two values of one slot are
        never active at once."""
        put = await self.store.put_guarded(
            (user_id, RECORDS),
            record.id,
            self.encode(record, change, reason),
            index=INDEXED,
            ttl=self.ttl,
            if_version=version,
            guard=guard,
            while_at=None if while_slot is None else ((user_id, LOOKUPS), *while_slot),
        )
        if put is not None and isinstance(record, Document):
            await self._put_chunks(user_id, record, guard, put.version)
        return put is not None

    async def _put_chunks(
        self, user_id: str, document: Document, guard: tuple[str, str] | None, version: int
    ) -> None:
        """The chunks of ``document``, just put at ``version``: each lands
        only while its record is still at that version, so that a purge of
        the document (or a newer version, which writes its own) since the put
        never sees chunks of it written back."""
        namespace = (user_id, CHUNKS, document.id)
        await self.store.purge(namespace)
        for chunk in document.chunks:
            # The record's filter fields, so a chunk matches the filters its
            # document matches.
            value = {
                "document": document.id,
                "index": chunk.index,
                "text": chunk.text,
                "status": document.status,
                "tags": document.tags,
                "created_ms": to_ms(document.created_at),
                "event_ms": to_ms(document.event_date),
            }
            try:
                await self.store.put_guarded(
                    namespace,
                    f"c{chunk.index}",
                    value,
                    index=["text"],
                    ttl=self.ttl,
                    guard=guard,
                    while_at=((user_id, RECORDS), document.id, version),
                )
            except VersionConflict:
                return  # purged or put again since: not this call's chunks any more

    async def lookup(self, user_id: str, key: str) -> tuple[str | None, int]:
        item = await self.store.get((user_id, LOOKUPS), key)
        if item is None:
            return None, 0
        target = item.value.get("id")
        return (target if isinstance(target, str) else None), item.version

    async def point(
        self,
        user_id: str,
        key: str,
        target: str,
        version: int,
        guard: tuple[str, str] | None,
    ) -> None:
        await self.store.put_guarded(
            (user_id, LOOKUPS),
            key,
            {"id": target},
            index=False,
            ttl=self.ttl,
            if_version=version,
            guard=guard,
        )

    async def add_source(
        self,
        uid: str,
        same: Stored,
        new: MemoryRecord,
        op: str,
        guard: tuple[str, str] | None,
        outcome: AddOutcome = "duplicate",
    ) -> AddResult | None:
        """``same`` said again by ``new``: its sources added (once per
        ``op``), refreshed. None when the guard refused (the session is gone)."""
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
        if not await self.put(
            uid,
            refreshed,
            version=same.version,
            change="source_added",
            reason=f"said again ({new.sources[-1].origin})" if new.sources else "said again",
            guard=guard,
        ):
            return None
        return AddResult(refreshed, outcome)
