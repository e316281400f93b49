"""Probe for issue 22's recall index format (docs/index-format.md): bytes per
message of today's index and of the proposed encodings, the recall cost of
the proposal's weight quantization on LoCoMo, and a Lua prototype of its
decode-and-score loop timed on a real redis-server.

Nothing here is product code: the candidates are built offline in Python
from the same data the benchmarks use, loaded into a throwaway
``redis-server`` as the proposal would store them, and measured there with
``MEMORY USAGE`` (as ``bench_recall.py`` measures today's index) and with the
change of ``INFO memory`` ``used_memory`` (which also counts the key
dictionary and the expiry entries that ``MEMORY USAGE`` leaves out).

a. Today's format: ``Memory.write`` of ``bench_recall``'s latency corpus
   (``Corpus(seed=size)``, 500 messages per session, 100 per write) and the
   real ``index_pass`` run in this process (no arq), then ``MEMORY USAGE``
   over the user's ``:r:`` and ``:s:`` keys. ``--today-max`` skips sizes above it.
b. The proposal, built offline from the same texts (at sizes with no run of
   (a), the same corpus): ``ranking.doc_weights`` per message (with the three
   before it), weights quantized to 6 bits, postings as ``varint(gap << 6 |
   weight)`` (LEB128) in blocks of 128 with a skip table, stored either as one
   string per term or as one hash per 65,536-doc segment (field = term); the
   doc records (what a hit returns) zlib-compressed in blocks of 64 docs in
   one hash; a 20-byte doc table per doc (4,096 docs per string); session
   docid lists. Also printed: the same postings with a weight byte, and the
   number of postings if the next message were folded in at index time.
c. LoCoMo (``--data``): recall@5/10/20 of today's ranking (``ranking.rank``,
   at most ``MAX_POSTINGS`` per term) against the proposal's (every posting
   read, weights of 8, 6 and 5 bits), and against folding the next message
   into the postings (8 bits).
d. ``--lua``: the proposal's postings (a string per term) and doc table at
   the largest size up to 100,000 loaded into redis-server, and ``LUA_SCORE``:
   reads the query terms' whole posting lists, decodes and sums them, applies
   the neighbour smoothing exactly through the doc table for candidates only
   (see docs/index-format.md), keeps the top 10; run for ``bench_recall``'s
   query mix. Prints p50/p99 of the call and the server ns per decoded
   posting (``INFO commandstats``), also with the smoothing pushed from every
   doc and with none; checks its top 10 against the Python scorer.
e. Postings a query reads at each size (exhaustive, and with the
   "continue" rule of a MaxScore-style bound), and the server time that
   makes at the rate (d) measured, for the CPU estimate at 1,000,000.

    .venv/bin/python bench/index_format_probe.py --lua          # 10k + 100k, ~2 min
    .venv/bin/python bench/index_format_probe.py --sizes 10000 --lua
    .venv/bin/python bench/index_format_probe.py --sizes 1000000 --today-max 0   # ~6 min, 0.9 GB
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import sys
import time
import zlib
from array import array
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import redis as redis_sync
from _locomo import DEFAULT_DATA, KS, Conversation, load
from _util import percentile, throwaway_redis
from bench_recall import Corpus, fill_user
from locomo_offline import build_index, first_hit, run_ranking

from redismem import Memory
from redismem.core import codec
from redismem.models import Message
from redismem.recall import ranking
from redismem.recall.bm25 import idf
from redismem.recall.index import index_pass

BLOCK = 128  # postings per block (skip table entry per block)
SEGMENT = 65_536  # docs per segment hash
DT_CHUNK = 4096  # docs per doc-table string
DOC_BLOCK = 64  # doc records per compressed block
DOC_TABLE = 20  # bytes per doc in the doc table
SESSION = 500  # messages per session, as bench_recall writes them
CHUNK = 100  # messages per write (and per commit, roughly)
WMAX = ranking.K1 + 1.0  # the largest weight doc_weights gives
BITS = 6  # bits of a quantized weight
LEVELS = (1 << BITS) - 1
FOLD_MAX = WMAX * (1.0 + ranking.NEXT_BETA)  # the largest weight with the next folded in
NS = "probe"


# -- encodings -------------------------------------------------------------------------


def varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def quantize(w: float, levels: int = 63) -> int:
    """A weight (0, K1 + 1] as 1..levels."""
    return max(1, min(levels, round(w / WMAX * levels)))


def skip_entry(last: int, offset: int, block_max: int) -> bytes:
    return last.to_bytes(4, "little") + offset.to_bytes(3, "little") + bytes([block_max])


def encode_postings(docs: Sequence[int], weights: Sequence[int] | None, base: int = 0) -> bytes:
    """The proposal: ``varint(df)``, ``varint(blocks - 1)``, a skip table of 8
    bytes per block past the first (last docid - base: 4, byte offset of the
    next block: 3, max weight: 1), then per posting ``varint(gap << BITS |
    weight)`` (``weights`` None: ``varint(gap)``, for docid lists)."""
    body = bytearray()
    skips = bytearray()
    prev = base
    block_max = 0
    for i, d in enumerate(docs):
        if weights is None:
            varint(d - prev, body)
        else:
            varint(((d - prev) << BITS) | weights[i], body)
            block_max = max(block_max, weights[i])
        prev = d
        if (i + 1) % BLOCK == 0 and i + 1 < len(docs):
            skips += skip_entry(d - base, len(body), block_max)
            block_max = 0
    head = bytearray()
    varint(len(docs), head)
    varint(len(skips) // 8, head)
    return bytes(head + skips + body)


def encode_byte_weights(docs: Sequence[int], weights: Sequence[int]) -> bytes:
    """For comparison: ``varint(gap)`` and a weight byte per posting."""
    body = bytearray()
    prev = 0
    for d, w in zip(docs, weights, strict=True):
        varint(d - prev, body)
        body.append(w)
        prev = d
    return bytes(body) + bytes(2 + 8 * (len(docs) // BLOCK))


# -- the corpus, indexed offline ---------------------------------------------------------


@dataclass
class Built:
    size: int
    texts: list[str]
    queries: list[str]
    #: term -> docids (ascending) and quantized folded weights
    docs: dict[str, array] = field(default_factory=dict)
    weights: dict[str, bytearray] = field(default_factory=dict)
    session_of: array = field(default_factory=lambda: array("I"))
    doc_text: list[int] = field(default_factory=list)  # docid -> text index
    postings_raw: int = 0
    prev_of: array = field(default_factory=lambda: array("I"))  # docid -> previous docid, 0 none
    next_of: array = field(default_factory=lambda: array("I"))  # docid -> next docid, 0 none
    bytes8: int = 0  # postings as varint(gap) + a weight byte
    folded_postings: int = 0  # postings if the next message were folded in


def corpus(size: int) -> tuple[list[str], list[str]]:
    """bench_recall's latency corpus and queries for ``size`` messages."""
    c = Corpus(seed=size)
    texts = [c.text() for _ in range(size)]
    used = {w.strip(".").lower() for t in texts for w in t.split()}
    return texts, c.queries(1000, used)


