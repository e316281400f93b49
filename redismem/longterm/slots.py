"""Single-valued facts: one current value per slot, for ``Knowledge``.

A fact whose predicate is single-valued (``lives_in``, ``works_at``) names a
*slot* by its subject and predicate. The slot's lookup item, under
``(user_id, LOOKUPS)``, says which record is the current value, when that
value was *said* (``when_said``), the value it replaced, and the few records
that may still be active (``open``). ``Slots`` decides a slot by
compare-and-set on that item, then brings the records in line with it
(``settle``): the old value is superseded before the new one is stored
active, and every writer settles again until the slot holds still, so once
the writers are done at most one record of a slot is active. The whole
consolidation story is in ``redismem.longterm.memories``' docstring.

``Knowledge`` owns one ``Slots`` and calls ``add`` (a new value),
``raise_said`` (the current value said again), ``make_current``
(``restore``) and ``leave`` (``delete``, ``purge``). Internal: nothing here is
public API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redismem.errors import VersionConflict
from redismem.longterm.memory_items import (
    LOOKUPS,
    MAX_TRIES,
    RECORDS,
    AddOutcome,
    AddResult,
    MemoryItems,
    Stored,
    digest,
    to_ms,
    utc_now,
)
from redismem.longterm.records import Fact, MemoryRecord, normalize_predicate, normalize_text

__all__ = ["Slot", "Slots", "is_slotted", "slot_key", "when_said"]


@dataclass(frozen=True, slots=True)
class Slot:
    """The lookup item of a (subject, single-valued predicate): which record
    is the current value, when that value was said, the value it replaced,
    and the records that may be active (``Slots.settle`` keeps their statuses
    in line with it)."""

    key: str
    version: int
    current: str | None
    said: tuple[int, str] | None
    previous: str | None
    #: Made current since a writer last saw them superseded or deleted (and
    #: any not stored yet): the records a settle reads, not the history.
    open: list[str]

    @property
    def at(self) -> tuple[str, int]:
        """``(key, version)``, for ``MemoryItems.put(while_slot=...)``: the
        record is stored only while the slot has not moved."""
        return (self.key, self.version)


def slot_key(fact: Fact) -> str:
    return "s" + digest(normalize_text(fact.subject), normalize_predicate(fact.predicate))


def is_slotted(record: MemoryRecord) -> bool:
    return isinstance(record, Fact) and record.is_single_valued()


def when_said(record: MemoryRecord) -> tuple[int, str]:
    """When ``record`` was last said: the latest of its sources by time
    (``at``, else the record's ``created_at``), then by message id."""
    default = to_ms(record.created_at) or 0
    best = (default, "")
    for source in record.sources:
        best = max(best, (to_ms(source.at) or default, max(source.message_ids, default="")))
    return best


def _said_of(stored: Stored | None) -> tuple[int, str] | None:
    return None if stored is None else when_said(stored.record)


class Slots:
    """The slots of every user's single-valued facts, on ``items``."""

    def __init__(self, items: MemoryItems) -> None:
        self._items = items

    async def add(
        self,
        uid: str,
        new: Fact,
        mine: Stored | None,
        op: str,
        guard: tuple[str, str] | None,
        text_key: str,
        same_id: str | None,
        text_version: int,
        *,
        consult: Callable[[], Awaitable[AddResult | None]] | None,
    ) -> AddResult | None:
        """Add a single-valued fact: a value said later than the current one
        takes the slot (compare-and-set), then the records are brought in
        line with it (see ``settle``); one said before goes into history.
        ``mine``: ``new``'s record if a try of this add (``op``) stored it;
        ``text_key``, ``text_version``: its text lookup and that lookup's
        version; ``same_id``: the record the text lookup names (of the same
        text); ``consult``: asks the consolidator about the records most like
        ``new`` (None without one), when the slot has no live value."""
        slot = await self.read(uid, slot_key(new))
        said = when_said(new)
        replaced: str | None = None  # a record the consolidator deleted for this one
        current = None
        if slot.current is not None and slot.current != new.id:
            current = await self._items.get(uid, slot.current)
        live = slot.current is not None and (current is None or current.record.status != "deleted")
        if mine is None and slot.current != new.id:
            if (
                current is not None
                and current.record.status == "active"
                and isinstance(current.record, Fact)
                and normalize_text(current.record.object) == normalize_text(new.object)
            ):
                # The current value said again in other words: one more source.
                result = await self._items.add_source(uid, current, new, op, guard)
                if result is not None:
                    await self.raise_said(uid, current.record, said, guard)
                return result
            if not live and consult is not None:
                decided = await consult()
                if decided is not None and decided.outcome in ("noop", "updated"):
                    return decided
                replaced = decided.other if decided is not None else None
            held = slot.said if slot.said is not None else _said_of(current)
            # Said at the same moment (one message, two values): the later
            # add wins, as the later clause of the message does.
            if live and held is not None and said < held:
                earlier = None if same_id is None else await self._items.get(uid, same_id)
                if (
                    earlier is not None
                    and earlier.record.status == "superseded"
                    and isinstance(earlier.record, Fact)
                    and slot_key(earlier.record) == slot.key
                    and normalize_text(earlier.record.text) == normalize_text(new.text)
                ):
                    # An old statement of a value in the history, in the same
                    # words: one more source of that record, no copy.
                    added = await self._items.add_source(uid, earlier, new, op, guard, "outdated")
                    if added is None:
                        return None
                    return AddResult(added.record, "outdated", added.record.superseded_by)
            else:
                written = await self._take(
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
                done = await self.settle(uid, slot, guard, arriving=new.id)
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
                        "superseded_at": utc_now(),
                    }
                )
                change = "added"
                reason = f"said before the current value {slot.current}"
            try:
                if not await self._items.put(
                    uid,
                    record,
                    version=0,
                    change=change,
                    reason=reason,
                    guard=guard,
                    while_slot=slot.at if becomes else None,
                ):
                    return None
            except VersionConflict:
                # A concurrent re-send of this add put it (read below), or the
                # slot moved since it was settled (then nothing was put: the
                # add starts again).
                pass
            got = await self._items.get(uid, new.id)
            if got is None:
                raise VersionConflict(f"memory {new.id!r}", 0, 0)
            mine = got
            fresh = True
        else:
            fresh = False  # a re-send: whatever happened since, settle
        await self._items.point(uid, text_key, new.id, text_version, guard)
        # Settle again unless the slot held still since it was last settled:
        # a writer that moved it meanwhile may have missed this record.
        again = await self.read(uid, slot.key)
        if again.version != settled or not fresh:
            if await self.settle(uid, again, guard, own=new.id) is None:
                return None
            got = await self._items.get(uid, new.id)
            mine = got if got is not None else mine
        final = mine.record
        if final.status == "superseded" and slot.current != new.id:
            return AddResult(final, "outdated", final.superseded_by)
        outcome: AddOutcome = "superseded" if final.supersedes else "added"
        return AddResult(final, outcome, final.supersedes or replaced)

    async def read(self, uid: str, key: str) -> Slot:
        """The slot ``key`` of ``uid`` (empty, at version 0, if never written)."""
        item = await self._items.store.get((uid, LOOKUPS), key)
        if item is None:
            return Slot(key, 0, None, None, None, [])
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
        return Slot(
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
        store = self._items.store
        found = await store.search(
            (uid, RECORDS), filter={"kind": "fact", "status": "active"}, limit=100_000
        )
        ids = [current] if current else []
        for item in found:
            record = self._items.decode(item)
            slotted = isinstance(record, Fact) and record.is_single_valued()
            if slotted and isinstance(record, Fact) and slot_key(record) == key:
                ids.append(record.id)
        return list(dict.fromkeys(ids))

    async def _write(
        self,
        uid: str,
        slot: Slot,
        guard: tuple[str, str] | None,
        **changes: Any,
    ) -> Slot | None:
        """Compare-and-set the slot with ``changes`` (fields of ``Slot``):
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
        put = await self._items.store.put_guarded(
            (uid, LOOKUPS),
            slot.key,
            value,
            index=False,
            ttl=self._items.ttl,
            if_version=slot.version,
            guard=guard,
        )
        if put is None:
            return None
        return Slot(slot.key, put.version, current, said, previous, open_)

    async def _take(
        self,
        uid: str,
        slot: Slot,
        memory_id: str,
        said: tuple[int, str],
        previous: str | None,
        guard: tuple[str, str] | None,
    ) -> Slot | None:
        """Make ``memory_id`` the slot's current value (compare-and-set),
        said at ``said``, replacing ``previous``. Its ``open`` list keeps the
        old current value and the records not seen superseded or deleted
        (they may still be active; they are few)."""
        others = [m for m in slot.open if m not in (slot.current, memory_id)]
        stored = await asyncio.gather(*(self._items.get(uid, m) for m in others))
        still = [
            m
            for m, held in zip(others, stored, strict=True)
            if held is None or held.record.status == "active"
        ]
        ahead = [slot.current] if slot.current is not None else []
        open_ = list(dict.fromkeys([*still, *ahead, memory_id]))
        return await self._write(
            uid, slot, guard, current=memory_id, said=said, previous=previous, open=open_
        )

    async def raise_said(
        self, uid: str, record: MemoryRecord, said: tuple[int, str], guard: tuple[str, str] | None
    ) -> None:
        """The current value was said again at ``said``: later than the slot
        holds, it counts from then on (an older statement then loses to it)."""
        if not isinstance(record, Fact):
            return
        for _attempt in range(MAX_TRIES):
            slot = await self.read(uid, slot_key(record))
            if slot.current != record.id or (slot.said is not None and slot.said >= said):
                return
            try:
                await self._write(uid, slot, guard, said=said)
                return
            except VersionConflict:
                continue

    async def settle(
        self,
        uid: str,
        slot: Slot,
        guard: tuple[str, str] | None,
        *,
        arriving: str | None = None,
        own: str | None = None,
    ) -> Slot | None:
        """Bring the slot's records in line with it: every record that may
        be active (``open``) but the current one superseded by it, first;
        then the current one active again if a stale settle had superseded
        it. Repeated until the slot holds still, so whoever changed it last
        settles last. Returns the slot as settled, or None when the guard
        refused. ``arriving``: the current record is being added or
        restored by the caller, who makes it active. ``own``: a record the
        caller stored (looked at whether or not the slot lists it)."""
        touched: set[str] = set()
        for _round in range(MAX_TRIES):
            extra = [m for m in (slot.current, own, *sorted(touched)) if m is not None]
            ids = list(dict.fromkeys([*slot.open, *extra]))
            stored = await asyncio.gather(*(self._items.get(uid, m) for m in ids))
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
                            "superseded_at": utc_now(),
                        }
                    )
                    reason = f"superseded by {live}" if live else "no longer current"
                    if not await self._items.put(
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
                    if not await self._items.put(
                        uid,
                        back,
                        version=target.version,
                        change="restored",
                        reason="the current value again",
                        guard=guard,
                        while_slot=slot.at,
                    ):
                        return None
            except VersionConflict:
                slot = await self.read(uid, slot.key)
                continue
            again = await self.read(uid, slot.key)
            if again.version == slot.version:
                return slot
            slot = again
        raise VersionConflict(f"memory slot {slot.key!r}", slot.version, 0)

    async def make_current(self, uid: str, stored: Stored, reason: str) -> bool:
        """``restore`` of a single-valued fact: it becomes the slot's current
        value, said now; the value it replaces is superseded by it."""
        record = stored.record
        assert isinstance(record, Fact)
        slot = await self.read(uid, slot_key(record))
        previous = slot.current if slot.current != record.id else slot.previous
        now = (int(time.time() * 1000), "")
        written = await self._take(uid, slot, record.id, now, previous, None)
        assert written is not None  # only a guarded write is ever refused
        # The old value goes first: never two current values at once.
        settled = await self.settle(uid, written, None, arriving=record.id)
        assert settled is not None  # only a guarded write is ever refused
        update: dict[str, Any] = {
            "status": "active",
            "superseded_by": None,
            "superseded_at": None,
        }
        if previous is not None:
            update["supersedes"] = previous
        for _attempt in range(MAX_TRIES):
            if settled.current != record.id:
                break  # a later value took the slot meanwhile: this one stays in history
            try:
                await self._items.put(
                    uid,
                    stored.record.model_copy(update=update),
                    version=stored.version,
                    change="restored",
                    reason=reason,
                    guard=None,
                    while_slot=settled.at,
                )
                break
            except VersionConflict:
                # A settle found it current and made it active meanwhile
                # (this restore still records itself, on the latest
                # version), or the slot moved: settled again, it is current
                # still, or a later value took the slot and this one stays
                # in history.
                again = await self._items.get(uid, record.id)
                if again is None:
                    return False  # purged meanwhile
                stored = again
                slot_now = await self.read(uid, slot.key)
                if slot_now.current == record.id:
                    slot_now = (
                        await self.settle(uid, slot_now, None, arriving=record.id) or slot_now
                    )
                settled = slot_now
        await self.settle(uid, await self.read(uid, slot.key), None, own=record.id)
        return True

    async def leave(self, uid: str, record: MemoryRecord, *, purged: bool) -> None:
        """After ``record`` was deleted (or purged): it is no longer the
        slot's current value (and, purged, no longer listed by it)."""
        if not is_slotted(record):
            return
        assert isinstance(record, Fact)
        for _attempt in range(MAX_TRIES):
            slot = await self.read(uid, slot_key(record))
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
                await self._write(uid, slot, None, **changes)
                return
            except VersionConflict:
                continue
