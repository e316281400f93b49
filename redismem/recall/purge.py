"""Purging a cleared session's docs from a user's format-2 recall index.

``clear.lua`` makes a session's docs unreachable at once (the session's
ordinal marked dead: no search returns them) and lists the ordinal in
``i:purge``. The purge then removes every trace of them: each posting and
filter list they are in is rewritten without them (``record_lists`` names
the lists from the docs' records), then their records (open, or in sealed
blocks rewritten here), their doc-table slots and the session's own list go
(``index_purge.lua``). ``Memory.clear`` runs it before it returns; a worker
finishes one that a dead client left (``forget_graves``). Every call is
idempotent, so a purge killed halfway is simply run again.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from redismem.core.keys import RecallKeys
from redismem.errors import CorruptData
from redismem.recall import postings
from redismem.recall.index import drop_empty_index, forget_graves, record_lists

if TYPE_CHECKING:
    from redismem.core.backend import Backend

__all__ = ["forget_cleared", "purge_cleared"]

#: Lists rewritten per script call, and their bytes at most (a list longer
#: than that goes alone): each call decodes what it rewrites, so this bounds
#: how long one call holds the server.
LISTS_PER_CALL = 200
BYTES_PER_CALL = 256 * 1024
#: Attempts of the final call while record blocks are being sealed meanwhile.
_FINAL_ATTEMPTS = 10


async def forget_cleared(backend: Backend, recall: RecallKeys) -> None:
    """Remove every trace of the user's cleared sessions from the recall
    index, both formats (format 1's graves, format 2's purge), then the
    format-2 index itself when no doc of it is live."""
    await forget_graves(backend, recall)
    await purge_cleared(backend, recall)
    await drop_empty_index(backend, recall)


async def purge_cleared(backend: Backend, recall: RecallKeys) -> int:
    """Purge every cleared session listed in the user's ``i:purge``;
    returns how many were purged."""
    ordinals = await backend.call(functools.partial(_members, key=recall.i_purge))
    for ordinal in sorted(ordinals):
        await _purge(backend, recall, ordinal)
    return len(ordinals)


async def _purge(backend: Backend, recall: RecallKeys, ordinal: int) -> None:
    own = await backend.call(functools.partial(_get, key=recall.i_session_list(ordinal)))
    docids = [docid for docid, _q in postings.decode_postings(own)] if own else []
    records = await _records(backend, recall, docids)
    for _ in range(_FINAL_ATTEMPTS):
        # A seal moving a record between the two reads hides it from both:
        # read again (every doc of the list has a record).
        if len(records) == len(docids):
            break
        records = await _records(backend, recall, docids)
    created = await _created(backend, recall, docids)
    lists: set[str] = set()
    for docid, record in records.items():
        if docid in created:
            lists |= record_lists(record, created[docid], recall.i_rec)
    ordered = sorted(lists)
    sizes = await backend.call(
        functools.partial(_strlens, keys=[recall.i_prefix + suffix for suffix in ordered])
    )
    chunk: list[str] = []
    held = 0
    for suffix, size in zip(ordered, sizes, strict=True):
        if chunk and (len(chunk) >= LISTS_PER_CALL or held + size > BYTES_PER_CALL):
            await backend.scripts.index_purge(recall, ordinal=ordinal, lists=chunk)
            chunk, held = [], 0
        if size:
            chunk.append(suffix)
            held += size
    if chunk:
        await backend.scripts.index_purge(recall, ordinal=ordinal, lists=chunk)
    for _ in range(_FINAL_ATTEMPTS):
        blocks = await _rewritten_blocks(backend, recall, docids)
        if await backend.scripts.index_purge(recall, ordinal=ordinal, lists=[], blocks=blocks):
            return
    raise CorruptData(recall.i_docs, "record blocks kept changing during a purge")


async def _records(backend: Backend, recall: RecallKeys, docids: list[int]) -> dict[int, bytes]:
    """The records of ``docids``, open or sealed."""
    if not docids:
        return {}
    fields = [str(d) for d in docids]
    open_ = await backend.call(functools.partial(_hmget, key=recall.i_rec, fields=fields))
    out = {d: bytes(r) for d, r in zip(docids, open_, strict=True) if r is not None}
    missing = [d for d in docids if d not in out]
    blocks = sorted({postings.block_of(d) for d in missing})
    if blocks:
        raw = await backend.call(
            functools.partial(_hmget, key=recall.i_docs, fields=[str(b) for b in blocks])
        )
        rows = {b: postings.decode_block(bytes(r)) for b, r in zip(blocks, raw, strict=True) if r}
        for d in missing:
            row = rows.get(postings.block_of(d))
            record = row[d % postings.BLOCK] if row is not None else None
            if record is not None:
                out[d] = record
    return out


async def _created(backend: Backend, recall: RecallKeys, docids: list[int]) -> dict[int, int]:
    """The write time (ms) of each of ``docids`` from the doc table."""
    out: dict[int, int] = {}
    for chunk in sorted({d // postings.DT_CHUNK for d in docids}):
        table = await backend.call(functools.partial(_get, key=recall.i_doc_table(chunk)))
        if table:
            slots = postings.decode_slots(chunk, bytes(table))
            out.update({d: slots[d].created_ms for d in docids if d in slots})
    return out


async def _rewritten_blocks(
    backend: Backend, recall: RecallKeys, docids: list[int]
) -> list[tuple[int, bytes, bytes]]:
    """Each sealed block holding some of ``docids``: (block, its bytes, its
    bytes without their records; b"" when no record is left)."""
    gone = set(docids)
    blocks = sorted({postings.block_of(d) for d in docids})
    if not blocks:
        return []
    raw = await backend.call(
        functools.partial(_hmget, key=recall.i_docs, fields=[str(b) for b in blocks])
    )
    out = []
    for block, data in zip(blocks, raw, strict=True):
        if data is None:
            continue
        rows = postings.decode_block(bytes(data))
        first = block * postings.BLOCK
        kept = [None if first + i in gone else row for i, row in enumerate(rows)]
        new = postings.encode_block(kept) if any(r is not None for r in kept) else b""
        out.append((block, bytes(data), new))
    return out


async def _strlens(redis: Any, *, keys: list[str]) -> list[int]:
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.strlen(key)
    return [int(size) for size in await pipe.execute()]


async def _members(redis: Any, *, key: str) -> list[int]:
    return [int(m) for m in await redis.smembers(key)]


async def _get(redis: Any, *, key: str) -> bytes | None:
    value: bytes | None = await redis.get(key)
    return value


async def _hmget(redis: Any, *, key: str, fields: list[str]) -> list[bytes | None]:
    values: list[bytes | None] = await redis.hmget(key, fields)
    return values
