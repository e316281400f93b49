"""One extraction pass over a session: new messages -> typed memories, once each.

Workers with an extractor run a pass after indexing a session (it reads only
indexed messages, after the session's extraction watermark ``xwm``). A pass:

1. applies the outbox ``xbox`` a previous pass committed, if one is left
   (that pass died between its commit and the end of its apply);
2. reads the indexed messages after ``xwm`` (at most ``cap``) and, unless the
   newest was written less than ``quiet`` seconds ago (a burst is extracted
   once, when it is over), hands them to the extractor;
3. commits the advanced watermark and the memories found as the new outbox,
   with compare-and-set on the watermark and the session's incarnation;
4. applies the outbox with ``mem.memories.add``, each memory under a write id
   derived from the outbox (a re-applied memory is not added twice), guarded
   by the session's incarnation, then clears it.

Nothing is written before step 3, so a pass that dies or fails (extractor
error, timeout) changes nothing and the next one extracts the same
messages; after step 3 the outbox survives a SIGKILL and is applied by the
next pass. So every message is considered once, and every memory found is
added once. A session cleared meanwhile takes its outbox with it, and the
guard refuses memories on its behalf. Summarization never compacts a message
before it is extracted (``xwm`` bounds it, see ``commit.lua``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import msgpack
from pydantic import TypeAdapter, ValidationError

from redismem.core import codec
from redismem.core.epochs import EpochMoved
from redismem.core.keys import SessionKeys, validate_id
from redismem.errors import CorruptData, ExtractorError
from redismem.longterm.memories import Knowledge
from redismem.longterm.records import MemoryRecord, Provenance

if TYPE_CHECKING:
    from redismem.core.backend import Backend
    from redismem.core.scripts import ExtractRead
    from redismem.longterm.consolidation import Consolidator
    from redismem.longterm.extraction import Extractor

__all__ = ["EXTRACT_BATCH", "ExtractOutcome", "extract_pass"]

#: Most messages one pass hands to the extractor.
EXTRACT_BATCH = 50
#: Most memories kept from one pass (an extractor gone wild is cut here).
MAX_MEMORIES_PER_PASS = 200
_OUTBOX_VERSION = 1
_RECORD = TypeAdapter[Any](MemoryRecord)
_RECORDS = TypeAdapter[Any](list[MemoryRecord])


@dataclass(frozen=True, slots=True)
class ExtractOutcome:
    status: Literal["extracted", "idle", "wait", "stale", "gone", "timeout"]
    messages: int = 0
    memories: int = 0
    #: "wait": seconds until the session has been quiet long enough.
    wait: float = 0.0
    #: From the newest extracted message's write to its memories being stored.
    lag_ms: int | None = None


async def extract_pass(
    backend: Backend,
    extractor: Extractor,
    *,
    user_id: str,
    session_id: str,
    quiet: float = 2.0,
    cap: int = EXTRACT_BATCH,
    extractor_timeout: float = 60.0,
    consolidator: Consolidator | None = None,
) -> ExtractOutcome:
    """Extract the session's next messages once (see the module docstring).
    Raises ``ExtractorError`` when the extractor fails; nothing changed then.
    ``consolidator`` decides about near duplicates of what was found."""
    sid = validate_id(session_id, "session_id")
    uid = validate_id(user_id, "user_id")

    async def read_at(keys: SessionKeys) -> tuple[SessionKeys, ExtractRead]:
        return keys, await backend.scripts.extract_read(keys, cap=cap)

    # The pass reads the user's current epoch and writes to that epoch only:
    # the user cleared meanwhile, it is "gone".
    keys, read = await backend.in_session(uid, sid, read_at)
    try:
        return await _extract(
            backend, extractor, keys, read, uid, sid, quiet, cap, extractor_timeout, consolidator
        )
    except EpochMoved:
        return ExtractOutcome("gone")


async def _extract(
    backend: Backend,
    extractor: Extractor,
    keys: SessionKeys,
    read: ExtractRead,
    uid: str,
    sid: str,
    quiet: float,
    cap: int,
    extractor_timeout: float,
    consolidator: Consolidator | None,
) -> ExtractOutcome:
    if not read.seq:
        return ExtractOutcome("gone")
    memories = Knowledge(backend, consolidator=consolidator)
    applied = 0
    if read.outbox is not None:
        done = await _apply(memories, uid, keys.meta, read.gen, read.outbox)
        if done is None:
            return ExtractOutcome("gone")
        applied = done
        await backend.scripts.extract_clear(keys, outbox=read.outbox)
        read = await backend.scripts.extract_read(keys, cap=cap)
        if not read.seq:
            return ExtractOutcome("gone")
    if not read.first_seq:
        return ExtractOutcome("idle", memories=applied)

    entries = [codec.decode_entry(r, keys.entries) for r in reversed(read.entries)]
    created = [(e.first_seq, e.created_ms) for e in entries]
    messages = codec.decode_messages(read.messages, read.first_seq, created, keys.msgs)
    newest_ms = max((e.created_ms for e in entries), default=0)
    waited = time.time() - newest_ms / 1000
    if waited < quiet:
        return ExtractOutcome("wait", wait=quiet - waited)

    try:
        found = await asyncio.wait_for(extractor.extract(messages, user_id=uid), extractor_timeout)
    except TimeoutError as exc:
        raise ExtractorError(f"extractor timed out after {extractor_timeout}s") from exc
    except ExtractorError:
        raise
    except Exception as exc:
        raise ExtractorError(f"extractor raised {exc!r}") from exc
    if not isinstance(found, list):
        raise ExtractorError(f"extractor returned {type(found).__name__}, not a list")

    agents = _agents(entries, read.first_seq, len(messages))
    ids = {m.id: agents[i] for i, m in enumerate(messages)}
    said = {m.id: m.created_at for m in messages}
    records = [
        _with_source(record, sid, ids, said, extractor.name)
        for record in found[:MAX_MEMORIES_PER_PASS]
    ]
    until = read.first_seq + len(messages) - 1
    outbox = b""
    if records:
        outbox = msgpack.packb(
            [_OUTBOX_VERSION, until, [r.model_dump(mode="json") for r in records]],
            use_bin_type=True,
        )
    status = await backend.scripts.extract_commit(keys, read=read, until_seq=until, outbox=outbox)
    if status != "committed":
        return ExtractOutcome("gone" if status == "gone" else "stale")
    if records:
        done = await _apply(memories, uid, keys.meta, read.gen, outbox)
        if done is None:
            return ExtractOutcome("gone")
        applied += done
        await backend.scripts.extract_clear(keys, outbox=outbox)
    lag = int(time.time() * 1000) - newest_ms
    return ExtractOutcome("extracted", len(messages), applied, lag_ms=lag)


def _agents(entries: list[codec.DecodedEntry], first: int, count: int) -> list[str | None]:
    """The agent that wrote each of ``count`` messages from seq ``first``."""
    out: list[str | None] = []
    at = 0
    for seq in range(first, first + count):
        while at + 1 < len(entries) and entries[at + 1].first_seq <= seq:
            at += 1
        out.append(entries[at].agent_name if entries else None)
    return out


def _with_source(
    record: Any,
    session_id: str,
    agents: dict[str | None, str | None],
    said: dict[str | None, datetime | None],
    origin: str,
) -> MemoryRecord:
    """``record`` with one source: this session, the batch's message ids it
    names (others dropped), the agent that wrote the first of them, and when
    the last of them was said (what orders values of one fact, whatever order
    the workers extract in)."""
    try:
        checked = _RECORD.validate_python(
            record.model_dump() if hasattr(record, "model_dump") else record
        )
    except ValidationError as exc:
        raise ExtractorError(f"extractor returned an invalid memory: {exc}") from exc
    named = [i for s in checked.sources for i in s.message_ids if i in agents]
    message_ids = list(dict.fromkeys(named))
    agent = agents.get(message_ids[0]) if message_ids else None
    times = [t for i in message_ids if (t := said.get(i)) is not None]
    source = Provenance(
        session_id=session_id,
        message_ids=message_ids,
        agent=agent,
        origin=origin,
        at=max(times) if times else None,
    )
    result: MemoryRecord = checked.model_copy(update={"id": "", "sources": [source]})
    return result


async def _apply(
    memories: Knowledge, user_id: str, meta: str, gen: str, outbox: bytes
) -> int | None:
    """Add an outbox's memories (each once, whatever ran before); None when
    the session was cleared (the guard refused)."""
    try:
        version, until, raw = msgpack.unpackb(outbox, raw=False)
        if version != _OUTBOX_VERSION:
            raise ValueError(f"unknown outbox version {version!r}")
        records = _RECORDS.validate_python(raw)
    except (ValueError, TypeError, ValidationError, msgpack.UnpackException) as exc:
        raise CorruptData(meta, f"extraction outbox: {exc}") from exc
    added = 0
    for position, record in enumerate(records):
        result = await memories.add_guarded(
            record,
            user_id=user_id,
            write_id=f"x:{gen}:{until}:{position}",
            guard=(meta, gen),
        )
        if result is None:
            return None
        added += 1
    return added
