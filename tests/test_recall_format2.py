"""Recall index format 2, the write side: what ``index_pass`` (``index_commit.lua``,
``_index.lua``), the block seal (``index_seal.lua``) and a session clear
(``clear.lua``) leave in the ``i:`` keys, on both backends, byte for byte
against the Python reference (``recall.postings.build``); exactly once
(a re-sent commit or seal changes nothing); TTLs; a format-1 user stays
format 1 and says so."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from helpers import keys_matching

from redismem import Memory, Message
from redismem.core.backend import Backend, backend_of
from redismem.core.keys import RecallKeys, escape_id, unescape_id
from redismem.core.lua import script_source
from redismem.core.scripts import IndexCommit, IndexDoc
from redismem.recall import index, postings, ranking
from redismem.recall.index import drop_empty_index, index_pass, seal_blocks

pytestmark = pytest.mark.every_server

MemoryFactory = Callable[..., Awaitable[Memory]]


def say(text: str, name: str | None = None, role: str = "user") -> Message:
    return Message(role=role, content=text, name=name)


class Recorder:
    """Wraps ``scripts.index_commit``: the docs of every committed call, in
    commit order (the order the docids were given), and optionally calls it
    twice (a re-send)."""

    def __init__(self, backend: Backend, *, resend: bool = False) -> None:
        self.backend = backend
        self.docs: list[IndexDoc] = []
        self.results: list[IndexCommit] = []
        self.resend = resend
        self.original = backend.scripts.index_commit

    async def __call__(self, *args: Any, **kwargs: Any) -> IndexCommit:
        done = await self.original(*args, **kwargs)
        if done.status == "committed":
            self.docs += kwargs["docs"]
        self.results.append(done)
        if self.resend:
            recall: RecallKeys = args[1]
            before = await dump(self.backend, recall)
            again = await self.original(*args, **kwargs)
            assert again.status == "stale"
            assert await dump(self.backend, recall) == before
        return done


async def dump(backend: Backend, recall: RecallKeys) -> dict[str, Any]:
    """Every format-2 key of the user: ``{suffix after the epoch prefix:
    STRING bytes or HASH fields (str -> bytes)}``."""
    redis = backend.redis
    base = recall.i_prefix[: -len("i:")]
    out: dict[str, Any] = {}
    async for key in redis.scan_iter(match=recall.i_prefix + "*", count=1000):
        name = key.decode()[len(base) :]
        if (await redis.type(key)) == b"hash":
            out[name] = {k.decode(): v for k, v in (await redis.hgetall(key)).items()}
        else:
            out[name] = await redis.get(key)
    return out


def records_of(got: dict[str, Any], session_id: str | None = None) -> list[bytes]:
    """The records, open or sealed, in a dump (of ``session_id``'s docs only
    when given)."""
    records = [r for b in got.get("i:docs", {}).values() for r in postings.decode_block(b)]
    records += list(got.get("i:rec", {}).values())
    mark = None if session_id is None else f" of {session_id} ".encode()
    return [r for r in records if r is not None and (mark is None or mark in r)]


async def no_seal(*_args: Any, **_kwargs: Any) -> int:
    """Stands in for ``index.seal_blocks``: record blocks stay open."""
    return 0


def reference_docs(docs: list[IndexDoc], deadline_ms: int | None = None) -> list[postings.Doc]:
    """The docs as ``postings.build`` takes them (the filter suffixes name
    the session, agent and tags)."""
    out = []
    for doc in docs:
        session, agent, tags = "", None, {}
        for suffix in doc.filter_suffixes:
            value = suffix[4:]
            if suffix.startswith("f:s:"):
                session = unescape_id(value)
            elif suffix.startswith("f:a:"):
                agent = unescape_id(value)
            else:
                k, _, v = value.partition("=")
                tags[unescape_id(k)] = unescape_id(v)
        out.append(
            postings.Doc(
                session, doc.created_ms, doc.record, doc.postings, agent, tags, deadline_ms
            )
        )
    return out


def without_own_meta(index_keys: dict[str, Any]) -> dict[str, Any]:
    """The dump (or the reference) with the meta fields the reference does not
    keep (speaker ordinals given, sealed mark, ttl flag) left out, and no ``dead``
    when 0."""
    out = dict(index_keys)
    out["i:meta"] = {
        k: v
        for k, v in out["i:meta"].items()
        if k not in ("spords", "sealed", "ttl") and (k, v) != ("dead", b"0")
    }
    return out


def purged(index_keys: dict[str, Any], session_id: str) -> dict[str, Any]:
    """What ``postings.build(..., cleared=[session_id])`` (the tombstone)
    becomes once the clear's purge ran (``recall.purge``): the session's docs
    gone from every list (an emptied list deleted), from the records (open
    and sealed) and the doc table; ``dead`` back to 0."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in index_keys.items()}
    sid = escape_id(session_id)
    [ordinal] = [
        k[1:]
        for k, v in out["i:sess"].items()
        if k.startswith("#") and v.startswith(f"{sid},".encode())
    ]
    gone = {d for d, _q in postings.decode_postings(out.pop(f"i:f:s:{ordinal}"))}
    del out["i:sess"][f"#{ordinal}"]
    for key in [k for k in out if k.startswith(("i:t:", "i:f:"))]:
        kept = [(d, q) for d, q in postings.decode_postings(out[key]) if d not in gone]
        if kept:
            out[key] = postings.append_postings(None, kept)
        else:
            del out[key]
    out["i:rec"] = {d: r for d, r in out.get("i:rec", {}).items() if int(d) not in gone}
    if not out["i:rec"]:
        del out["i:rec"]
    blocks = {}
    for b, data in out.get("i:docs", {}).items():
        first = int(b) * postings.BLOCK
        rows = postings.decode_block(data)
        rows = [None if first + i in gone else row for i, row in enumerate(rows)]
        if any(row is not None for row in rows):
            blocks[b] = postings.encode_block(rows)
    if "i:docs" in out:
        out["i:docs"] = blocks
    for key in [k for k in out if k.startswith("i:dt:")]:
        table = bytearray(out[key])
        chunk = int(key.rsplit(":", 1)[1])
        for d in gone:
            at = (d - chunk * postings.DT_CHUNK) * postings.SLOT
            if 0 <= at < len(table):
                table[at : at + postings.SLOT] = bytes(postings.SLOT)
        out[key] = bytes(table)
    out["i:meta"] = {**out["i:meta"], "dead": b"0"}
    return out


