"""The whole Redis key layout, in one place.

Every key is ``<namespace>:...``. Keys that belong to a user carry the hash
tag ``{u:<user>}``; Redis Cluster hashes only the text between the first
``{`` and the next ``}``, so all keys of one user live in one slot and every
multi-key script touches a single slot. The namespace may not contain braces,
which keeps the user's tag the first one in the key.

User and session ids are escaped before they go into a key: every byte of
their UTF-8 form outside ``[A-Za-z0-9_.-]`` becomes ``%XX``. The escaped form
has no ``:``, braces or SCAN glob characters (``* ? [ ] \\``), so an id can
neither reach another user's keys nor widen a ``SCAN MATCH`` pattern, and the
escaping is reversible (``parse_key``).

Every key of a user lies in one *epoch* of that user (``redismem.core.guard``):
``ns:{u:U}:`` + the kinds below for epoch 0 (a user never cleared),
``ns:{u:U}:@<epoch>:`` + the same kinds after a ``clear_user`` (the epoch is
the server's time in ms of the clear). Outside every epoch lies one key::

    ns:{u:U}:guard             HASH  e (the user's epoch; absent = 0), at (ms of
                               the last clear), reaped (the epoch whose earlier
                               ones are deleted: the clear finished). Made by
                               clear_user, which drops it again when the new
                               epoch holds nothing; kept
                               at least a day, and as long as every key of its
                               epoch (each deadline given to one covers it)

How each key family of a user is guarded: every script that reads or writes
it is user-scoped (``lua.is_user_scoped``: all but those whose header
says ``-- unguarded``, the guard's own and the LangGraph checkpointer's) and
checks the guard first, so nothing reaches the keys of a cleared epoch; the
plain reads run in one MULTI with the guard;
``clear_user`` deletes every key of the earlier epochs, whatever its kind,
by its prefix. A new family gets all three by building its keys here, for an
epoch, and adding its root key to ``KeyLayout.epoch_roots``. The keys of one
user (``U``), in one epoch (prefix ``E`` = ``ns:{u:U}:`` or
``ns:{u:U}:@<epoch>:``; ``S`` = escaped session id)::

    E sessions                 ZSET  session id -> expiry deadline (ms; +inf = none)
    E tagidx                   ZSET  lexicographic tag index over the user's sessions
    E pending                  ZSET  session id -> time it became due for summarization
    E s:S:msgs                 LIST  stored messages, oldest first
    E s:S:meta                 HASH  the session's counters and watermarks
                                     (its fields: SESSION_META_FIELDS)
    E s:S:entries              LIST  one record per write, oldest first
    E s:S:tags                 HASH  union of the tags of the session's writes
    E s:S:summary              STRING the running summary (msgpack)
    E s:S:writes               HASH  write id -> "first_seq,created_ms,n" of the
                                     latest writes (idempotent re-sends)
    redismem/q:ns:...          work-queue side: stats, failures, lag samples,
                               sweep cursor, running jobs' leases
                               (``lease:<job id>``, see ``queue.lease_key``)
                               (not per user; ``clear_user``
                               removes the user's failure records and waiting
                               jobs, whose ids name users by digest only)

The recall index of a user (``D`` = a doc id, one per indexed message; ``E`` =
an escaped id)::

    E r:docs                   HASH  D -> "created_ms,deadline_ms,role|name terms|" + payload
    E r:links                  HASH  D -> "prev|speaker name terms" (prev: the doc
                                     before D in its session)
    E r:dkeys                  HASH  D -> the suffixes of the posting and filter keys
                                     that hold D, space separated (to forget it)
    E r:stats                  HASH  n (docs), next (last doc id given)
    E r:time                   ZSET  D -> created ms
    E r:exp                    ZSET  D -> deadline ms (docs with a recall ttl)
    E r:t:<term>               ZSET  D -> weight of the term in D (postings)
    E r:f:s:X                  ZSET  D -> created ms, docs of session X
    E r:f:a:X                  ZSET  the same, docs written by agent X
    E r:f:g:X=Y                ZSET  the same, docs of entries tagged key=value
    E r:f:x:X:T                ZSET  a grave: the docs of session X when it was
                                     cleared (T: unique per clear), until forgotten
    E r:graves                 SET   the graves not yet forgotten

That is recall format 1. Format 2 (``docs/index-format.md``; a new user gets
it, a user with ``r:stats`` keeps format 1 until migrated) is the ``i:``
family. ``D`` is a docid (1, 2, ...); a posting list is a 4-byte big-endian
header (the list's last docid), then per doc ``varint((D - previous D) << 6 | q)``
(unsigned LEB128; the first doc's previous D is 0; ``q`` the weight
quantized to 1..63, ``ranking.quantize_weight``; 0 in filter lists)::

    E i:meta                   HASH  v (2), n (live docs), next (last docid
                                     given), sords / spords (last session /
                                     speaker ordinal given), dead (docs of
                                     cleared sessions not compacted), sealed
                                     (every record block below it is sealed),
                                     ttl (1 once a doc with a deadline was
                                     written: before, no key has a TTL),
                                     mig (migration cursor from format 1)
    E i:t:<term>               STRING posting list of a term
    E i:f:s:<ord>              STRING the docs (q = 0) of session ordinal ord
    E i:f:a:X                  STRING the same, docs written by agent X
    E i:f:g:X=Y                STRING the same, docs of entries tagged key=value
    E i:dt:<c>                 STRING doc table, docids c*4096 .. c*4096+4095:
                                     22 bytes per doc at (D % 4096) * 22: created
                                     ms (6), deadline s since 2020-01-01 UTC (4,
                                     0 none), previous / next doc of the session
                                     as docid deltas (3 + 3, 0 none), session
                                     ordinal (3), role code (1), speaker ordinal
                                     (2, 0 none); big-endian; all zero = no doc
    E i:rec                    HASH  D -> "role|name terms|" + payload, for docs
                                     of record blocks not sealed yet
    E i:docs                   HASH  block b -> zlib of the records of docids
                                     64b .. 64b+63, each varint(len) + record
    E i:sess                   HASH  escaped session id -> ord; "#<ord>" ->
                                     "<escaped session id>,<docs indexed>"
    E i:spk                    HASH  speaker name terms -> speaker ord;
                                     "#<ord>" -> the name terms
    E i:dead                   BITMAP by session ordinal: that session was cleared
    E i:purge                  SET   ordinals of cleared sessions whose docs are
                                     not purged yet (``index_purge.lua``: their
                                     lists rewritten without them, their
                                     records and slots deleted)

Only the workers write the recall keys (``index_commit.lua``,
``index_seal.lua``, ``index_migrate.lua``, ``index_retire.lua``), plus
``clear.lua`` (a session's grave, its dead bit, its purge entry) and the
purge that ``Memory.clear`` runs (or a worker finishes: ``index_purge.lua``);
every one of those scripts, and ``recall_search.lua``, is guarded. No key
of either format outlives the newest doc it holds (commits give each key
touched the later of its deadline and the doc's, none when a doc is kept
forever); ``i:meta`` holds the longest deadline of the family.

The long-term store (``redismem.longterm.store``) keeps a namespace ``(T, L2, ...)``
under the user tag of its first label, the tenant ``T``. An item is named by
its ref ``R = e(T)/e(L2)/.../#e(key)`` (``e`` = ``escape_id``; ``/`` and ``#``
never occur in escaped text, so two namespaces or keys never share a ref),
a namespace by its ref ``e(T)/e(L2)/.../``; ``E`` is an escaped index term::

    E kv:item:R                STRING the item's current version (record, below)
    E kv:hist:R                LIST  its earlier versions and delete tombstones,
                                     oldest first (same TTL as the item)
    E kv:refs                  ZSET  (lexicographic) every R with an item or history
    E kv:updated               ZSET  live R -> updated ms
    E kv:expiry                ZSET  R -> deadline ms of its keys (put with a ttl)
    E kv:namespaces            HASH  namespace ref -> number of live items
    E kv:term:X                ZSET  R -> frequency of X in the item's indexed text
    E kv:doclen                HASH  R -> number of indexed terms (BM25 length)
    E kv:docterms              HASH  R -> its distinct escaped terms, space separated
    E kv:stats                 HASH  docs, len (BM25 totals), clock (last ms used)
    E kv:ops                   HASH  write id -> result (re-sent writes apply once)
    E kv:optimes               ZSET  write id -> ms applied (pruning of ``ops``)

(Here ``E`` is the epoch prefix of the tenant ``T``, the user the items
belong to: long-term memories of user ``U`` are the store items of tenant
``U``, and go with it.)

A record is ``b"<version>,<created_ms>,<updated_ms>,<p|d>," + msgpack`` (``p``
a put, ``d`` a delete tombstone); the text prefix is written by the scripts,
which own the clock.

The LangGraph checkpointer (``redismem.adapters.langgraph``) keeps each
thread under a hash tag of its own (a thread is not a user: ``clear_user``
leaves it, ``clear_all`` and ``delete_thread`` remove it). ``T`` is the
escaped thread id, ``C`` = ``e(checkpoint_ns)/e(checkpoint_id)``, ``R`` an
escaped run id (see that module for the values)::

    ns:{lg:T}:ck               HASH  C -> the checkpoint, its metadata, parent
    ns:{lg:T}:ix               HASH  C -> "<run>|<channel value refs>"
    ns:{lg:T}:ids              ZSET  every C (lexicographic: namespace, then id)
    ns:{lg:T}:bl               HASH  e(ns)/e(channel)/e(version) -> channel value
    ns:{lg:T}:wr               HASH  C/e(task)/idx -> pending write
    ns:{lg:T}:wi               ZSET  the fields of wr (a checkpoint's are a range)
    ns:{lg:T}:runs             ZSET  "<run>/C" (delete_for_runs)
    ns:{lgr:R}:threads         SET   T of the threads holding checkpoints of run R

The work queue's keys never lie inside a namespace: ``clear_all`` must not
touch them (other tenants' jobs). Queue-side keys start with ``redismem/``
(``/`` is not allowed in a namespace), arq's own keys with ``arq:`` (``arq``
is a reserved namespace), and the default queue is ``redismem/queue``.
Each worker of a queue ``Q`` (``redismem.workers.health``; ``W`` = its
name) keeps::

    Q:workers                  ZSET  W -> ms of its last heartbeat (``FORGET_S``
                               after the last beat of any worker, it expires)
    Q:health-check:W           STRING arq's health record (jobs complete, failed,
                               ...), written by arq's poll loop; lives 6 s
    Q:health-check             STRING some worker of Q is alive (arq's --check); 6 s
    Q:runs:W                   STRING JSON: what W runs, {"namespaces": [...],
                               "summarizer", "extractor", "consolidator",
                               "embedder"} (plug-in names, no settings);
                               written with each heartbeat, lives ``FORGET_S``
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Final

from redismem.errors import InvalidInput

__all__ = [
    "user_digest",
    "GraphThreadKeys",
    "KeyLayout",
    "RecallKeys",
    "ParsedKey",
    "SESSION_META_FIELDS",
    "SessionKeys",
    "StoreKeys",
    "UserKeys",
    "escape_id",
    "namespace_of",
    "namespace_root_patterns",
    "parse_store_namespace_ref",
    "parse_store_ref",
    "store_namespace_ref",
    "store_ref",
    "tag_index_prefix",
    "unescape_id",
    "validate_id",
    "worker_health_key",
    "worker_registry_key",
    "worker_runs_key",
]

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # used with fullmatch
_ESCAPED_RE = re.compile(r"(?:[A-Za-z0-9_.-]|%[0-9A-F]{2})+")

#: Longest id accepted, in bytes of UTF-8.
MAX_ID_BYTES = 4096

SESSION_KEY_KINDS = ("msgs", "meta", "entries", "tags", "summary", "writes")
#: The fields of a session's meta hash (``SessionKeys.meta``) and what each
#: holds: the one list of them. Scripts read them by name through
#: ``load_meta`` (``lua/_meta.lua``); Python names them as here; a test checks
#: that both name no other.
SESSION_META_FIELDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "seq": "seq of the last message written; absent: no session",
        "dropped": "messages removed from the head (trimmed or summarized away)",
        "tokens": "token count of the stored messages",
        "writes": "writes (entries) so far",
        "exp": "deadline given to the session's keys (ms), 'inf': none",
        "created": "ms of the first write",
        "accessed": "ms of the last write or read (a read moves it by 1 s or more: <= 1 s behind)",
        "gen": "the incarnation: the first write's id",
        "trimmed": "messages dropped by max_messages",
        "wm": "summary watermark: seq of the last summarized message",
        "summarized": "messages summarized so far",
        "sumcfg": "'keep_recent,batch,compact' the session was marked pending with, '-': off",
        "iwm": "recall index watermark: seq of the last indexed message",
        "ilast": "id of the session's last doc in the recall index",
        "rttl": "recall ttl (ms, 0: forever) of the writes; absent: not indexed",
        "unindexed": "messages trimmed before they were indexed",
        "xwm": "extraction watermark: seq of the last extracted message",
        "xbox": "outbox: memories extracted but not yet added (msgpack)",
    }
)
#: Kinds of the user keys that say a user holds data in an epoch: one root
#: per key family, which exists whenever any key of the family does (sessions,
#: recall index format 1 stats and docs, format 2, long-term store). The
#: guard's ``KeyLayout.epoch_roots`` and ``redismem users`` both use them.
USER_ROOT_KINDS = ("sessions", "r:stats", "r:docs", "i:meta", "kv:refs")
#: Namespaces that would hold the work queue's keys.
RESERVED_NAMESPACES = frozenset({"arq"})
#: Prefix of the work-queue side's keys; no namespace can contain it.
QUEUE_KEY_PREFIX = "redismem/q"
#: Marks the epoch in a user key (``ns:{u:U}:@<epoch>:...``); never the
#: first character of a key kind, nor in escaped text.
EPOCH_MARK = "@"


def validate_id(value: object, what: str) -> str:
    """Return ``value`` if it is a usable id, else raise ``InvalidInput``."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidInput(f"{what} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{what} is not valid unicode text") from exc
    if size > MAX_ID_BYTES:
        raise InvalidInput(f"{what} is {size} bytes long; the limit is {MAX_ID_BYTES}")
    return value


