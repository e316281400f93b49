"""Recall index format 2: the byte layouts, encoded and decoded in Python.

The workers' Lua (``_index.lua``) writes these structures and the search
script (``_postings.lua``) reads them; this module is the reference both are
tested against, and ``build`` a whole index written the way the commit
writes it (``docs/index-format.md``, the spec in the module docstring of
``redismem.core.keys``)::

    posting list   4-byte header: the list's last docid (big-endian uint32),
                   then per posting varint((docid - previous docid) << 6 | q),
                   the first posting's previous docid 0; q in 1..63 (terms),
                   0 (filter lists). varint: unsigned LEB128.
    doc table      i:dt:<docid // 4096>, a 22-byte slot per docid at
                   (docid % 4096) * 22, big-endian: created ms (6),
                   deadline in s since 2020-01-01T00:00Z (4, 0 = none),
                   previous / next doc of the session as docid delta (3 + 3,
                   0 = none), session ordinal (3), role code (1), speaker
                   ordinal (2, 0 = no name). All zeroes: no doc.
    record block   i:docs field <docid // 64>: zlib (level 6) of, for each
                   docid 64b .. 64b+63, varint(len) then the record (len 0:
                   no doc). Blocks are sealed once every docid of them is
                   given (64b + 63 <= i:meta next); later records live in
                   i:rec (docid -> record); i:meta ``sealed``: every block below it is.

Docids start at 1; session and speaker ordinals too.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from redismem.core.keys import escape_id
from redismem.recall.ranking import quantize_weight

__all__ = [
    "BLOCK",
    "DT_CHUNK",
    "EPOCH_2020_MS",
    "HEADER",
    "MAX_LINK",
    "SLOT",
    "Doc",
    "Slot",
    "append_postings",
    "block_of",
    "build",
    "deadline_field",
    "decode_block",
    "decode_postings",
    "decode_slot",
    "decode_slots",
    "decode_varint",
    "encode_block",
    "encode_postings",
    "encode_slot",
    "encode_varint",
    "is_expired",
    "last_docid",
    "slot_at",
]

#: Bytes of a posting list's header (its last docid).
HEADER = 4
#: Docids per doc-table string, and bytes per slot.
DT_CHUNK = 4096
SLOT = 22
#: Docids per record block.
BLOCK = 64
#: 2020-01-01T00:00:00Z in ms: the origin of the slots' deadlines.
EPOCH_2020_MS = 1_577_836_800_000
#: A session link further than this (3 bytes of delta) is dropped.
MAX_LINK = (1 << 24) - 1
_MAX_DOCID = (1 << 32) - 1


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128: 7 bits per byte, low group first, high bit = more."""
    if value < 0:
        raise ValueError(f"varint of a negative number: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """``(value, position after it)``."""
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def encode_postings(postings: Iterable[tuple[int, int]], after: int = 0) -> bytes:
    """The body of a posting list (no header): ``(docid, q)`` in ascending
    docid order, each docid > the previous one (``after`` for the first)."""
    out = bytearray()
    prev = after
    for docid, q in postings:
        if docid <= prev or docid > _MAX_DOCID:
            raise ValueError(f"docid {docid} after {prev}")
        if not 0 <= q <= 63:
            raise ValueError(f"weight level {q} outside 0..63")
        out += encode_varint(((docid - prev) << 6) | q)
        prev = docid
    return bytes(out)


def last_docid(data: bytes) -> int:
    """A posting list's header."""
    return int.from_bytes(data[:HEADER], "big")


def append_postings(existing: bytes | None, postings: Sequence[tuple[int, int]]) -> bytes:
    """A posting list (header included) with ``postings`` appended, as a
    commit does it: the header rewritten, the body appended."""
    if not postings:
        return existing or b""
    last = last_docid(existing) if existing else 0
    body = existing[HEADER:] if existing else b""
    return postings[-1][0].to_bytes(HEADER, "big") + body + encode_postings(postings, last)


def decode_postings(data: bytes) -> list[tuple[int, int]]:
    """``(docid, q)`` of a whole posting list (header included), ascending."""
    out: list[tuple[int, int]] = []
    pos, doc = HEADER, 0
    while pos < len(data):
        value, pos = decode_varint(data, pos)
        doc += value >> 6
        out.append((doc, value & 63))
    if out and out[-1][0] != last_docid(data):
        raise ValueError(f"posting list header {last_docid(data)} != last docid {out[-1][0]}")
    return out


@dataclass(frozen=True, slots=True)
class Slot:
    """A doc-table slot, links as absolute docids (None: no link)."""

    created_ms: int
    #: Seconds since 2020-01-01T00:00Z (``deadline_field``), 0 = none.
    deadline: int
    prev: int | None
    next: int | None
    session: int
    role: int
    speaker: int


def deadline_field(deadline_ms: int | None) -> int:
    """A deadline in ms as the slot keeps it: whole seconds since 2020,
    rounded up (a doc never goes before its ms deadline); 0 = none."""
    if deadline_ms is None:
        return 0
    return max(1, math.ceil((deadline_ms - EPOCH_2020_MS) / 1000))


def is_expired(deadline: int, now_ms: int) -> bool:
    """Whether a slot's deadline has passed at ``now_ms`` (search skips it)."""
    return deadline != 0 and EPOCH_2020_MS + deadline * 1000 <= now_ms


def encode_slot(docid: int, slot: Slot) -> bytes:
    def delta(other: int | None) -> int:
        if other is None:
            return 0
        d = abs(other - docid)
        return d if 0 < d <= MAX_LINK else 0

    return (
        slot.created_ms.to_bytes(6, "big")
        + slot.deadline.to_bytes(4, "big")
        + delta(slot.prev).to_bytes(3, "big")
        + delta(slot.next).to_bytes(3, "big")
        + slot.session.to_bytes(3, "big")
        + slot.role.to_bytes(1, "big")
        + slot.speaker.to_bytes(2, "big")
    )


def decode_slot(docid: int, raw: bytes) -> Slot | None:
    """The slot of ``docid`` from its 22 bytes (None: all zero, no doc)."""
    if len(raw) < SLOT or not any(raw[:SLOT]):
        return None
    prev = int.from_bytes(raw[10:13], "big")
    nxt = int.from_bytes(raw[13:16], "big")
    return Slot(
        created_ms=int.from_bytes(raw[0:6], "big"),
        deadline=int.from_bytes(raw[6:10], "big"),
        prev=docid - prev if prev else None,
        next=docid + nxt if nxt else None,
        session=int.from_bytes(raw[16:19], "big"),
        role=raw[19],
        speaker=int.from_bytes(raw[20:22], "big"),
    )


def slot_at(docid: int) -> tuple[int, int]:
    """``(chunk, byte offset)`` of a docid's slot."""
    chunk, index = divmod(docid, DT_CHUNK)
    return chunk, index * SLOT


def decode_slots(chunk: int, table: bytes) -> dict[int, Slot]:
    """Every doc of one doc-table string (shorter strings: the rest absent)."""
    out: dict[int, Slot] = {}
    for index in range(len(table) // SLOT):
        docid = chunk * DT_CHUNK + index
        slot = decode_slot(docid, table[index * SLOT : (index + 1) * SLOT])
        if slot is not None:
            out[docid] = slot
    return out


def block_of(docid: int) -> int:
    return docid // BLOCK


def encode_block(records: Sequence[bytes | None]) -> bytes:
    """The zlib block of ``BLOCK`` records (None or empty: no doc)."""
    if len(records) != BLOCK:
        raise ValueError(f"a block holds {BLOCK} records, not {len(records)}")
    raw = bytearray()
    for record in records:
        record = record or b""
        raw += encode_varint(len(record)) + record
    return zlib.compress(bytes(raw), 6)


def decode_block(block: bytes, upto: int = BLOCK - 1) -> list[bytes | None]:
    """The records of a block, None where no doc: all ``BLOCK`` of them, or
    those up to index ``upto`` (a search reads only what its hits need)."""
    raw = zlib.decompress(block)
    out: list[bytes | None] = []
    pos, end = 0, len(raw)
    while pos < end and len(out) <= upto:
        n, shift = 0, 0
        while True:  # varint, inlined: a search inflates a block per hit
            b = raw[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        out.append(raw[pos : pos + n] if n else None)
        pos += n
    if len(out) != min(BLOCK, upto + 1) or (upto >= BLOCK - 1 and pos != end):
        raise ValueError(f"a record block of {len(out)} records")
    return out


@dataclass(frozen=True, slots=True)
class Doc:
    """One message as ``build`` indexes it (what ``IndexDoc`` carries, with
    the session and deadline the commit has from the session)."""

    session_id: str
    created_ms: int
    #: ``b"role|name terms|" + payload`` (``index._doc``).
    record: bytes
    #: term -> weight (``ranking.doc_weights``), quantized by ``build``.
    weights: Mapping[str, float]
    agent: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    deadline_ms: int | None = None


def _record_role_names(record: bytes) -> tuple[int, str]:
    role, _, rest = record.partition(b"|")
    names, _, _ = rest.partition(b"|")
    return int(role), names.decode()


def build(
    docs: Sequence[Doc],
    *,
    cleared: Iterable[str] = (),
    seal: bool = True,
) -> dict[str, bytes | dict[str, bytes]]:
    """The format-2 index of ``docs`` (docids 1, 2, ... in this order), as
    ``{key suffix after the epoch prefix: STRING bytes or HASH fields}``.

    Session ordinals and speaker ordinals are given in order of first use;
    a session's docs are linked in docid order. ``cleared``: sessions
    cleared after the last doc (clear.lua: dead bit, mapping and counts
    gone). ``seal``: complete record blocks moved to ``i:docs``.
    """
    out: dict[str, bytes | dict[str, bytes]] = {}
    sess: dict[str, bytes] = {}
    spk: dict[str, bytes] = {}
    session_ord: dict[str, int] = {}
    session_count: dict[int, int] = {}
    speaker_ord: dict[str, int] = {}
    last_of: dict[int, int] = {}
    lists: dict[str, list[tuple[int, int]]] = {}
    slots: dict[int, Slot] = {}
    records: dict[int, bytes] = {}
    for docid, doc in enumerate(docs, start=1):
        ords = session_ord.setdefault(doc.session_id, len(session_ord) + 1)
        session_count[ords] = session_count.get(ords, 0) + 1
        role, names = _record_role_names(doc.record)
        speaker = 0
        if names:
            speaker = speaker_ord.setdefault(names, len(speaker_ord) + 1)
        prev = last_of.get(ords)
        if prev is not None and docid - prev > MAX_LINK:
            prev = None
        if prev is not None:
            old = slots[prev]
            slots[prev] = Slot(
                old.created_ms, old.deadline, old.prev, docid, old.session, old.role, old.speaker
            )
        last_of[ords] = docid
        slots[docid] = Slot(
            doc.created_ms, deadline_field(doc.deadline_ms), prev, None, ords, role, speaker
        )
        records[docid] = doc.record
        for term, weight in doc.weights.items():
            lists.setdefault(f"i:t:{term}", []).append((docid, quantize_weight(weight)))
        filters = [f"i:f:s:{ords}"]
        if doc.agent is not None:
            filters.append(f"i:f:a:{escape_id(doc.agent)}")
        filters += [f"i:f:g:{escape_id(k)}={escape_id(v)}" for k, v in doc.tags.items()]
        for suffix in filters:
            lists.setdefault(suffix, []).append((docid, 0))
    n_docs = len(docs)
    for suffix, plist in lists.items():
        out[suffix] = append_postings(None, plist)
    for chunk in sorted({d // DT_CHUNK for d in slots}):
        top = max(d for d in slots if d // DT_CHUNK == chunk)
        table = bytearray((top % DT_CHUNK + 1) * SLOT)
        for docid, slot in slots.items():
            if docid // DT_CHUNK == chunk:
                _, off = slot_at(docid)
                table[off : off + SLOT] = encode_slot(docid, slot)
        out[f"i:dt:{chunk}"] = bytes(table)
    rec: dict[str, bytes] = {}
    blocks: dict[str, bytes] = {}
    for block in sorted({block_of(d) for d in records}):
        ids = range(block * BLOCK, (block + 1) * BLOCK)
        if seal and ids[-1] <= n_docs:
            blocks[str(block)] = encode_block([records.get(d) for d in ids])
        else:
            rec.update((str(d), records[d]) for d in ids if d in records)
    if rec:
        out["i:rec"] = rec
    if blocks:
        out["i:docs"] = blocks
    for sid, ords in session_ord.items():
        sess[escape_id(sid)] = str(ords).encode()
        sess[f"#{ords}"] = f"{escape_id(sid)},{session_count[ords]}".encode()
    for names, ords in speaker_ord.items():
        spk[names] = str(ords).encode()
        spk[f"#{ords}"] = names.encode()
    live, dead = n_docs, 0
    dead_bits = bytearray()
    for sid in cleared:
        gone = session_ord.get(sid)
        if gone is None or sess.pop(escape_id(sid), None) is None:
            continue
        ords = gone
        count = session_count[ords]
        live -= count
        dead += count
        if len(dead_bits) <= ords // 8:
            dead_bits += bytes(ords // 8 + 1 - len(dead_bits))
        dead_bits[ords // 8] |= 0x80 >> (ords % 8)  # SETBIT: bit 0 is the high bit
    if sess:
        out["i:sess"] = sess
    if spk:
        out["i:spk"] = spk
    if dead_bits:
        out["i:dead"] = bytes(dead_bits)
    out["i:meta"] = {
        "v": b"2",
        "n": str(live).encode(),
        "next": str(n_docs).encode(),
        "sords": str(len(session_ord)).encode(),
        "spords": str(len(speaker_ord)).encode(),
        "dead": str(dead).encode(),
        "sealed": str((n_docs + 1) // BLOCK if seal else 0).encode(),
    }
    return out