def commit_order(size: int) -> list[int]:
    """Text indexes in the order the workers would commit them: 16 sessions
    at a time, ``CHUNK`` messages of each in turn."""
    sessions = [list(range(i, min(i + SESSION, size))) for i in range(0, size, SESSION)]
    order: list[int] = []
    for g in range(0, len(sessions), 16):
        group = sessions[g : g + 16]
        for lo in range(0, SESSION, CHUNK):
            for s in group:
                order += s[lo : lo + CHUNK]
    return order


def build(size: int, log: Any) -> Built:
    """The proposal's postings (each message's weights, with the three
    messages before it, quantized to ``BITS``), one session at a time; the
    next message's link kept for query-time smoothing. Also the size the
    postings would have with the next message folded in at index time."""
    texts, queries = corpus(size)
    b = Built(size, texts, queries)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    order = commit_order(size)
    docid_of = [0] * size
    for docid, i in enumerate(order, start=1):
        docid_of[i] = docid
    docs: dict[str, array] = defaultdict(lambda: array("I"))
    wts: dict[str, array] = defaultdict(lambda: array("f"))
    folded: dict[str, int] = defaultdict(int)  # term -> postings after folding
    b.prev_of = array("I", bytes(4 * (size + 1)))
    b.next_of = array("I", bytes(4 * (size + 1)))
    t0 = time.perf_counter()
    for lo in range(0, size, SESSION):
        hi = min(lo + SESSION, size)
        forward = [
            ranking.doc_weights(
                texts[i], None, texts[max(lo, i - ranking.CONTEXT_TURNS) : i], created=start
            )
            for i in range(lo, hi)
        ]
        for j, weights in enumerate(forward):
            d = docid_of[lo + j]
            for t, x in weights.items():
                docs[t].append(d)
                wts[t].append(x)
            if j + 1 < len(forward):
                b.prev_of[docid_of[lo + j + 1]] = d
                b.next_of[d] = docid_of[lo + j + 1]
                extra = forward[j + 1].keys() - weights.keys()
                for t in extra:
                    folded[t] += 1
            b.postings_raw += len(weights)
        if lo % 200_000 == 0 and lo:
            log(f"  weights: {lo:,} of {size:,}")
    log(f"  doc_weights: {(time.perf_counter() - t0) / size * 1e6:.0f} us per message")
    for t in list(docs):
        ds, ws = docs.pop(t), wts.pop(t)
        perm = sorted(range(len(ds)), key=ds.__getitem__)
        b.docs[t] = array("I", (ds[i] for i in perm))
        b.weights[t] = bytearray(quantize(ws[i], LEVELS) for i in perm)
        b.bytes8 += len(encode_byte_weights(b.docs[t], [quantize(ws[i], 255) for i in perm]))
        b.folded_postings += len(ds) + folded.pop(t, 0)
    b.session_of = array("I", bytes(4 * (size + 1)))
    b.doc_text = [0] * (size + 1)
    for i in range(size):
        b.session_of[docid_of[i]] = i // SESSION
        b.doc_text[docid_of[i]] = i
    return b