@lru_cache(maxsize=16384)
def escape_id(value: str) -> str:
    """Escape an id for use inside a key (see the module docstring). Cached:
    every call of the client escapes its user and session ids."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in value.encode("utf-8"))


def unescape_id(escaped: str) -> str:
    """Inverse of ``escape_id``.

    Raises ``InvalidInput`` for text ``escape_id`` never produces (stray
    ``%``, lower-case hex, escaped safe bytes, invalid UTF-8), so a foreign or
    tampered key cannot parse as some user's key.
    """
    if not _ESCAPED_RE.fullmatch(escaped):
        raise InvalidInput(f"{escaped!r} is not an escaped id")
    out = bytearray()
    i = 0
    while i < len(escaped):
        ch = escaped[i]
        if ch == "%":
            out.append(int(escaped[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(ch))
            i += 1
    try:
        value = out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{escaped!r} is not an escaped id: {exc}") from exc
    if escape_id(value) != escaped:
        raise InvalidInput(f"{escaped!r} is not the canonical escape of {value!r}")
    return value


def _lp(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"%d:" % len(raw) + raw


def tag_index_prefix(key: str, value: str) -> bytes:
    """Forward prefix of a tag pair in the user tag index (see ``_common.lua``)."""
    return b"f" + _lp(key) + _lp(value)


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The keys of one session, in the order scripts take them."""

    msgs: str
    meta: str
    entries: str
    tags: str
    summary: str
    writes: str
    sessions: str
    tagidx: str
    pending: str
    #: The user's guard and the epoch these keys were built for: every
    #: script on them checks the guard still holds this epoch.
    guard: str = ""
    epoch: int = 0

    def script_keys(self) -> list[str]:
        """KEYS[1..9] of the session scripts (see ``lua/_common.lua``)."""
        return [*self.all_session_keys(), self.sessions, self.tagidx, self.pending]

    def all_session_keys(self) -> tuple[str, ...]:
        return (self.msgs, self.meta, self.entries, self.tags, self.summary, self.writes)


