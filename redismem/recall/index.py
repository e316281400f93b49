"""Recall: every message a user's agents wrote, indexed by the workers and
searchable by keyword with filters.

Indexing happens off the write path. With indexing on (the client's
``index`` option), every write marks its session due (``rttl`` in meta
records the recall ttl) and the same coalesced job that summarizes runs an
``index_pass``: it reads the messages after the session's index watermark
``iwm``, turns each into a doc (``ranking.doc_weights`` gives its postings),
and commits them with compare-and-set on the watermark and the session's
incarnation. A pass that dies changes nothing, and a second pass over the same
messages loses the compare-and-set: each message is indexed exactly once.
Summarization never compacts a message past ``iwm``, and ``max_messages``
trims only indexed messages (see ``_common.lua``), so no message leaves the
session before it is indexed.

A doc keeps what a hit returns: the stored message, its session, entry tags,
agent and write time. Docs live in the user's slot (keys in ``keys.py``) and
expire ``recall_ttl`` after they were indexed; ``clear_user`` and
``clear_all`` remove them with the user. Search is one script call
(``recall_search.lua``, the port of ``ranking.rank``).

A new user's index is format 2 (``docs/index-format.md``): the commit
appends to one posting list per term, writes doc-table slots and keeps the
records in ``i:rec``; after it, the pass seals every complete block of 64
records into one zlib block (``seal_blocks``, idempotent). A session
``clear`` tombstones its docs (``i:dead``) until compaction; clearing the
user's last session drops the whole index (``drop_empty_index``). A user
indexed before keeps format 1 (``r:`` keys; a clear forgets its docs in
batches, ``forget_graves``) until the workers upgrade it (``upgrade.py``):
the commit tells (``IndexOutcome.format1``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import struct
import time
import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import msgpack

from redismem.checks import (
    check_int,
    check_optional_number,
    check_optional_str,
    check_seconds,
    check_tags,
    check_time_ms,
)
from redismem.core import codec
from redismem.core.codec import ROLE_CODE
from redismem.core.connection import scan_once
from redismem.core.epochs import EpochMoved, in_epoch
from redismem.core.guard import current_epoch, read_guarded
from redismem.core.keys import (
    RECORD_BLOCK,
    RecallKeys,
    SessionKeys,
    agent_filter_suffix,
    session_filter_suffix,
    tag_filter_suffix,
    term_suffix,
    validate_id,
)
from redismem.core.queue import SummarizeArgs
from redismem.core.scripts import IndexDoc, IndexRead
from redismem.errors import CorruptData, EmbedderError, InvalidInput
from redismem.models import ROLES, Hit, Message
from redismem.recall import postings, ranking
from redismem.recall.embeddings import Embedder, cosine, model_id, quantize
from redismem.recall.terms import terms

if TYPE_CHECKING:
    from redismem.core.backend import Backend

__all__ = [
    "IndexOutcome",
    "catch_up",
    "flush",
    "drop_empty_index",
    "forget_graves",
    "index_pass",
    "record_lists",
    "seal_blocks",
    "search",
]

logger = logging.getLogger(__name__)

#: Most messages one indexing pass reads and commits.
INDEX_BATCH = 200
#: Version of the doc payload.
_DOC_VERSION = 1
#: Docs forgotten per script call when a session is cleared.
_FORGET_BATCH = 500
#: Reads of a record block to seal while clears keep changing its records.
_SEAL_ATTEMPTS = 5
#: The recall index format a user with no index gets (``docs/index-format.md``;
#: 1 only to build a format-1 index, e.g. for the migration's tests).
NEW_INDEX_FORMAT = 2
MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class IndexOutcome:
    #: "timeout" only from a caller that stopped for want of time.
    status: Literal["indexed", "idle", "stale", "gone", "timeout"]
    indexed: int = 0
    #: The session's write sequence and incarnation the pass read.
    seq: int = 0
    gen: str = ""
    #: The docs went to the user's format-1 index: its migration is due.
    format1: bool = False


def _indexed_text(message: Message) -> str:
    parts = [message.content]
    for call in message.tool_calls:
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        parts.append(f"{call.name} {args}")
    return " ".join(parts)


def _entries_by_seq(records: Sequence[bytes], key: str) -> list[codec.DecodedEntry]:
    """Entry records (newest first) decoded, oldest first."""
    return [codec.decode_entry(record, key) for record in reversed(records)]


async def index_pass(
    backend: Backend,
    *,
    user_id: str,
    session_id: str,
    cap: int = INDEX_BATCH,
    embedder: Embedder | None = None,
    extracting: bool = False,
) -> IndexOutcome:
    """Index the session's next unindexed messages (at most ``cap``) once;
    with ``embedder``, each doc keeps the vector of its text too.
    ``extracting``: the caller extracts memories from what it indexes (see
    ``redismem.longterm.extraction.job``)."""
    sid = validate_id(session_id, "session_id")
    uid = validate_id(user_id, "user_id")

    async def read_at(keys: SessionKeys) -> tuple[SessionKeys, IndexRead]:
        found = await backend.scripts.index_read(keys, cap=cap, context=ranking.CONTEXT_TURNS)
        return keys, found

    # The pass reads the user's current epoch and commits to that epoch only.
    keys, read = await backend.in_session(uid, sid, read_at)
    if not read.seq:
        return IndexOutcome("gone")
    if read.recall_ttl_ms is None or not read.first_seq:
        return IndexOutcome("idle", seq=read.seq, gen=read.gen)
    first = read.first_seq
    entries = _entries_by_seq(read.entries, keys.entries)
    created = [(e.first_seq, e.created_ms) for e in entries]
    messages = codec.decode_messages(read.messages, first, created, keys.msgs)
    context_first = first - len(read.context)
    previous = [
        _indexed_text(m)
        for m in codec.decode_messages(read.context, context_first, created, keys.msgs)
    ]
    docs = []
    entry_at = 0
    vectors = await _vectors(embedder, [_indexed_text(m) for m in messages])
    for offset, (message, element) in enumerate(zip(messages, read.messages, strict=True)):
        seq = first + offset
        while entry_at + 1 < len(entries) and entries[entry_at + 1].first_seq <= seq:
            entry_at += 1
        if not entries or entries[entry_at].first_seq > seq:
            raise CorruptData(keys.entries, f"no entry record covers message {seq}")
        entry = entries[entry_at]
        text = _indexed_text(message)
        weights = ranking.doc_weights(
            text, message.name, previous, created=codec.ms_to_datetime(entry.created_ms)
        )
        previous.append(text)
        docs.append(_doc(sid, seq, entry, message, element, weights, vectors[offset]))
    until = first + len(messages) - 1
    recall = backend.layout.recall(uid, keys.epoch)
    try:
        done = await backend.scripts.index_commit(
            keys,
            recall,
            read=read,
            until_seq=until,
            docs=docs,
            extracting=extracting,
            new_format=NEW_INDEX_FORMAT,
        )
        if done.format == 2:
            await seal_blocks(backend, recall, next_docid=done.next_docid, sealed=done.sealed)
    except EpochMoved:
        return IndexOutcome("gone")  # the user was cleared since the read
    if done.status == "gone":
        return IndexOutcome("gone")
    if done.status == "stale":
        return IndexOutcome("stale", seq=read.seq, gen=read.gen)
    return IndexOutcome("indexed", len(docs), read.seq, read.gen, format1=done.format == 1)


async def seal_blocks(backend: Backend, recall: RecallKeys, *, next_docid: int, sealed: int) -> int:
    """Seal every record block of format 2 from ``sealed`` (``i:meta``
    sealed) whose docids are all given (``next_docid``: ``i:meta`` next),
    in order: its records read from ``i:rec``, compressed here, moved by one
    ``index_seal.lua`` call (idempotent: another worker may seal the same
    blocks; compare-and-set on the read: a clear's purge may delete records
    meanwhile, then the block is read again). A block whose records keep
    changing is left, with the ones after it, to a later pass. Returns how
    many this call sealed."""
    count = 0
    for block in range(sealed, (next_docid + 1) // RECORD_BLOCK):
        ids = [str(d) for d in range(block * RECORD_BLOCK, (block + 1) * RECORD_BLOCK)]
        for _ in range(_SEAL_ATTEMPTS):
            records: list[bytes | None] = await backend.call(
                functools.partial(_hmget, key=recall.i_rec, fields=ids)
            )
            data = postings.encode_block(records)
            status, _mark = await backend.scripts.index_seal(
                recall, block=block, data=data, read=records
            )
            if status >= 0:
                count += status
                break
        else:
            return count
    return count


async def drop_empty_index(backend: Backend, recall: RecallKeys) -> bool:
    """Drop the user's format-2 index when no doc of it is live (every
    session cleared and purged, see ``redismem.recall.purge``): True when
    dropped. Atomic against commits (``index_drop.lua``)."""
    state = await backend.call(
        functools.partial(_hmget, key=recall.i_meta, fields=["v", "n", "next"])
    )
    version, live, last = state
    if version != b"2" or int(live or 0) > 0:
        return False
    return await backend.scripts.index_drop(recall, next_docid=(last or b"").decode())


async def _hmget(redis: Any, *, key: str, fields: list[str]) -> list[bytes | None]:
    values: list[bytes | None] = await redis.hmget(key, fields)
    return values


async def catch_up(backend: Backend, *, user_id: str, session_id: str) -> IndexOutcome:
    """Index everything of the session not indexed yet, in this process (with
    the client's embedder): for summarization run outside the workers, which
    compacts only indexed messages. Returns the last pass's outcome ("idle"
    or "gone")."""
    embedder = backend.config.embedder_object
    while True:
        outcome = await index_pass(
            backend, user_id=user_id, session_id=session_id, embedder=embedder
        )
        if outcome.status in ("idle", "gone"):
            return outcome


async def _vectors(embedder: Embedder | None, texts: list[str]) -> list[list[Any]]:
    """``[model id, int8 vector]`` per text, or ``[]`` each without an embedder."""
    if embedder is None or not texts:
        return [[] for _ in texts]
    try:
        vectors = await embedder.embed(texts)
        if len(vectors) != len(texts):
            raise ValueError(f"{len(vectors)} vectors for {len(texts)} texts")
        model = model_id(embedder)
        return [[model, quantize(vector)] for vector in vectors]
    except Exception as exc:
        raise EmbedderError(f"the embedder failed: {exc!r}") from exc


def record_lists(record: bytes, created_ms: int, key: str) -> set[str]:
    """The suffixes (after ``i:``) of every format-2 list a doc of
    ``record`` (``role|name terms|payload``, written ``created_ms``) can be
    in, besides its session's: the postings of its text's, its speaker's and
    its date's terms (``doc_weights``' sources; the context terms it holds
    are those of its session's earlier docs) and its agent and tag filters.
    What a purge of its session rewrites."""
    found = _decode_payload(record.partition(b"|")[2].partition(b"|")[2], created_ms, None, key)
    [message] = codec.decode_messages([found.element], found.seq, [(found.seq, created_ms)], key)
    words = set(terms(_indexed_text(message)))
    if message.name:
        words.update(terms(message.name))
    words.update(terms(ranking.date_text(codec.ms_to_datetime(created_ms))))
    lists = {term_suffix(word) for word in words}
    if found.agent is not None:
        lists.add(agent_filter_suffix(found.agent))
    lists.update(tag_filter_suffix(k, v) for k, v in (found.tags or {}).items())
    return lists


def _doc(
    session_id: str,
    seq: int,
    entry: codec.DecodedEntry,
    message: Message,
    element: bytes,
    weights: Mapping[str, float],
    vector: list[Any],
) -> IndexDoc:
    payload = msgpack.packb(
        [_DOC_VERSION, session_id, seq, entry.agent_name, entry.tags, element, *vector],
        use_bin_type=True,
    )
    names = " ".join(sorted(set(terms(message.name)))) if message.name else ""
    record = f"{ROLE_CODE[message.role]}|{names}|".encode() + payload
    filters = [session_filter_suffix(session_id)]
    if entry.agent_name is not None:
        filters.append(agent_filter_suffix(entry.agent_name))
    filters += [tag_filter_suffix(k, v) for k, v in entry.tags.items()]
    return IndexDoc(entry.created_ms, record, filters, weights)


@dataclass(frozen=True, slots=True)
class _Found:
    """A doc the search script returned, its message decoded only for hits."""

    session_id: str
    seq: int
    created_ms: int
    agent: str | None
    tags: dict[str, str]
    element: bytes
    score: float | None
    #: The doc's vector and its model id, when the workers embedded it.
    model: str | None
    vector: bytes | None
    key: str

    @property
    def ident(self) -> tuple[str, int]:
        return self.session_id, self.seq

    def hit(self, score: float | None) -> Hit:
        [message] = codec.decode_messages(
            [self.element], self.seq, [(self.seq, self.created_ms)], self.key
        )
        return Hit(
            message=message,
            session_id=self.session_id,
            tags=self.tags or {},
            agent_name=self.agent,
            created_at=message.created_at,
            score=score,
        )


def _decode_doc(record: bytes, score: Any, key: str) -> _Found:
    """A format-1 doc record: ``created,deadline,role|names|payload``."""
    try:
        header, _, rest = record.partition(b"|")
        created_ms = int(header.split(b",", 1)[0])
    except ValueError as exc:
        raise CorruptData(key, f"recall doc: {exc}") from exc
    return _decode_payload(rest.partition(b"|")[2], created_ms, score, key)


def _decode_payload(payload: bytes, created_ms: int, score: Any, key: str) -> _Found:
    try:
        fields = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        version, session_id, seq, agent, tags, element = fields[:6]
        model, vector = (fields[6], fields[7]) if len(fields) >= 8 else (None, None)
        if version != _DOC_VERSION:
            raise ValueError(f"unknown doc version {version!r}")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"recall doc: {exc}") from exc
    value = None if score is None else float(score)
    return _Found(session_id, seq, created_ms, agent, tags, element, value, model, vector, key)


def _decode_found2(found: Sequence[Any], recall: RecallKeys) -> list[_Found]:
    """Format 2's reply (``recall_search.lua``): per hit its docid, score,
    created ms and record (``role|names|payload``) or the number of its
    record block; then the blocks named, each once, inflated here."""
    count = int(found[1])
    end = 2 + 4 * count
    blocks = {int(found[i]): found[i + 1] for i in range(end, len(found), 2)}
    upto: dict[int, int] = {}  # block -> the last record index its hits need
    for i in range(2, end, 4):
        if isinstance(found[i + 3], int):
            index = int(found[i]) % postings.BLOCK
            upto[found[i + 3]] = max(upto.get(found[i + 3], 0), index)
    inflated: dict[int, list[bytes | None]] = {}
    out = []
    for i in range(2, end, 4):
        docid, score, created, record = found[i : i + 4]
        if isinstance(record, int):
            rows = inflated.get(record)
            if rows is None:
                raw = blocks.get(record)
                try:
                    if raw is None:
                        raise ValueError(f"record block {record} missing")
                    rows = postings.decode_block(bytes(raw), upto[record])
                except (ValueError, zlib.error) as exc:
                    raise CorruptData(recall.i_docs, f"recall doc {docid}: {exc}") from exc
                inflated[record] = rows
            record = rows[int(docid) % postings.BLOCK]
            if record is None:
                raise CorruptData(recall.i_docs, f"recall doc {docid} missing from its block")
        payload = bytes(record).partition(b"|")[2].partition(b"|")[2]
        out.append(_decode_payload(payload, int(created), score, recall.i_rec))
    return out


def _role_codes(roles: object) -> str:
    if roles is None:
        return ""
    if isinstance(roles, str) or not isinstance(roles, Collection):
        raise InvalidInput("roles must be a collection of role names, e.g. ['user']")
    codes = set()
    for role in roles:
        if role not in ROLE_CODE:
            raise InvalidInput(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
        codes.add(str(ROLE_CODE[role]))
    if not codes:
        raise InvalidInput("roles must not be empty (None means any role)")
    return "".join(sorted(codes))


async def search(
    backend: Backend,
    query: str | None = None,
    *,
    user_id: str = "default",
    session_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    roles: Collection[str] | None = None,
    agent_name: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 10,
    min_score: float | None = None,
) -> list[Hit]:
    """Messages of the user's sessions that match ``query``, best first.

    Searches what the workers indexed (see ``flush``), including messages
    since compacted into a summary. ``tags`` keeps messages of entries
    carrying all the given pairs; ``roles``, ``agent_name`` and
    ``session_id`` keep those values; ``since``/``until`` (aware
    datetimes) bound the write time, inclusive. With no query (None or
    ""), the newest messages that pass the filters, ``score`` None.
    ``min_score`` drops weaker keyword matches.
    """
    backend.check_open()
    check_optional_str("query", query)
    uid = validate_id(user_id, "user_id")
    limit = check_int("limit", limit, minimum=1, maximum=MAX_LIMIT)
    min_score = check_optional_number("min_score", min_score)
    filters = []
    if session_id is not None:
        filters.append(session_filter_suffix(validate_id(session_id, "session_id")))
    agent = check_optional_str("agent_name", agent_name)
    if agent is not None:
        filters.append(agent_filter_suffix(agent))
    filters += [tag_filter_suffix(k, v) for k, v in check_tags(tags).items()]
    since_ms, until_ms = check_time_ms(since, "since"), check_time_ms(until, "until")
    role_codes = _role_codes(roles)
    qterms = ranking.query_terms(query) if query else {}
    if query and not qterms:
        return []  # only stop words: nothing to rank by
    embedder = backend.config.embedder_object

    async def run(epoch: int) -> list[Hit]:
        recall = backend.layout.recall(uid, epoch)
        common = _Filters(recall.prefix, since_ms, until_ms, role_codes, filters)
        if embedder is None or not qterms:
            found = await _run_search(backend, recall, common, qterms, limit, min_score)
            return [f.hit(f.score) for f in found]
        return await _fused(
            backend, recall, common, query or "", qterms, embedder, limit, min_score
        )

    return await in_epoch(backend.epochs, uid, run)


@dataclass(frozen=True, slots=True)
class _Filters:
    prefix: str
    since_ms: int | None
    until_ms: int | None
    role_codes: str
    suffixes: list[str]


async def _run_search(
    backend: Backend,
    recall: RecallKeys,
    filters: _Filters,
    qterms: Mapping[str, float],
    limit: int,
    min_score: float | None,
) -> list[_Found]:
    args: list[Any] = [
        filters.prefix,
        int(time.time() * 1000),
        limit,
        "" if min_score is None else repr(float(min_score)),
        "" if filters.since_ms is None else filters.since_ms,
        "" if filters.until_ms is None else filters.until_ms,
        filters.role_codes,
        len(filters.suffixes),
        *filters.suffixes,
        ranking.MAX_POSTINGS,
        ranking.PREV_ALPHA,
        ranking.NEXT_BETA,
        ranking.SPEAKER_BOOST,
        len(qterms),
    ]
    for term, weight in qterms.items():
        args += [term, weight]
    args.append(repr(ranking.MAX_WEIGHT))
    found = await backend.scripts.recall_search(recall, args)
    if found and isinstance(found[0], int):
        return _decode_found2(found, recall)
    return [_decode_doc(found[i + 2], found[i + 1], recall.docs) for i in range(0, len(found), 3)]


#: Keyword candidates and newest docs a fused search ranks by vector too.
_FUSED_KEYWORD = 50
_FUSED_RECENT = 200


async def _fused(
    backend: Backend,
    recall: RecallKeys,
    filters: _Filters,
    query: str,
    qterms: Mapping[str, float],
    embedder: Embedder,
    limit: int,
    min_score: float | None,
) -> list[Hit]:
    """Keyword and vector rankings fused (weighted reciprocal rank fusion,
    ``ranking.RRF_K`` and ``ranking.VECTOR_WEIGHT``) over a
    bounded candidate set: the best keyword matches and the newest docs that
    pass the filters. Docs embedded by another model rank by keyword only, and
    so does everything when the embedder fails on the query (both logged)."""
    keyword = await _run_search(backend, recall, filters, qterms, max(limit, _FUSED_KEYWORD), None)
    try:
        [query_vector] = await _vectors(embedder, [query])
    except EmbedderError as exc:
        logger.warning("recall: %s; keyword ranking only", exc)
        return [
            f.hit(f.score)
            for f in keyword[:limit]
            if min_score is None or (f.score or 0.0) >= min_score
        ]
    recent = await _run_search(backend, recall, filters, {}, _FUSED_RECENT, None)
    model, vector = query_vector
    query_values = list(struct.unpack(f"{len(vector)}b", vector))
    candidates: dict[tuple[str, int], _Found] = {}
    for found in [*keyword, *recent]:
        candidates.setdefault(found.ident, found)
    by_vector = [
        (cosine(query_values, f.vector), ident)
        for ident, f in candidates.items()
        if f.model == model and f.vector is not None
    ]
    if candidates and not by_vector:
        logger.warning(
            "recall: no indexed message carries vectors of %s (the workers' REDISMEM_EMBEDDER "
            "differs or is unset): keyword ranking only",
            model,
        )
    fused: dict[tuple[str, int], float] = {}
    for rank, found in enumerate(keyword):
        fused[found.ident] = fused.get(found.ident, 0.0) + 1.0 / (ranking.RRF_K + rank + 1)
    by_vector.sort(key=lambda e: e[0], reverse=True)
    weight = ranking.VECTOR_WEIGHT
    for rank, (similarity, ident) in enumerate(by_vector):
        if similarity > 0:
            fused[ident] = fused.get(ident, 0.0) + weight / (ranking.RRF_K + rank + 1)
    ranked = sorted(fused.items(), key=lambda e: e[1], reverse=True)
    hits = []
    for ident, score in ranked:
        if min_score is not None and score < min_score:
            break
        hits.append(candidates[ident].hit(score))
        if len(hits) == limit:
            break
    return hits


async def forget_graves(backend: Backend, recall: RecallKeys) -> None:
    """Forget the format-1 docs of the user's cleared sessions (their
    graves, see ``clear.lua``), in batches: also those of a clear that died
    halfway. (``purge.forget_cleared`` does this and format 2's purge.)"""
    graves: list[bytes] = await backend.call(lambda redis: redis.smembers(recall.graves))
    for grave in sorted(graves):
        suffix = grave.decode()[len(recall.prefix) :]
        while await backend.scripts.recall_forget(recall, suffix=suffix, batch=_FORGET_BATCH):
            pass


async def _scan_all(backend: Backend, pattern: str) -> list[bytes]:
    found: list[bytes] = []
    cursor = "0"
    while True:
        cursor, batch = await backend.call(
            functools.partial(scan_once, cursor=cursor, pattern=pattern)
        )
        found += batch
        if cursor == "0":
            return found


async def _marked(redis: Any, *, key: bytes) -> list[bytes]:
    """The ids of the sessions marked in the pending index ``key``."""
    members: list[bytes] = await redis.zrange(key, 0, -1)
    return members


async def _due_sessions(
    backend: Backend, user_id: str | None
) -> list[tuple[SessionKeys, str, int]]:
    """The keys, id and seq of the sessions marked pending now (in their
    user's current epoch: earlier epochs are cleared)."""
    layout = backend.layout
    if user_id is not None:
        uid = validate_id(user_id, "user_id")
        pending_keys = [layout.pending(uid, await current_epoch(backend, uid)).encode()]
    else:
        pending_keys = await _scan_all(backend, layout.pending_pattern())
    due = []
    for key in pending_keys:
        parsed = layout.parse_pending(key)
        if parsed is None:
            continue
        uid = parsed.user_id
        if user_id is None and parsed.epoch != await current_epoch(backend, uid):
            continue
        for raw_sid in await backend.call(functools.partial(_marked, key=key)):
            sid = raw_sid.decode()
            keys = layout.session(uid, sid, parsed.epoch)
            seq = await backend.call(functools.partial(_hget, key=keys.meta, field="seq"))
            due.append((keys, sid, int(seq or 0)))
    return due


async def _hget(redis: Any, *, key: str, field: str) -> bytes | None:
    value: bytes | None = await redis.hget(key, field)
    return value


async def _done(
    backend: Backend, keys: SessionKeys, session_id: str, seq: int, since_ms: float
) -> bool:
    """Whether the work due for the session's writes up to ``seq`` is done
    (or the user was cleared since)."""
    try:
        raw_pending, (iwm, rttl, wm, sumcfg, xwm, xbox) = await read_guarded(
            backend,
            keys,
            [
                ("ZSCORE", keys.pending, session_id),
                ("HMGET", keys.meta, "iwm", "rttl", "wm", "sumcfg", "xwm", "xbox"),
            ],
        )
    except EpochMoved:
        return True  # cleared: nothing is due any more
    if raw_pending is None or float(raw_pending) > since_ms:
        return True  # settled (or settled and marked again by a later write)
    # Still marked, as newer writes keep it: done once the writes up to
    # ``seq`` are indexed (and extracted, once workers extract) and no
    # longer leave a summarization backlog due.
    if rttl is not None and min(int(iwm or 0), int(xwm if xwm is not None else seq)) < seq:
        return False
    if xbox is not None:
        return False  # extracted memories not applied yet
    settings = SummarizeArgs.decode_optional(backend.layout.namespace, sumcfg or b"")
    if settings is None:
        return True
    return seq - int(wm or 0) - settings.keep_recent < settings.batch


async def flush(
    backend: Backend,
    *,
    user_id: str | None = None,
    timeout: float = 30.0,  # noqa: ASYNC109
) -> bool:
    """Wait until the workers have done the background work (indexing,
    summaries) due for every write made before this call, of ``user_id``
    or of every user. True when done, False when ``timeout`` (seconds)
    passed first. Needs running workers (``InProcessWorker`` with the
    embedded backend)."""
    backend.check_open()
    deadline = time.monotonic() + check_seconds("timeout", timeout)
    since_ms = time.time() * 1000
    waiting = await _due_sessions(backend, user_id)
    delay = 0.01
    while waiting:
        still = []
        for keys, sid, seq in waiting:
            if not await _done(backend, keys, sid, seq, since_ms):
                still.append((keys, sid, seq))
        waiting = still
        if not waiting:
            break
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.2)
    return True
