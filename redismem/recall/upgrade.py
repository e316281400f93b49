"""The automatic upgrade of a user's recall index from format 1 (a sorted
set per term, ``r:*``) to format 2 (``i:*``, see ``redismem.core.keys``).

Format 1 keeps serving searches and commits until the switch, so nothing is
ever read in two formats at once. A worker whose commit went to format 1
(``IndexOutcome.format1``) calls ``upgrade``: it copies the format-1 docs
into format 2 in docid order, a batch per ``index_migrate.lua`` call, each
doc keeping its docid, write time, deadline, weights, filters and session
link, with compare-and-set on the copy's cursor (``i:meta mig``): a re-sent
or concurrent call changes nothing, and a worker killed between two calls
leaves a cursor the next one resumes from. Docs of a session cleared since
(in a grave) and expired docs are not copied. The call that copies the last
docid hands over to format 2 (``i:meta v = 2``); ``index_retire.lua`` then
deletes format 1 by docid range. A ``clear_user`` meanwhile fences every
call (the epoch guard) and its prefix delete removes both formats.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redismem.core.epochs import EpochMoved, in_epoch
from redismem.core.keys import RecallKeys, validate_id
from redismem.recall.index import seal_blocks

if TYPE_CHECKING:
    from redismem.core.backend import Backend

__all__ = ["MIGRATE_BATCH", "RETIRE_BATCH", "UpgradeOutcome", "upgrade"]

#: Format-1 docids one ``index_migrate.lua`` call looks at.
MIGRATE_BATCH = 500
#: Format-1 docids one ``index_retire.lua`` call deletes.
RETIRE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class UpgradeOutcome:
    #: "done": format 2 serves the user and format 1 is gone; "partial": out
    #: of time (the next call resumes); "gone": the user was cleared.
    status: str
    copied: int = 0


async def upgrade(
    backend: Backend, *, user_id: str, time_budget: float | None = None
) -> UpgradeOutcome:
    """Move the user's recall index to format 2 (a no-op when it is there
    already), within ``time_budget`` seconds when given."""
    uid = validate_id(user_id, "user_id")
    until = None if time_budget is None else time.monotonic() + time_budget

    async def run(epoch: int) -> UpgradeOutcome:
        recall = backend.layout.recall(uid, epoch)
        copied = await _copy(backend, recall, until)
        if copied is None:
            return UpgradeOutcome("partial")
        start = 1
        while start:
            start = await backend.scripts.index_retire(recall, start=start, batch=RETIRE_BATCH)
        return UpgradeOutcome("done", copied)

    try:
        return await in_epoch(backend.epochs, uid, run)
    except EpochMoved:
        return UpgradeOutcome("gone")


async def _copy(backend: Backend, recall: RecallKeys, until: float | None) -> int | None:
    """Copy until format 2 takes over; the docs copied, None when out of time."""
    cursor, copied = "", 0
    while True:
        step = await backend.scripts.index_migrate(recall, cursor=cursor, batch=MIGRATE_BATCH)
        copied += step.copied
        await seal_blocks(backend, recall, next_docid=step.next_docid, sealed=step.sealed)
        if step.status == 2:
            return copied
        cursor = str(step.cursor)
        if until is not None and time.monotonic() >= until:
            return None