@dataclass(frozen=True, slots=True)
class UserKeys:
    """The user-wide session indexes of one epoch of a user."""

    sessions: str
    tagidx: str
    pending: str
    guard: str
    epoch: int


RECALL_KEY_KINDS = ("docs", "links", "dkeys", "stats", "time", "exp")


@dataclass(frozen=True, slots=True)
class RecallKeys:
    """The recall index keys of one user: the fixed ones, in the order the
    recall scripts take them, and the prefix of the posting and filter keys
    (``prefix + suffix``; every suffix is built by the ``*_suffix`` functions)."""

    prefix: str
    docs: str
    links: str
    dkeys: str
    stats: str
    time: str
    exp: str
    guard: str = ""
    epoch: int = 0
    #: SET of the graves (lists of docs of cleared sessions) not yet forgotten.
    graves: str = ""

    #: Format 2 (the ``i:`` family, see the module docstring): the prefix of
    #: its keys (``E i:``) and its fixed keys, in the order of ``index_keys``.
    i_prefix: str = ""
    i_meta: str = ""
    i_rec: str = ""
    i_docs: str = ""
    i_sess: str = ""
    i_spk: str = ""
    i_dead: str = ""
    #: SET of the ordinals of cleared sessions not purged yet.
    i_purge: str = ""

    def script_keys(self) -> list[str]:
        return [self.docs, self.links, self.dkeys, self.stats, self.time, self.exp]

    def index_keys(self) -> list[str]:
        """The fixed keys of format 2, in the order the format-2 scripts take
        them (``INDEX_KEY_KINDS``; see ``lua/_index.lua``)."""
        return [self.i_meta, self.i_rec, self.i_docs, self.i_sess, self.i_spk, self.i_dead]

    def i_key(self, suffix: str) -> str:
        """A format-2 key by its suffix: ``term_suffix``, ``agent_filter_suffix``,
        ``tag_filter_suffix``, ``index_session_suffix``, ``doc_table_suffix``."""
        return self.i_prefix + suffix

    def i_term(self, term: str) -> str:
        """The posting list (STRING) of an index term."""
        return self.i_prefix + term_suffix(term)

    def i_doc_table(self, chunk: int) -> str:
        """Doc table chunk ``chunk`` (docids ``chunk * DOC_TABLE_CHUNK`` on)."""
        return self.i_prefix + doc_table_suffix(chunk)

    def i_session_list(self, ordinal: int) -> str:
        """The docs (STRING, posting list, q = 0) of session ordinal ``ordinal``."""
        return self.i_prefix + index_session_suffix(ordinal)