async def index_round_robin(backend: Backend, user_id: str, sessions: list[str], cap: int) -> None:
    """Index the sessions ``cap`` messages at a time, taking turns."""
    busy = list(sessions)
    while busy:
        for sid in list(busy):
            outcome = await index_pass(backend, user_id=user_id, session_id=sid, cap=cap)
            if outcome.status != "indexed":
                busy.remove(sid)


async def write_corpus(memory: Memory, user_id: str, sessions: list[str], per_session: int) -> None:
    names = [None, "Alice Smith", "bob", None]
    for s, sid in enumerate(sessions):
        for lo in range(0, per_session, 10):
            await memory.write(
                [
                    say(
                        f"message {i} of {sid} about topic{i % 7} and word{(i * 13) % 29}",
                        names[i % 4],
                    )
                    for i in range(lo, min(per_session, lo + 10))
                ],
                session_id=sid,
                user_id=user_id,
                agent_name=None if s % 2 else f"agent {s}",
                tags={"kind": f"k{s % 2}", "lang": "en"},
            )


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Recorder]:
    def install(backend: Backend, **options: Any) -> Recorder:
        recorder = Recorder(backend, **options)
        monkeypatch.setattr(backend.scripts, "index_commit", recorder)
        return recorder

    return install


async def test_commits_write_what_the_reference_writes(
    make_memory: MemoryFactory, recorded: Callable[..., Recorder]
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    recorder = recorded(backend, resend=True)
    sessions = ["s1", "a session/2", "s3"]
    await write_corpus(memory, "u", sessions, 50)
    await index_round_robin(backend, "u", sessions, cap=17)
    recall = backend.layout.recall("u")
    assert [r.format for r in recorder.results if r.status == "committed"] == [2] * 9
    got = await dump(backend, recall)
    want = postings.build(reference_docs(recorder.docs))
    assert without_own_meta(got) == without_own_meta(want)
    assert got["i:meta"]["sealed"] == b"2"  # docids 0..127 sealed, 128..150 in i:rec
    assert got["i:meta"]["spords"] == b"2"
    assert set(got["i:docs"]) == {"0", "1"}


async def test_a_resent_seal_changes_nothing(make_memory: MemoryFactory) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    await write_corpus(memory, "u", ["s"], 70)
    while (await index_pass(backend, user_id="u", session_id="s", cap=30)).status == "indexed":
        pass
    recall = backend.layout.recall("u")
    before = await dump(backend, recall)
    assert set(before["i:docs"]) == {"0"} and before["i:meta"]["sealed"] == b"1"
    # A worker that read the records before the block was sealed, or a re-send.
    assert await seal_blocks(backend, recall, next_docid=70, sealed=0) == 0
    done, mark = await backend.scripts.index_seal(
        recall, block=0, data=b"other bytes", read=[b"r"] * postings.BLOCK
    )
    assert (done, mark) == (0, 1)
    assert await dump(backend, recall) == before


async def test_a_seal_compares_the_records_it_read_not_only_which_exist(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    recall = backend.layout.recall("u")
    monkeypatch.setattr(index, "seal_blocks", no_seal)
    await write_corpus(memory, "u", ["s"], 70)
    await index_round_robin(backend, "u", ["s"], cap=70)
    ids = [str(d) for d in range(postings.BLOCK)]
    read = await backend.redis.hmget(recall.i_rec, ids)
    assert read[0] is None and all(r is not None for r in read[1:])  # docids start at 1
    before = await dump(backend, recall)
    other = [read[0], b"1||another record", *read[2:]]
    status, mark = await backend.scripts.index_seal(
        recall, block=0, data=postings.encode_block(other), read=other
    )
    assert (status, mark) == (-1, 0)
    assert await dump(backend, recall) == before
    status, mark = await backend.scripts.index_seal(
        recall, block=0, data=postings.encode_block(read), read=read
    )
    assert (status, mark) == (1, 1)
    assert postings.decode_block((await dump(backend, recall))["i:docs"]["0"]) == read


async def test_a_seal_that_read_the_records_before_a_clear_does_not_bring_them_back(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The seal builds its block from what it read of i:rec; a clear whose
    # purge ran in between (records of the block's docs deleted, the block not
    # sealed yet) must not see them written back inside the sealed block.
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    recall = backend.layout.recall("u")
    await write_corpus(memory, "u", ["gone", "kept"], 40)
    original = backend.scripts.index_seal
    cleared: list[int] = []

    async def seal_after_a_clear(*args: Any, **kwargs: Any) -> tuple[int, int]:
        if not cleared:
            cleared.append(kwargs["block"])
            await memory.clear(session_id="gone", user_id="u")
        return await original(*args, **kwargs)

    monkeypatch.setattr(backend.scripts, "index_seal", seal_after_a_clear)
    await index_round_robin(backend, "u", ["gone", "kept"], cap=40)
    assert cleared == [0]
    got = await dump(backend, recall)
    records = records_of(got)
    assert len(records) == 40
    assert all(b" of kept " in r for r in records), [r for r in records if b" of gone " in r]
    assert got["i:meta"]["sealed"] == b"1"


async def test_a_session_clear_tombstones_its_docs_and_a_new_one_gets_a_new_ordinal(
    make_memory: MemoryFactory, recorded: Callable[..., Recorder]
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    recorder = recorded(backend)
    sessions = ["s1", "s2", "s3"]
    await write_corpus(memory, "u", sessions, 12)
    await index_round_robin(backend, "u", sessions, cap=5)
    recall = backend.layout.recall("u")
    await memory.clear(session_id="s2", user_id="u")
    want = purged(postings.build(reference_docs(recorder.docs), cleared=["s2"]), "s2")
    assert without_own_meta(await dump(backend, recall)) == without_own_meta(want)
    await memory.clear(session_id="s2", user_id="u")  # nothing more
    assert without_own_meta(await dump(backend, recall)) == without_own_meta(want)

    await memory.write([say("again")], session_id="s2", user_id="u")
    await index_round_robin(backend, "u", ["s2"], cap=5)
    got = await dump(backend, recall)
    assert got["i:sess"]["s2"] == b"4" and got["i:sess"]["#4"] == b"s2,1"
    assert got["i:meta"]["n"] == b"25" and got["i:meta"]["dead"] == b"0"
    new = postings.decode_slot(37, got["i:dt:0"][37 * postings.SLOT : 38 * postings.SLOT])
    assert new is not None and new.session == 4 and new.prev is None


async def test_ttls_follow_the_newest_doc_of_each_key(make_memory: MemoryFactory) -> None:
    short = await make_memory(recall_ttl=60)
    backend = backend_of(short)
    redis = backend.redis
    recall = backend.layout.recall("u")
    await short.write([say("alpha shared words")], session_id="a", user_id="u")
    before_ms = (await redis.time())[0] * 1000
    await index_round_robin(backend, "u", ["a"], cap=10)
    keys = await keys_matching(redis, recall.i_prefix + "*")
    ttls = {k: await redis.pttl(k) for k in keys}
    assert ttls and all(0 < t <= 60_000 for t in ttls.values()), ttls
    table = await redis.get(recall.i_doc_table(0))
    slot = postings.decode_slot(1, table[postings.SLOT : 2 * postings.SLOT])
    assert slot is not None
    deadline_s = (slot.deadline * 1000 + postings.EPOCH_2020_MS) / 1000
    assert before_ms / 1000 + 59 <= deadline_s <= before_ms / 1000 + 62

    forever = await make_memory(recall_ttl=None)
    await forever.write([say("beta shared words")], session_id="b", user_id="u")
    await index_round_robin(backend, "u", ["b"], cap=10)
    # Keys holding a doc kept forever lose their TTL; the others keep it.
    assert await redis.pttl(recall.i_meta) == -1
    assert await redis.pttl(recall.i_term("share")) == -1
    assert 0 < await redis.pttl(recall.i_term("alpha")) <= 60_000
    assert await redis.pttl(recall.i_term("beta")) == -1

    await short.write([say("gamma shared words")], session_id="a", user_id="u")
    await index_round_robin(backend, "u", ["a"], cap=10)
    # A later deadline does not give a key kept forever a TTL.
    assert await redis.pttl(recall.i_meta) == -1
    assert await redis.pttl(recall.i_term("share")) == -1
    assert 0 < await redis.pttl(recall.i_term("gamma")) <= 60_000


async def test_a_format_1_user_stays_format_1_and_says_so(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    recall = backend.layout.recall("u")
    monkeypatch.setattr(index, "NEW_INDEX_FORMAT", 1)
    await memory.write([say("old words")], session_id="s", user_id="u")
    assert (await index_pass(backend, user_id="u", session_id="s")).format1
    monkeypatch.setattr(index, "NEW_INDEX_FORMAT", 2)
    await memory.write([say("new words")], session_id="s", user_id="u")
    await memory.write([say("other words")], session_id="t", user_id="u")
    for sid in ("s", "t"):
        outcome = await index_pass(backend, user_id="u", session_id=sid)
        assert outcome.status == "indexed" and outcome.format1
    assert await backend.redis.hget(recall.stats, "n") == b"3"
    assert await keys_matching(backend.redis, recall.i_prefix + "*") == []
    other = await index_pass_fresh(memory, backend)
    assert other.status == "indexed" and not other.format1


async def index_pass_fresh(memory: Memory, backend: Backend) -> Any:
    await memory.write([say("a new user")], session_id="s", user_id="v")
    return await index_pass(backend, user_id="v", session_id="s")


@pytest.mark.parametrize(
    "value", [0, 1, 63, 64, 127, 128, 300, 16383, 16384, 2**21, 2**32 - 1, 2**38 + 5]
)
async def test_the_lua_encoders_agree_with_the_reference(raw: Any, value: int) -> None:
    source = script_source("index_seal").split("local IK = index2_keys")[0]
    weights = ["0", "0.0001", "0.0174603", "0.0174604", "1", "1.1", "2.2", "2.19999", "5", "1e-07"]
    script = (
        source
        + "local out = {i_varint(tonumber(ARGV[1])), i_be(tonumber(ARGV[1]) % 4294967296, 4)}\n"
        + "for i = 2, #ARGV do out[#out + 1] = i_quantize(ARGV[i]) end\n"
        + "out[#out + 1] = tostring(I_MAX_WEIGHT)\n"
        + "return out\n"
    )
    got = await raw.eval(script, 1, "guard-unused", 0, str(value), *weights)
    assert got[0] == postings.encode_varint(value)
    assert got[1] == (value % 2**32).to_bytes(4, "big")
    assert got[2:-1] == [ranking.quantize_weight(float(w)) for w in weights]
    assert float(got[-1]) == ranking.MAX_WEIGHT and ranking.WEIGHT_LEVELS == 63
    assert math.isclose(ranking.MAX_WEIGHT, ranking.K1 + 1)


async def test_clearing_every_session_drops_the_index_unless_a_commit_came_between(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    redis = backend.redis
    recall = backend.layout.recall("u")
    await write_corpus(memory, "u", ["s1", "s2"], 5)
    await index_round_robin(backend, "u", ["s1", "s2"], cap=5)
    await memory.clear(session_id="s1", user_id="u")
    assert await redis.hget(recall.i_meta, "n") == b"5"
    assert not await drop_empty_index(backend, recall)
    # The clear script alone (as if the client died before dropping).
    keys = backend.layout.session("u", "s2")
    await backend.scripts.clear(keys, recall, session_id="s2", grave="f:x:s2:t")
    assert await redis.hmget(recall.i_meta, "n", "dead") == [b"0", b"5"]  # s1 purged
    # Not while s2's purge is left, nor after a commit since next was read.
    assert not await drop_empty_index(backend, recall)
    assert not await backend.scripts.index_drop(recall, next_docid="9")
    assert await redis.exists(recall.i_meta)
    await memory.clear(session_id="s2", user_id="u")  # the clear path drops it
    assert await keys_matching(redis, memory.layout.user_pattern("u")) == []