def doc_record(text: str, session: int, seq: int, role: str) -> bytes:
    """A doc record as index.py makes it, less the created/deadline header
    (the doc table keeps those)."""
    element = codec.encode_message(Message(role=role, content=text), len(text) // 4)
    payload = msgpack.packb([1, f"s{session}", seq, None, {}, element], use_bin_type=True)
    return f"{codec.ROLE_CODE[role]}||".encode() + payload


# -- measuring in Redis -------------------------------------------------------------------


def measure(r: redis_sync.Redis, load_keys: Iterable[tuple[str, str, Any]]) -> tuple[int, int, int]:
    """Load ``(kind, key, value)`` (kind "s" string, "h" hash of dict) into an
    empty db, give every key a TTL (as recall_ttl does), and return
    (MEMORY USAGE sum, used_memory change, keys)."""
    r.flushall()
    time.sleep(0.2)
    before = int(r.info("memory")["used_memory"])
    keys: list[str] = []
    pipe = r.pipeline(transaction=False)
    for n, (kind, key, value) in enumerate(load_keys, start=1):
        if kind == "s":
            pipe.set(key, value)
        else:
            items = list(value.items())
            for lo in range(0, len(items), 1000):
                pipe.hset(key, mapping=dict(items[lo : lo + 1000]))
        pipe.pexpire(key, 30 * 86_400_000)
        keys.append(key)
        if n % 500 == 0:
            pipe.execute()
    pipe.execute()
    after = int(r.info("memory")["used_memory"])
    total = 0
    for lo in range(0, len(keys), 1000):
        for key in keys[lo : lo + 1000]:
            pipe.memory_usage(key, samples=0)
        total += sum(x or 0 for x in pipe.execute())
    return total, after - before, len(keys)


def candidate_keys(b: Built, layout: str) -> Iterable[tuple[str, str, Any]]:
    """The proposal's keys for one user. ``layout``: "string" (a string per
    term) or "segment" (a hash per 65,536-doc segment, field = term)."""
    p = f"{NS}:{{u:lat-{b.size}}}:i:"
    if layout == "string":
        for t in b.docs:
            yield "s", p + "t:" + t, encode_postings(b.docs[t], b.weights[t])
    else:
        segs: dict[int, dict[str, bytes]] = defaultdict(dict)
        for t, docs in b.docs.items():
            w = b.weights[t]
            start = 0
            while start < len(docs):
                seg = docs[start] // SEGMENT
                end = start
                while end < len(docs) and docs[end] // SEGMENT == seg:
                    end += 1
                segs[seg][t] = encode_postings(docs[start:end], w[start:end], seg * SEGMENT)
                start = end
        for seg, fields in segs.items():
            yield "h", p + f"s:{seg}", fields
    # Session postings (docids only), one string per session.
    by_session: dict[int, list[int]] = defaultdict(list)
    for d in range(1, b.size + 1):
        by_session[b.session_of[d]].append(d)
    for s, docs in by_session.items():
        yield "s", p + f"f:s:s{s}", encode_postings(docs, None)
    # The doc table: 16 bytes per doc, one string per segment.
    for lo in range(0, b.size + 1, DT_CHUNK):
        yield "s", p + f"dt:{lo // DT_CHUNK}", bytes(DOC_TABLE * min(DT_CHUNK, b.size + 1 - lo))
    yield "h", p + "docs", dict(doc_blocks(b, DOC_BLOCK, 6))
    yield "h", p + "meta", {"n": b.size, "next": b.size, "sealed": b.size, "v": 2}
    yield "h", p + "sess", {f"s{s}": s for s in by_session} | {str(s): f"s{s}" for s in by_session}


def doc_blocks(b: Built, per: int, level: int) -> Iterable[tuple[str, bytes]]:
    for lo in range(1, b.size + 1, per):
        records = []
        for d in range(lo, min(lo + per, b.size + 1)):
            i = b.doc_text[d]
            role = "user" if i % 2 == 0 else "assistant"
            records.append(doc_record(b.texts[i], i // SESSION, i % SESSION + 1, role))
        head = bytearray()
        for rec in records:
            varint(len(rec), head)
        yield str(lo // per), zlib.compress(bytes(head) + b"".join(records), level)


def doc_store_sizes(b: Built) -> list[tuple[str, float]]:
    """Bytes per doc of the doc records alone, raw and compressed (payload
    bytes, no Redis overhead)."""
    out = []
    raw = sum(
        len(doc_record(b.texts[i], i // SESSION, i % SESSION + 1, "user"))
        for i in range(0, b.size, 10)
    )
    out.append(("raw record", raw / len(range(0, b.size, 10))))
    for per, level in ((16, 6), (64, 6), (256, 6), (64, 9)):
        total = sum(len(v) for _, v in doc_blocks(b, per, level))
        out.append((f"zlib-{level}, {per} per block", total / b.size))
    return out


# -- today's format, on Redis -------------------------------------------------------------


async def today(url: str, size: int, log: Any) -> tuple[float, float, int]:
    """(index bytes per message, session bytes per message, :r: keys)."""
    texts, _ = corpus(size)
    uid = f"lat-{size}"
    mem = await Memory.connect(url, namespace=NS, queue_name="redismem/probe")
    try:
        t0 = time.perf_counter()
        await fill_user(mem, uid, texts)
        log(f"  today: wrote {size:,} in {time.perf_counter() - t0:.1f} s")
        sessions = list(range(0, (size + SESSION - 1) // SESSION))
        t0 = time.perf_counter()

        async def indexer() -> None:
            while sessions:
                s = sessions.pop()
                while True:
                    out = await index_pass(mem.backend, user_id=uid, session_id=f"s{s}")
                    if out.status in ("idle", "gone"):
                        break

        await asyncio.gather(*(indexer() for _ in range(4)))
        log(f"  today: indexed {size:,} in {time.perf_counter() - t0:.1f} s (this process)")
        r_bytes = s_bytes = r_keys = 0
        async for key in mem.redis.scan_iter(match=mem.layout.user_pattern(uid), count=1000):
            usage = await mem.redis.memory_usage(key, samples=0) or 0
            if b":r:" in key:
                r_bytes += usage
                r_keys += 1
            elif b":s:" in key:
                s_bytes += usage
        await mem.clear_all()
        return r_bytes / size, s_bytes / size, r_keys
    finally:
        await mem.aclose()


# -- LoCoMo: today's ranking against the proposal's exact top-k ---------------------------


def folded_rank(conv: Conversation, levels: int, k: int) -> list[int]:
    idx = build_index(conv, ranking.DEFAULT)
    n = len(conv.turns)
    fwd: dict[int, dict[str, float]] = defaultdict(dict)
    for t, plist in idx.postings.items():
        for d, w in plist:
            fwd[d][t] = w
    post: dict[str, dict[int, int]] = defaultdict(dict)
    df = {t: len(plist) for t, plist in idx.postings.items()}
    for d, terms_w in fwd.items():
        w = dict(terms_w)
        link = idx.links[d]
        if link.next is not None:
            for t, x in fwd[link.next].items():
                w[t] = w.get(t, 0.0) + ranking.NEXT_BETA * x
        for t, x in w.items():
            post[t][d] = max(1, min(levels, round(x / FOLD_MAX * levels)))
    out = []
    for q in conv.questions:
        qw = ranking.query_terms(q.text)
        acc: dict[int, float] = defaultdict(float)
        for t, qv in qw.items():
            if t not in post:
                continue
            # idf from the df of the unfolded postings: what the doc count of
            # the term is (the folded extra postings are not documents of t).
            wt = qv * idf(df.get(t, len(post[t])), n) * FOLD_MAX / levels
            for d, x in post[t].items():
                acc[d] += wt * x
        scored = []
        for d, s in acc.items():
            name = idx.links[d].name
            if name and any(t in qw for t in ranking._name_terms(name)):
                s *= 1.0 + ranking.SPEAKER_BOOST
            scored.append((s, d))
        scored.sort(reverse=True)
        out.append(first_hit([d for _, d in scored[:k]], q.evidence, idx.dia))
    return out


def unfolded_rank(conv: Conversation, bits: int, k: int) -> list[int]:
    """``ranking.rank`` (every posting read) over weights rounded to ``bits`` bits."""
    idx = build_index(conv, ranking.DEFAULT)
    levels = (1 << bits) - 1
    wmax = ranking.K1 + 1.0

    def q(w: float) -> float:
        return max(1, min(levels, round(w / wmax * levels))) * wmax / levels

    postings = {t: [(d, q(w)) for d, w in plist] for t, plist in idx.postings.items()}
    params = replace(ranking.DEFAULT, max_postings=10**9)
    return [
        first_hit(
            [
                d
                for d, _ in ranking.rank(
                    qq.text, postings, len(conv.turns), idx.links, k, params=params
                )
            ],
            qq.evidence,
            idx.dia,
        )
        for qq in conv.questions
    ]


def locomo(data: Path, log: Any) -> list[str]:
    if not data.is_dir() or not any(data.glob("*.json")):
        return [f"LoCoMo: skipped, no data at {data}"]
    convs = load(data)
    lines = [
        f"LoCoMo evidence recall ({sum(len(c.questions) for c in convs)} questions)   @5/@10/@20"
    ]

    def row(label: str, hits: list[int]) -> None:
        cells = " / ".join(f"{sum(h <= k for h in hits) / len(hits):.3f}" for k in KS)
        lines.append(f"  {label:<52}{cells}")

    row(
        "today: ranking.rank, MAX_POSTINGS per term",
        [h for c in convs for h in run_ranking(c, ranking.DEFAULT)],
    )
    for bits in (8, 6, 5):
        row(
            f"query-time smoothing, {bits}-bit weights, no cap",
            [h for c in convs for h in unfolded_rank(c, bits, max(KS))],
        )
    row(
        "next folded at index time, 8-bit weights, no cap",
        [h for c in convs for h in folded_rank(c, 255, max(KS))],
    )
    return lines


# -- query cost: postings read, and the Lua prototype -------------------------------------


def query_weights(b: Built, q: str) -> list[tuple[str, float]]:
    return [
        (t, w * idf(len(b.docs[t]), b.size))
        for t, w in ranking.query_terms(q).items()
        if t in b.docs
    ]


def score_python(b: Built, q: str, k: int) -> list[tuple[float, int]]:
    """``ranking.rank`` over the quantized postings, every posting read."""
    base: dict[int, float] = defaultdict(float)
    for t, wt in query_weights(b, q):
        scale = wt * WMAX / LEVELS
        for d, x in zip(b.docs[t], b.weights[t], strict=True):
            base[d] += scale * x
    score = dict(base)
    for d, s in base.items():
        p = b.prev_of[d]
        if p:
            score[p] = score.get(p, 0.0) + ranking.NEXT_BETA * s
    return heapq.nlargest(k, ((s, d) for d, s in score.items()))


def continue_cost(b: Built, q: str, k: int) -> int:
    """Postings decoded by term-at-a-time with the "continue" rule: terms
    from the rarest; once the remaining terms' bound (their maxima, times
    1 + NEXT_BETA for the smoothing) is below the k-th score so far, a term
    only updates the docs already scored (and their previous docs), reading
    just the blocks of ``BLOCK`` postings that hold them."""
    terms_w = sorted(query_weights(b, q), key=lambda e: len(b.docs[e[0]]))
    acc: dict[int, float] = defaultdict(float)
    cost = 0
    grow = 1.0 + ranking.NEXT_BETA
    for i, (t, wt) in enumerate(terms_w):
        scale = wt * WMAX / LEVELS
        rest = sum(w2 * WMAX * grow for _, w2 in terms_w[i:])
        kth = heapq.nlargest(k, acc.values())[-1] if len(acc) >= k else 0.0
        docs, ws = b.docs[t], b.weights[t]
        if rest < kth:  # no new doc can reach the top k: update the scored ones
            wanted = set(acc)
            blocks = {bisect_block(docs, d) for d in wanted}
            cost += sum(min(BLOCK, len(docs) - blk * BLOCK) for blk in blocks)
            pos = {d: j for j, d in enumerate(docs)}
            for d in wanted:
                j = pos.get(d)
                if j is not None:
                    acc[d] += scale * ws[j]
        else:
            cost += len(docs)
            for d, x in zip(docs, ws, strict=True):
                acc[d] += scale * x
                p = b.prev_of[d]
                if p:
                    acc[p] += ranking.NEXT_BETA * scale * x
    return cost


def bisect_block(docs: array, d: int) -> int:
    lo, hi = 0, len(docs)
    while lo < hi:
        mid = (lo + hi) // 2
        if docs[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo // BLOCK


LUA_SCORE = """
-- KEYS[1..Q]: posting strings of the query terms; KEYS[Q+1..]: the doc
-- table strings, one per segment. ARGV: k, N docs, WMAX, LEVELS, beta,
-- segment size, doc table width, Q, then Q query weights.
-- Returns {postings decoded, docid, score, ...}: the top k, best first.
local byte, log, floor = string.byte, math.log, math.floor
local k, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local wmax, levels = tonumber(ARGV[3]), tonumber(ARGV[4])
local beta, segsize = tonumber(ARGV[5]), tonumber(ARGV[6])
local width, q = tonumber(ARGV[7]), tonumber(ARGV[8])
local base = {}
local decoded = 0
for i = 1, q do
  local s = redis.call('GET', KEYS[i])
  if s then
    local pos, df, nb, b, mul = 1, 0, 0, 0, 1
    b = byte(s, pos); pos = pos + 1
    while b >= 128 do
      df = df + (b - 128) * mul; mul = mul * 128; b = byte(s, pos); pos = pos + 1
    end
    df = df + b * mul
    mul = 1
    b = byte(s, pos); pos = pos + 1
    while b >= 128 do
      nb = nb + (b - 128) * mul; mul = mul * 128; b = byte(s, pos); pos = pos + 1
    end
    nb = nb + b * mul
    pos = pos + 8 * nb
    local scale = tonumber(ARGV[8 + i]) * log(1 + (n - df + 0.5) / (df + 0.5)) * wmax / levels
    local doc, len = 0, #s
    while pos <= len do
      local v = byte(s, pos); pos = pos + 1
      if v >= 128 then
        local m = 128
        v = v - 128
        b = byte(s, pos); pos = pos + 1
        while b >= 128 do
          v = v + (b - 128) * m; m = m * 128; b = byte(s, pos); pos = pos + 1
        end
        v = v + b * m
      end
      local w = v % 64
      doc = doc + (v - w) / 64
      base[doc] = (base[doc] or 0) + scale * w
    end
    decoded = decoded + df
  end
end
-- top k: a k-slot list, its weakest replaced when beaten
local top, ntop, minv, mini = {}, 0, -1, 0
local function weakest()
  minv = math.huge
  for j = 1, k do
    local e = top[j]
    if e[1] < minv or (e[1] == minv and e[2] < top[mini][2]) then minv, mini = e[1], j end
  end
end
local function offer(d, s)
  if ntop < k then
    ntop = ntop + 1; top[ntop] = {s, d}
    if ntop == k then mini = 1; weakest() end
  elseif s > minv or (s == minv and d > top[mini][2]) then
    top[mini] = {s, d}
    weakest()
  end
end
-- The doc table: per doc 4 bytes of previous and 4 of next docid (0: none).
local tables = {}
local function links(d)
  local seg = floor(d / segsize)
  local off = (d - seg * segsize) * width
  local r = redis.call('GETRANGE', KEYS[q + 1 + seg], off, off + 7)
  local p1, p2, p3, p4, n1, n2, n3, n4 = byte(r, 1, 8)
  return p1 + p2 * 256 + p3 * 65536 + p4 * 16777216, n1 + n2 * 256 + n3 * 65536 + n4 * 16777216
end
local mode = ARGV[9 + q]
if beta > 0 and mode == 'push' then
  -- Smoothing pushed from every scored doc to its previous doc.
  local extra = {}
  for d, s in pairs(base) do
    local seg = floor(d / segsize)
    local t = tables[seg]
    if t == nil then t = redis.call('GET', KEYS[q + 1 + seg]) or ''; tables[seg] = t end
    local off = (d - seg * segsize) * width
    local b1, b2, b3, b4 = byte(t, off + 1, off + 4)
    local p = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    if p > 0 then extra[p] = (extra[p] or 0) + beta * s end
  end
  for d, s in pairs(base) do offer(d, s + (extra[d] or 0)) end
  for d, s in pairs(extra) do if base[d] == nil then offer(d, s) end end
elseif beta > 0 then
  -- Smoothing of the candidates only: docs whose own score is >= tau, and
  -- their previous docs. Any other doc d has base(d) < tau and base(next d)
  -- < tau, so scores < tau * (1 + beta): once the k-th candidate score F is
  -- >= that bound, the top k is exact; else tau = F / (1 + beta), once more.
  local maxb, nb, hist = 0, 1024, {}
  for _, s in pairs(base) do if s > maxb then maxb = s end end
  for _, s in pairs(base) do
    local h = floor(s / maxb * (nb - 1)); hist[h] = (hist[h] or 0) + 1
  end
  local want, c, hb = math.max(64, 4 * k), 0, nb - 1
  while hb > 0 do c = c + (hist[hb] or 0); if c >= want then break end; hb = hb - 1 end
  local tau = hb * maxb / (nb - 1)
  local done = {}
  local function score(d)
    local p, nx = links(d)
    if not done[d] then
      done[d] = true
      offer(d, (base[d] or 0) + beta * (base[nx] or 0))
    end
    return p
  end
  local function round(lo, hi)
    for d, s in pairs(base) do
      if s >= lo and s < hi then
        local p = score(d)
        if p > 0 and not done[p] then score(p) end
      end
    end
  end
  round(tau, math.huge)
  local tau2 = (ntop == k) and (minv / (1 + beta)) or 0
  if tau2 < tau then round(tau2, tau) end
else
  for d, s in pairs(base) do offer(d, s) end
end
table.sort(top, function(a, b) if a[1] ~= b[1] then return a[1] > b[1] end return a[2] > b[2] end)
local out = {decoded}
for j = 1, ntop do out[#out + 1] = top[j][2]; out[#out + 1] = tostring(top[j][1]) end
return out
"""


def lua_probe(r: redis_sync.Redis, b: Built, log: Any) -> list[str]:
    r.flushall()
    p = f"{NS}:{{u:lua}}:i:t:"
    pipe = r.pipeline(transaction=False)
    for n, t in enumerate(b.docs):
        pipe.set(p + t, encode_postings(b.docs[t], b.weights[t]))
        if n % 1000 == 999:
            pipe.execute()
    pipe.execute()
    tables = [f"{NS}:{{u:lua}}:i:dt:{seg}" for seg in range(b.size // DT_CHUNK + 1)]
    for seg, key in enumerate(tables):
        table = bytearray(DOC_TABLE * DT_CHUNK)
        for d in range(seg * DT_CHUNK, min((seg + 1) * DT_CHUNK, b.size + 1)):
            off = (d - seg * DT_CHUNK) * DOC_TABLE
            table[off : off + 4] = b.prev_of[d].to_bytes(4, "little")
            table[off + 4 : off + 8] = b.next_of[d].to_bytes(4, "little")
        r.set(key, bytes(table))
    script = r.register_script(LUA_SCORE)
    queries = b.queries

    def call(q: str, mode: str = "top", beta: float = ranking.NEXT_BETA) -> Any:
        terms = list(ranking.query_terms(q))
        keys = [p + t for t in terms] + tables
        fixed = [10, b.size, WMAX, LEVELS, beta, DT_CHUNK, DOC_TABLE]
        return script(keys=keys, args=[*fixed, len(terms), *[1.0] * len(terms), mode])

    def server_usec(mode: str, beta: float) -> float:
        r.config_resetstat()
        for q in queries:
            call(q, mode, beta)
        return float(r.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))

    for q in queries[:20]:  # warm up
        call(q)
    bare_usec = server_usec("top", 0.0)
    push_usec = server_usec("push", ranking.NEXT_BETA)
    r.config_resetstat()
    samples: list[float] = []
    decoded = 0
    mismatches = 0
    for n, q in enumerate(queries):
        t0 = time.perf_counter()
        out = call(q)
        samples.append((time.perf_counter() - t0) * 1000)
        decoded += int(out[0])
        if n % 10 == 0:  # the Lua top 10 is Python's (scores to 1e-6)
            want = score_python(b, q, 10)
            got = [float(out[i + 1]) for i in range(1, len(out), 2)]
            if [round(s, 6) for s, _ in want] != [round(s, 6) for s in got]:
                mismatches += 1
    stats = r.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    usec = float(evalsha.get("usec", 0))
    calls = int(evalsha.get("calls", 1))
    mean_decoded = decoded / len(queries)
    return [
        f"Lua decode + score, whole posting lists, {b.size:,} docs, {len(queries)} queries "
        "(bench_recall's mix), top 10:",
        row(
            "call p50 / p99 (ms, client side)",
            f"{percentile(samples, 50):.3f}",
            f"{percentile(samples, 99):.3f}",
        ),
        row("server time per call, mean (us)", f"{usec / calls:.1f}"),
        row("postings decoded per query, mean", f"{mean_decoded:.0f}"),
        row("server ns per decoded posting, all", f"{usec * 1000 / max(decoded, 1):.1f}"),
        row(
            "the same, smoothing pushed from every doc", f"{push_usec * 1000 / max(decoded, 1):.1f}"
        ),
        row(
            "the same, no smoothing (decode + sum + top)",
            f"{bare_usec * 1000 / max(decoded, 1):.1f}",
        ),
        f"  answers (top mode) checked against Python: {len(range(0, len(queries), 10))}, "
        f"mismatched: {mismatches}",
    ]


def row(label: str, *values: str) -> str:
    return f"  {label:<46}" + " / ".join(f"{v:>9}" for v in values)


def pcts(samples: list[int]) -> list[str]:
    return [f"{percentile(samples, p):,.0f}" for p in (50, 90, 99)] + [f"{max(samples):,}"]


def query_costs(b: Built) -> tuple[int, list[int], list[int]]:
    exhaustive = [sum(len(b.docs[t]) for t, _ in query_weights(b, q)) for q in b.queries]
    cont = [continue_cost(b, q, 10) for q in b.queries[: 200 if b.size <= 100_000 else 100]]
    return b.size, exhaustive, cont


def cost_lines(costs: tuple[int, list[int], list[int]], ns_per_posting: float | None) -> list[str]:
    size, exhaustive, cont = costs
    freq = exhaustive[0::2]
    lines = [
        f"postings a query reads, {size:,} docs (1000 queries; continue rule: the first "
        f"{len(cont)})",
        row("exhaustive p50 / p90 / p99 / max", *pcts(exhaustive)),
        row("exhaustive, frequency-drawn half, p50", f"{percentile(freq, 50):,.0f}"),
        row("continue rule p50 / p90 / p99 / max", *pcts(cont)),
    ]
    if ns_per_posting:
        ms = [f"{percentile(exhaustive, p) * ns_per_posting / 1e6:.2f}" for p in (50, 90, 99)]
        lines.append(row(f"=> ms at {ns_per_posting:.0f} ns/posting, p50 / p90 / p99", *ms))
        ms = [f"{max(exhaustive) * ns_per_posting / 1e6:.2f}"]
        lines.append(row("=> ms, the costliest query", *ms))
    return lines


# -- the run ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--today-max", type=int, default=100_000)
    parser.add_argument("--lua", action="store_true")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    report: list[str] = []
    report += locomo(args.data, log)
    ns_per_posting = None
    costs = []
    with throwaway_redis() as url:
        r = redis_sync.Redis.from_url(url)
        report.append(f"\nRedis {r.info('server')['redis_version']}")
        for size in sizes:
            report.append(f"\n== {size:,} messages (bench_recall's latency corpus)")
            if size <= args.today_max:
                r.flushall()
                idx_b, ses_b, r_keys = asyncio.run(today(url, size, log))
                report.append(row(f"today's index, :r: keys ({r_keys:,}), B/msg", f"{idx_b:.0f}"))
                report.append(row("the session copy, :s: keys, B/msg", f"{ses_b:.0f}"))
            log(f"building the proposal offline at {size:,}")
            b = build(size, log)
            report.append(
                f"postings per message: {b.postings_raw / size:.1f} "
                f"({b.folded_postings / size:.1f} with the next message folded in); "
                f"distinct terms {len(b.docs):,}"
            )
            body = sum(len(encode_postings(b.docs[t], b.weights[t])) for t in b.docs)
            report.append(
                row(f"postings, varint(gap << {BITS} | w), payload B/msg", f"{body / size:.1f}")
            )
            report.append(
                row("postings, varint(gap) + w byte, payload B/msg", f"{b.bytes8 / size:.1f}")
            )
            for label, per in doc_store_sizes(b):
                report.append(row(f"doc records, {label}, B/msg", f"{per:.1f}"))
            for layout in ("string", "segment"):
                usage, delta, nkeys = measure(r, candidate_keys(b, layout))
                report.append(
                    row(
                        f"proposal, {layout} ({nkeys:,} keys): B/msg",
                        f"{usage / size:.0f}",
                        f"{delta / size:.0f}",
                    )
                    + "   (MEMORY USAGE / used_memory change)"
                )
            r.flushall()
            if args.lua and size <= 100_000 and (size == max(s for s in sizes if s <= 100_000)):
                log(f"Lua prototype at {size:,}")
                lines = lua_probe(r, b, log)
                report += lines
                ns_per_posting = float(lines[4].split()[-1])
            costs.append(query_costs(b))
            log(f"{size:,} done")
            del b
    report.append("")
    for c in costs:
        report += cost_lines(c, ns_per_posting)
    print("\n".join(report))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