#: The fixed keys of recall format 2 (``E i:<kind>``), in script order.
INDEX_KEY_KINDS = ("meta", "rec", "docs", "sess", "spk", "dead")
#: Docids per doc table chunk (``E i:dt:<docid // DOC_TABLE_CHUNK>``).
DOC_TABLE_CHUNK = 4096
#: Docids per sealed record block (``E i:docs`` field ``docid // RECORD_BLOCK``).
RECORD_BLOCK = 64


def index_session_suffix(ordinal: int) -> str:
    """Format 2's list of a session's docs, by the session's ordinal (``i:sess``)."""
    return f"f:s:{ordinal}"


def doc_table_suffix(chunk: int) -> str:
    return f"dt:{chunk}"


def term_suffix(term: str) -> str:
    """Postings of an index term (terms hold no spaces, braces or colons)."""
    return f"t:{term}"


def session_filter_suffix(session_id: str) -> str:
    return f"f:s:{escape_id(session_id)}"


def grave_suffix(session_id: str, token: str) -> str:
    """Where clear.lua sets aside the docs of a cleared session (``token``:
    unique per clear)."""
    return f"f:x:{escape_id(session_id)}:{escape_id(token)}"


def agent_filter_suffix(agent_name: str) -> str:
    return f"f:a:{escape_id(agent_name)}"


