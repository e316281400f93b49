"""Index format 2's byte layouts (``recall.postings``): round trips, and the
reference writer's invariants."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redismem.recall import postings as P
from redismem.recall import ranking


@given(st.integers(min_value=0, max_value=2**64))
def test_varint_round_trip(value: int) -> None:
    data = P.encode_varint(value)
    assert P.decode_varint(data + b"\x01", 0) == (value, len(data))
    assert all(b & 0x80 for b in data[:-1]) and data[-1] < 0x80


def test_varint_is_leb128() -> None:
    assert P.encode_varint(0) == b"\x00"
    assert P.encode_varint(127) == b"\x7f"
    assert P.encode_varint(128) == b"\x80\x01"
    assert P.encode_varint(300) == b"\xac\x02"


_lists = st.lists(
    st.tuples(st.integers(min_value=1, max_value=5000), st.integers(min_value=0, max_value=63)),
    unique_by=lambda e: e[0],
).map(sorted)


@given(_lists, st.integers(min_value=0, max_value=20))
def test_posting_list_round_trip_appended(plist: list[tuple[int, int]], cut: int) -> None:
    cut = min(cut, len(plist))
    data = P.append_postings(P.append_postings(None, plist[:cut]), plist[cut:])
    assert P.decode_postings(data) == plist
    if plist:
        assert P.last_docid(data) == plist[-1][0]
        assert data == P.append_postings(None, plist)


def test_posting_list_layout() -> None:
    data = P.append_postings(None, [(1, 63), (2, 1), (300, 5)])
    assert data[:4] == (300).to_bytes(4, "big")
    assert data[4:] == b"\x7f" + bytes([(1 << 6) | 1]) + P.encode_varint((298 << 6) | 5)


def test_posting_list_refuses_unordered_docids() -> None:
    with pytest.raises(ValueError):
        P.encode_postings([(5, 1), (5, 2)])
    with pytest.raises(ValueError):
        P.encode_postings([(5, 64)])


_slots = st.builds(
    P.Slot,
    created_ms=st.integers(min_value=0, max_value=2**48 - 1),
    deadline=st.integers(min_value=0, max_value=2**32 - 1),
    prev=st.one_of(st.none(), st.integers(min_value=1, max_value=P.MAX_LINK)),
    next=st.one_of(st.none(), st.integers(min_value=1, max_value=P.MAX_LINK)),
    session=st.integers(min_value=1, max_value=2**24 - 1),
    role=st.integers(min_value=0, max_value=255),
    speaker=st.integers(min_value=0, max_value=2**16 - 1),
)


@given(_slots, st.integers(min_value=P.MAX_LINK + 1, max_value=2**32 - P.MAX_LINK - 2))
def test_slot_round_trip(slot: P.Slot, docid: int) -> None:
    # links given as deltas from docid
    prev = None if slot.prev is None else docid - slot.prev
    nxt = None if slot.next is None else docid + slot.next
    absolute = P.Slot(
        slot.created_ms, slot.deadline, prev, nxt, slot.session, slot.role, slot.speaker
    )
    raw = P.encode_slot(docid, absolute)
    assert len(raw) == P.SLOT
    assert P.decode_slot(docid, raw) == absolute


def test_empty_slot_is_no_doc_and_far_links_drop() -> None:
    assert P.decode_slot(7, bytes(P.SLOT)) is None
    far = P.Slot(1, 0, 1, 2 * P.MAX_LINK + 6, 1, 0, 0)
    assert P.decode_slot(P.MAX_LINK + 5, P.encode_slot(P.MAX_LINK + 5, far)) == P.Slot(
        1, 0, None, None, 1, 0, 0
    )


def test_deadline_field() -> None:
    assert P.deadline_field(None) == 0
    assert P.deadline_field(P.EPOCH_2020_MS + 1500) == 2
    assert not P.is_expired(2, P.EPOCH_2020_MS + 1999)
    assert P.is_expired(2, P.EPOCH_2020_MS + 2000)
    assert not P.is_expired(0, 2**50)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=64, max_size=64))
def test_block_round_trip(records: list[bytes | None]) -> None:
    block = P.encode_block(records)
    assert P.decode_block(block) == [r or None for r in records]
    assert zlib.decompress(block)  # plain zlib, inflatable anywhere


@given(st.floats(min_value=1e-6, max_value=ranking.MAX_WEIGHT))
def test_quantize_round_trip_within_half_a_level(weight: float) -> None:
    q = ranking.quantize_weight(weight)
    assert 1 <= q <= 63
    step = ranking.MAX_WEIGHT / 63
    assert abs(ranking.dequantize_weight(q) - weight) <= max(step / 2 + 1e-5, step - weight)


def _doc(sid: str, n: int, **kw: object) -> P.Doc:
    record = f"1|{kw.pop('names', '')}|".encode() + b"payload%d" % n
    return P.Doc(sid, 1000 + n, record, {f"w{n % 3}": 1.0, "all": 0.5}, **kw)  # type: ignore[arg-type]


def test_build_layout() -> None:
    docs = [
        _doc("a", i, names="bob" if i % 2 else "", agent="x", tags={"k": "v"}) for i in range(70)
    ]
    docs.append(_doc("b", 70, deadline_ms=P.EPOCH_2020_MS + 10_000))
    built = P.build(docs, cleared=["b"])
    meta = built["i:meta"]
    assert meta == {
        "v": b"2",
        "n": b"70",
        "next": b"71",
        "sords": b"2",
        "spords": b"1",
        "dead": b"1",
        "sealed": b"1",
    }
    assert [d for d, _ in P.decode_postings(built["i:t:all"])] == list(range(1, 72))  # type: ignore[arg-type]
    assert P.decode_postings(built["i:f:s:1"]) == [(d, 0) for d in range(1, 71)]  # type: ignore[arg-type]
    assert P.decode_postings(built["i:f:a:x"]) == [(d, 0) for d in range(1, 71)]  # type: ignore[arg-type]
    assert "i:f:g:k=v" in built and "i:f:s:2" in built
    slots = P.decode_slots(0, built["i:dt:0"])  # type: ignore[arg-type]
    assert sorted(slots) == list(range(1, 72))
    assert slots[1] == P.Slot(1000, 0, None, 2, 1, 1, 0)
    assert slots[2] == P.Slot(1001, 0, 1, 3, 1, 1, 1)
    assert slots[70] == P.Slot(1069, 0, 69, None, 1, 1, 1)
    assert slots[71] == P.Slot(1070, 10, None, None, 2, 1, 0)
    blocks = built["i:docs"]
    assert isinstance(blocks, dict) and list(blocks) == ["0"]  # docids 0..63; 64..127 open
    assert P.decode_block(blocks["0"])[5] == docs[4].record
    rec = built["i:rec"]
    assert isinstance(rec, dict) and sorted(map(int, rec)) == list(range(64, 72))
    assert built["i:sess"] == {"a": b"1", "#1": b"a,70", "#2": b"b,1"}
    assert built["i:spk"] == {"bob": b"1", "#1": b"bob"}
    assert built["i:dead"] == b"\x20"  # SETBIT i:dead 2 1


def test_block_read_up_to_an_index() -> None:
    records = [b"r%d" % i if i % 3 else None for i in range(64)]
    block = P.encode_block(records)
    assert P.decode_block(block, 10) == [r or None for r in records[:11]]
    assert P.decode_block(block, 63) == P.decode_block(block)