def tag_filter_suffix(key: str, value: str) -> str:
    # "=" never occurs in escaped text: the pair is unambiguous.
    return f"f:g:{escape_id(key)}={escape_id(value)}"


@dataclass(frozen=True, slots=True)
class ParsedKey:
    user_id: str
    session_id: str | None
    kind: str
    #: The user epoch the key belongs to (0: before the user's first clear,
    #: or the guard itself).
    epoch: int = 0


# -- the long-term store (redismem.longterm.store) ------------------------------------

#: Ends every escaped label in a store ref; never occurs in escaped text.
STORE_LABEL_END = "/"
#: Starts the escaped key in an item ref; never occurs in escaped text.
STORE_KEY_MARK = "#"
#: Kinds of the per-tenant store keys (``ns:{u:T}:kv:<kind>``).
STORE_KEY_KINDS = (
    "refs",
    "updated",
    "expiry",
    "namespaces",
    "doclen",
    "docterms",
    "stats",
    "ops",
    "optimes",
)


def store_namespace_ref(namespace: tuple[str, ...]) -> str:
    """``e(T)/e(L2)/.../``: the ref of a namespace (a prefix of its items' refs)."""
    return "".join(escape_id(label) + STORE_LABEL_END for label in namespace)


def store_ref(namespace: tuple[str, ...], key: str) -> str:
    """``e(T)/.../#e(key)``: the ref of one item."""
    return store_namespace_ref(namespace) + STORE_KEY_MARK + escape_id(key)


def parse_store_namespace_ref(ref: str) -> tuple[str, ...]:
    """Inverse of ``store_namespace_ref``; ``InvalidInput`` for anything else."""
    if not ref.endswith(STORE_LABEL_END):
        raise InvalidInput(f"{ref!r} is not a namespace ref")
    return tuple(unescape_id(label) for label in ref[:-1].split(STORE_LABEL_END))


def parse_store_ref(ref: str) -> tuple[tuple[str, ...], str]:
    """Inverse of ``store_ref``: ``(namespace, key)``."""
    namespace, mark, key = ref.partition(STORE_KEY_MARK)
    if not mark:
        raise InvalidInput(f"{ref!r} is not an item ref")
    return parse_store_namespace_ref(namespace), unescape_id(key)


@dataclass(frozen=True, slots=True)
class StoreKeys:
    """The store keys of one tenant, in the order the store scripts take them
    (see ``lua/_store.lua``)."""

    refs: str
    updated: str
    expiry: str
    namespaces: str
    doclen: str
    docterms: str
    stats: str
    ops: str
    optimes: str
    item_prefix: str
    history_prefix: str
    term_prefix: str
    guard: str = ""
    epoch: int = 0

    def tenant_keys(self) -> list[str]:
        """KEYS[1..9] of every store script."""
        return [getattr(self, kind) for kind in STORE_KEY_KINDS]

    def key_prefixes(self) -> list[str]:
        """ARGV[1..3] of every store script: the scripts build the keys of
        single items and terms from these (all under the tenant's hash tag)."""
        return [self.item_prefix, self.history_prefix, self.term_prefix]

    def item(self, ref: str) -> str:
        return self.item_prefix + ref

    def history(self, ref: str) -> str:
        return self.history_prefix + ref

    def term(self, term: str) -> str:
        """The postings of an index term (escaped here)."""
        return self.term_prefix + escape_id(term)


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """Builds (and parses) every key under one namespace."""

    namespace: str = "redismem"

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not _NAMESPACE_RE.fullmatch(self.namespace):
            raise InvalidInput(
                f"namespace must be 1-64 characters of [A-Za-z0-9_.-], got {self.namespace!r}"
            )
        if self.namespace in RESERVED_NAMESPACES:
            raise InvalidInput(f"namespace {self.namespace!r} is reserved for the work queue")

    def user_tag_prefix(self, user_id: str) -> str:
        """``ns:{u:U}:``: every key of the user starts with it (any epoch)."""
        return f"{self.namespace}:{{u:{escape_id(user_id)}}}:"

    def user_prefix(self, user_id: str, epoch: int = 0) -> str:
        """Where the user's keys of one epoch start (see ``guard``)."""
        base = self.user_tag_prefix(user_id)
        return base if not epoch else f"{base}{EPOCH_MARK}{epoch}:"

    def guard(self, user_id: str) -> str:
        """The user guard (HASH ``e``: the epoch, ``at``: ms of the last
        clear; absent = epoch 0). Every user-scoped script checks it: see
        ``redismem.core.guard``."""
        return self.user_tag_prefix(user_id) + "guard"

    def guard_pattern(self) -> str:
        """SCAN pattern matching the guard of every user (and a few other
        keys: check matches with ``parse_key``, kind ``guard``)."""
        return f"{self.namespace}:{{u:*:guard"

    def user_pattern(self, user_id: str) -> str:
        """SCAN pattern matching every key of one user (every epoch, and the
        guard) and nothing else."""
        return self.user_tag_prefix(user_id) + "*"

    def namespace_pattern(self) -> str:
        """SCAN pattern matching every key of the namespace and nothing else."""
        return f"{self.namespace}:*"

    def epoch_roots(self, user_id: str, epoch: int) -> list[str]:
        """One key per key family of the user that exists whenever any key of
        that family does in ``epoch`` (each family's scripts create it first
        and drop it last): a new family must add its root to
        ``USER_ROOT_KINDS``, or a clear could drop the guard of an epoch still
        holding its keys."""
        prefix = self.user_prefix(user_id, epoch)
        return [prefix + kind for kind in USER_ROOT_KINDS]

    def user(self, user_id: str, epoch: int = 0) -> UserKeys:
        return UserKeys(
            self.sessions(user_id, epoch),
            self.tagidx(user_id, epoch),
            self.pending(user_id, epoch),
            self.guard(user_id),
            epoch,
        )

    def sessions(self, user_id: str, epoch: int = 0) -> str:
        return self.user_prefix(user_id, epoch) + "sessions"

    def tagidx(self, user_id: str, epoch: int = 0) -> str:
        return self.user_prefix(user_id, epoch) + "tagidx"

    def pending(self, user_id: str, epoch: int = 0) -> str:
        return self.user_prefix(user_id, epoch) + "pending"

    def pending_pattern(self) -> str:
        """SCAN pattern matching the pending index of every user and epoch
        (and a few other keys: check matches with ``parse_key``, kind
        ``pending``)."""
        return f"{self.namespace}:{{u:*:pending"

    def parse_pending(self, key: str | bytes) -> ParsedKey | None:
        """The parsed key when ``key`` (a match of ``pending_pattern``) is a
        pending index, else None."""
        try:
            text = key.decode("utf-8") if isinstance(key, bytes) else key
            parsed = self.parse_key(text)
        except (InvalidInput, UnicodeDecodeError):
            return None
        return parsed if parsed.session_id is None and parsed.kind == "pending" else None

    def recall_docs_pattern(self) -> str:
        """SCAN pattern matching the recall docs of every user and epoch (and
        a few other keys: check matches with ``parse_key``, kind ``r:docs``)."""
        return f"{self.namespace}:{{u:*:r:docs"

    def index_meta_pattern(self) -> str:
        """SCAN pattern matching the format-2 recall index meta of every user
        and epoch (and a few other keys: check matches with ``parse_key``,
        kind ``i:meta``)."""
        return f"{self.namespace}:{{u:*:i:meta"

    def user_root_patterns(self) -> list[str]:
        """SCAN patterns that, together, match a root key (``USER_ROOT_KINDS``)
        of every user holding data, in any epoch (and a few other keys: check
        matches with ``parse_user_root``)."""
        return [f"{self.namespace}:{{u:*:{kind}" for kind in USER_ROOT_KINDS]

    def parse_user_root(self, key: str | bytes) -> str | None:
        """The (unescaped) user id when ``key`` is a root key of a user, else None."""
        try:
            text = key.decode("utf-8") if isinstance(key, bytes) else key
            parsed = self.parse_key(text)
        except (InvalidInput, UnicodeDecodeError):
            return None
        if parsed.session_id is not None or parsed.kind not in USER_ROOT_KINDS:
            return None
        return parsed.user_id

    def session_key(self, user_id: str, session_id: str, kind: str, epoch: int = 0) -> str:
        return f"{self.user_prefix(user_id, epoch)}s:{escape_id(session_id)}:{kind}"

    def session(self, user_id: str, session_id: str, epoch: int = 0) -> SessionKeys:
        return _session_keys(self, user_id, session_id, epoch)

    def _build_session(self, user_id: str, session_id: str, epoch: int) -> SessionKeys:
        prefix = self.user_prefix(user_id, epoch)
        base = f"{prefix}s:{escape_id(session_id)}:"
        return SessionKeys(
            msgs=base + "msgs",
            meta=base + "meta",
            entries=base + "entries",
            tags=base + "tags",
            summary=base + "summary",
            writes=base + "writes",
            sessions=prefix + "sessions",
            tagidx=prefix + "tagidx",
            pending=prefix + "pending",
            guard=self.guard(user_id),
            epoch=epoch,
        )

    def recall(self, user_id: str, epoch: int = 0) -> RecallKeys:
        prefix = self.user_prefix(user_id, epoch) + "r:"
        kinds = {kind: prefix + kind for kind in RECALL_KEY_KINDS}
        i_prefix = self.user_prefix(user_id, epoch) + "i:"
        i_kinds = {f"i_{kind}": i_prefix + kind for kind in INDEX_KEY_KINDS}
        return RecallKeys(
            prefix,
            **kinds,
            guard=self.guard(user_id),
            epoch=epoch,
            graves=prefix + "graves",
            i_prefix=i_prefix,
            **i_kinds,
            i_purge=i_prefix + "purge",
        )

    def queue_key(self, name: str) -> str:
        """A key of the work-queue side (stats, failure log, sweep cursor),
        outside every namespace."""
        return f"{QUEUE_KEY_PREFIX}:{self.namespace}:{name}"

    def owns_queue_name(self, queue_name: str) -> bool:
        """Whether an arq queue of this name would lie inside the namespace."""
        return queue_name.startswith(f"{self.namespace}:")

    def parse_key(self, key: str) -> ParsedKey:
        """Split a key built by this layout back into user, session and kind."""
        prefix = f"{self.namespace}:{{u:"
        if not key.startswith(prefix):
            raise InvalidInput(f"{key!r} is not a user key of namespace {self.namespace!r}")
        user_esc, sep, rest = key[len(prefix) :].partition("}:")
        if not sep:
            raise InvalidInput(f"{key!r} has no user hash tag")
        user_id = unescape_id(user_esc)
        epoch = 0
        if rest.startswith(EPOCH_MARK):
            digits, sep, rest = rest[1:].partition(":")
            if not sep or not digits.isdigit() or digits.startswith("0"):
                raise InvalidInput(f"{key!r} has a malformed epoch")
            epoch = int(digits)
        if rest.startswith("s:"):
            session_esc, _, kind = rest[2:].partition(":")
            return ParsedKey(user_id, unescape_id(session_esc), kind, epoch)
        return ParsedKey(user_id, None, rest, epoch)

    # -- the long-term store (redismem.longterm.store) --------------------------------

    def store_prefix(self, tenant: str, epoch: int = 0) -> str:
        """Every store key of a tenant starts with this (inside ``user_prefix``)."""
        return self.user_prefix(tenant, epoch) + "kv:"

    def store(self, tenant: str, epoch: int = 0) -> StoreKeys:
        """The store keys of one tenant (the first label of its namespaces)."""
        base = self.store_prefix(tenant, epoch)
        kinds = {kind: base + kind for kind in STORE_KEY_KINDS}
        return StoreKeys(
            **kinds,
            item_prefix=base + "item:",
            history_prefix=base + "hist:",
            term_prefix=base + "term:",
            guard=self.guard(tenant),
            epoch=epoch,
        )

    # -- the LangGraph checkpointer (redismem.adapters.langgraph) -----------

    def graph_thread(self, thread_id: str) -> GraphThreadKeys:
        """The keys of one LangGraph thread (any str id; escaped)."""
        base = f"{self.namespace}:{{lg:{escape_id(thread_id)}}}:"
        return GraphThreadKeys(*(base + kind for kind in _GRAPH_THREAD_KINDS))

    def graph_run(self, run_id: str) -> str:
        """The set of the threads holding checkpoints of one run."""
        return f"{self.namespace}:{{lgr:{escape_id(run_id)}}}:threads"

    def graph_threads_pattern(self) -> str:
        """SCAN pattern matching the ``ids`` key of every thread."""
        return f"{self.namespace}:{{lg:*}}:ids"

    def graph_thread_of(self, ids_key: str) -> str | None:
        """The thread id of an ``ids`` key (None for any other key)."""
        head, tail = f"{self.namespace}:{{lg:", "}:ids"
        if not (ids_key.startswith(head) and ids_key.endswith(tail)):
            return None
        try:
            return unescape_id(ids_key[len(head) : -len(tail)])
        except InvalidInput:
            return None

    def store_pattern(self, kind: str) -> str:
        """SCAN pattern matching one per-tenant store key (a ``STORE_KEY_KINDS``
        kind) of every tenant and epoch; check matches with ``parse_key``."""
        if kind not in STORE_KEY_KINDS:
            raise InvalidInput(f"unknown store key kind {kind!r}")
        return f"{self.namespace}:{{u:*:kv:{kind}"


@dataclass(frozen=True, slots=True)
class GraphThreadKeys:
    """The keys of one LangGraph thread, in the order the ``lg_*`` scripts
    take them (KEYS[1..7])."""

    ck: str
    ix: str
    ids: str
    bl: str
    wr: str
    wi: str
    runs: str

    def all(self) -> list[str]:
        return [self.ck, self.ix, self.ids, self.bl, self.wr, self.wi, self.runs]


_GRAPH_THREAD_KINDS = ("ck", "ix", "ids", "bl", "wr", "wi", "runs")


@lru_cache(maxsize=16384)
def _session_keys(layout: KeyLayout, user_id: str, session_id: str, epoch: int) -> SessionKeys:
    # Cached: every call of the client builds the keys of its session.
    return layout._build_session(user_id, session_id, epoch)


def namespace_root_patterns() -> list[str]:
    """SCAN patterns that, together, match a user root key of every namespace
    holding users (and a few other keys: check matches with ``namespace_of``)."""
    return [f"*:{{u:*:{kind}" for kind in USER_ROOT_KINDS]


def namespace_of(key: str | bytes) -> str | None:
    """The namespace of a user root key (a match of
    ``namespace_root_patterns``), None for any other key."""
    try:
        text = key.decode("utf-8") if isinstance(key, bytes) else key
        namespace, sep, _ = text.partition(":{u:")
        if not sep:
            return None
        found = KeyLayout(namespace).parse_user_root(text)
    except (InvalidInput, UnicodeDecodeError):
        return None
    return None if found is None else namespace


def worker_registry_key(queue: str) -> str:
    """ZSET of a queue's workers, scored by their last heartbeat (ms)."""
    return f"{queue}:workers"


def worker_health_key(queue: str, name: str) -> str:
    """arq's ``health_check_key`` of one worker of ``queue``."""
    return f"{queue}:health-check:{name}"


def worker_runs_key(queue: str, name: str) -> str:
    """What one worker of ``queue`` runs: its namespaces and plug-in names."""
    return f"{queue}:runs:{name}"


def user_digest(namespace: str, user_id: str) -> str:
    """A short digest naming the user on the queue side (job ids), so that
    queue keys never carry a user id."""
    raw = f"{namespace}\0{user_id}".encode()
    return hashlib.blake2b(raw, digest_size=12).hexdigest()
