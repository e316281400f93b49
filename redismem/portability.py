"""Everything of one user as one JSON document, and back: ``export_user`` and
``import_user`` (the server's ``/users/{u}/export`` and ``/import``, the CLI's
``redismem export`` and ``redismem import``).

The document (format ``redismem.user/1``, plain JSON; see ``UserDocument``)::

    {"format": "redismem.user/1", "namespace": "...", "user_id": "...",
     "exported_at": "...",
     "sessions":  [{"session_id", "created_at", "expires_at", "tags",
                    "entries": [{"id", "created_at", "agent_name", "tags",
                                 "token_count", "messages": [...]}]}],
     "summaries": {"<session id>": {"text", "message_count", "summarized_until",
                                    "updated_at"}},
     "memories":  [<item>...],   # the items of the user's memories
     "store":     [<item>...]}   # every other store item of the user

An item is ``{"namespace", "key", "index", "expires_at", "versions": [{"version",
"created_at", "updated_at", "deleted", "value", "source"}]}``: its whole history,
oldest first, delete tombstones included (items deleted and not purged are
exported too). ``memories`` holds the items under ``(user, "memories")`` (the
records: each version's value is the record as it was, with the ``change``
and ``reason`` of that version), ``(user, "memories-chunks", ...)`` (the
searchable chunks of documents) and ``(user, "memories-keys")`` (the lookups
that find duplicates and the current value of a fact): restored together,
they behave as they did. ``index`` is the ``index`` the item's latest put
was given (``None``: every string; ``false``: none; else field paths); for
items put before the store kept it, found from the terms the store holds
(see ``LongTermStore.histories``, which reads the items).

**What the import restores.** Into the ``Memory`` it is given (any
namespace), for ``user_id`` or the document's user:

* sessions: every entry still holding messages, in order, with its
  messages (system messages too), ``tags``, ``agent_name`` and
  ``created_at`` (to the millisecond); so the sessions' tags, ``created_at``
  (that of their first entry) and, for a session of which nothing was
  trimmed or folded into the summary, the message ids. Each session
  expires no sooner than it did (``expires_at``; none: never), and at most
  1/32 of its time left later (the slack of the sessions' sliding TTL),
  until its next write sets the client's own ``ttl``. Token counts are the
  importing client's tokenizer's.
* items (memories and store): every version in order, each put with its
  ``value``, ``source`` and ``index``, each tombstone as a delete with its
  ``source``, so the version numbers, the ``deleted`` flags, the search
  index and the order of ``search`` without a query (newest first) are as
  exported; every item expires when it did (``expires_at``). Memory records
  keep their ``created_at`` and every field of every version (statuses,
  links, sources, ``superseded_at``...).

**What it does not.** Times the server sets are those of the import: the
items' ``created_at``/``updated_at`` (so a record's ``updated_at`` and the
``at`` of its history), the sessions' ``accessed_at``. Summaries are not
written (there is no way to write one but the workers'): the workers
summarize the imported messages again, so what a summary held of messages
already folded into it and removed from the session (``compact``) is in the
document but not in the memory after the import; the recall index, too, is
the workers' to rebuild from the imported messages. Entries left with no
message (all trimmed or compacted) are not written. With extraction on, the
workers extract memories from the imported messages as from any write
(a memory held already is found as a duplicate: it gains a source).

**Idempotent.** Importing the same document again writes nothing more:
every write has an id derived from the document (``import:`` and a digest of
what it writes), and before writing, the import reads what is there. A
session's entries after the last one it holds already are written (so an
import cut short resumes where it stopped); an item's versions after those
it holds already, if they are the document's first ones (same numbers,
values, sources, tombstones); an item with another history is left as it is
and named in the report's ``conflicts``. A session or item whose
``expires_at`` has passed is not imported (counted as ``expired``).

**Checked first.** A document of another format, or malformed in any way
these functions can see (shape, types, ids, tags, values that would not
round-trip, index paths, namespaces of another user, duplicates), is
refused with ``InvalidInput`` before anything is written. Limits of the
importing client (``max_message_bytes``) are checked by each write: an
import stopped by one resumes, once fixed, where it stopped.

The export is consistent per session and per batch of items, not for the
user as a whole at one instant; like any read, it may slide the sessions'
expiry (``refresh_ttl_on_read``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from redismem.checks import check_tags, check_time_ms
from redismem.core.keys import validate_id
from redismem.errors import InvalidInput, VersionConflict
from redismem.longterm.items import check_namespace
from redismem.longterm.jsonpaths import check_index
from redismem.longterm.memory_items import CHUNKS, LOOKUPS, RECORDS
from redismem.models import Message, Summary
from redismem.values import check_json_value

if TYPE_CHECKING:
    from redismem.client import Memory
    from redismem.longterm.store import ItemHistory

__all__ = ["USER_FORMAT", "ImportReport", "UserDocument", "export_user", "import_user"]

#: The format (and its version) of the document ``export_user`` makes.
USER_FORMAT = "redismem.user/1"
#: Second labels of the namespaces that hold the memories (see ``longterm.memory_items``).
MEMORY_LABELS = frozenset({RECORDS, CHUNKS, LOOKUPS})


# -- the document -----------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExportedEntry(_Strict):
    """One write of a session: its messages still stored, and its metadata."""

    id: str
    created_at: AwareDatetime
    agent_name: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    token_count: int = 0
    messages: list[Message]


class ExportedSession(_Strict):
    session_id: str
    created_at: AwareDatetime
    expires_at: AwareDatetime | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    entries: list[ExportedEntry]


class ExportedVersion(_Strict):
    """One version of a store item (a tombstone: ``deleted``, empty ``value``)."""

    version: int = Field(ge=1)
    created_at: AwareDatetime
    updated_at: AwareDatetime
    deleted: bool = False
    value: dict[str, Any] = Field(default_factory=dict)
    source: dict[str, Any] | None = None


class ExportedItem(_Strict):
    """A store item with its whole history, oldest first."""

    namespace: list[str] = Field(min_length=1)
    key: str
    index: list[str] | Literal[False] | None = None
    expires_at: AwareDatetime | None = None
    versions: list[ExportedVersion] = Field(min_length=1)


class UserDocument(_Strict):
    """Everything of one user (see the module docstring)."""

    format: str
    namespace: str
    user_id: str
    exported_at: AwareDatetime
    sessions: list[ExportedSession] = Field(default_factory=list)
    summaries: dict[str, Summary] = Field(default_factory=dict)
    memories: list[ExportedItem] = Field(default_factory=list)
    store: list[ExportedItem] = Field(default_factory=list)


class ImportReport(BaseModel):
    """What ``import_user`` did."""

    user_id: str
    #: Entries written, and entries the sessions held already.
    entries_written: int = 0
    entries_present: int = 0
    #: Sessions with at least one entry written.
    sessions_written: int = 0
    #: Items with at least one version written, those versions, and items
    #: whose every version was there already.
    items_written: int = 0
    versions_written: int = 0
    items_present: int = 0
    #: Sessions and items not imported: their ``expires_at`` had passed.
    expired: int = 0
    #: Items (and sessions) left as they were: the memory holds another history.
    conflicts: list[str] = Field(default_factory=list)


# -- export -----------------------------------------------------------------------------


async def export_user(mem: Memory, user_id: str) -> dict[str, Any]:
    """Everything of ``user_id`` as one JSON-serializable document (format
    ``redismem.user/1``; see the module docstring)."""
    uid = validate_id(user_id, "user_id")
    exported_at = datetime.now(UTC)
    sessions: list[ExportedSession] = []
    summaries: dict[str, Summary] = {}
    for info in sorted(await mem.sessions(user_id=uid), key=lambda s: s.session_id):
        sid = info.session_id
        entries = await mem.entries(session_id=sid, user_id=uid)
        summary = await mem.summary(session_id=sid, user_id=uid)
        if summary is not None:
            summaries[sid] = summary
        if not entries:
            continue  # expired or cleared since it was listed
        sessions.append(
            ExportedSession(
                session_id=sid,
                created_at=info.created_at,
                expires_at=info.expires_at,
                tags=info.tags,
                entries=[
                    ExportedEntry(
                        id=entry.id,
                        created_at=entry.metadata.created_at,
                        agent_name=entry.metadata.agent_name,
                        tags=entry.metadata.tags,
                        token_count=entry.metadata.token_count,
                        messages=entry.messages,
                    )
                    for entry in entries
                ],
            )
        )
    items = await _store_items(mem, uid)
    document = UserDocument(
        format=USER_FORMAT,
        namespace=mem.layout.namespace,
        user_id=uid,
        exported_at=exported_at,
        sessions=sessions,
        summaries=summaries,
        memories=[i for i in items if _is_memory(i.namespace)],
        store=[i for i in items if not _is_memory(i.namespace)],
    )
    return document.model_dump(mode="json")


def _is_memory(namespace: Sequence[str]) -> bool:
    return len(namespace) > 1 and namespace[1] in MEMORY_LABELS


async def _store_items(mem: Memory, uid: str) -> list[ExportedItem]:
    """Every store item of the tenant ``uid`` with a value or a history
    (deleted ones too)."""
    return [_exported(item) for item in await mem.store.histories((uid,))]


def _exported(item: ItemHistory) -> ExportedItem:
    return ExportedItem(
        namespace=list(item.namespace),
        key=item.key,
        index=item.index,
        expires_at=item.expires_at,
        versions=[
            ExportedVersion(
                version=v.version,
                created_at=v.created_at,
                updated_at=v.updated_at,
                deleted=v.deleted,
                value=v.value,
                source=v.source,
            )
            for v in item.versions
        ],
    )


# -- import -----------------------------------------------------------------------------


async def import_user(
    mem: Memory, document: Mapping[str, Any] | UserDocument, *, user_id: str | None = None
) -> ImportReport:
    """Write what ``document`` (made by ``export_user``) holds into ``mem``,
    for ``user_id`` (default: the document's user). Idempotent; ``InvalidInput``
    before anything is written for a document of another format or malformed
    (see the module docstring, which says what is restored and what is not)."""
    doc = parse_document(document)
    uid = validate_id(doc.user_id if user_id is None else user_id, "user_id")
    report = ImportReport(user_id=uid)
    # Items first, oldest update first (the store's newest-first order comes
    # back), then the sessions: memories the workers extract from the
    # imported messages then meet the imported ones.
    items = sorted([*doc.memories, *doc.store], key=lambda i: i.versions[-1].updated_at)
    for item in items:
        await _import_item(mem, uid, item, report)
    for session in doc.sessions:
        await _import_session(mem, uid, session, report)
    return report


def parse_document(document: Mapping[str, Any] | UserDocument) -> UserDocument:
    """``document`` checked (see the module docstring): ``InvalidInput`` if it
    is not a well-formed ``redismem.user/1`` document."""
    if isinstance(document, UserDocument):
        document = document.model_dump(mode="json")
    if not isinstance(document, Mapping):
        raise InvalidInput(f"a user document must be a JSON object, not {type(document).__name__}")
    found = document.get("format")
    if found != USER_FORMAT:
        raise InvalidInput(f"unknown document format {found!r}; this version reads {USER_FORMAT!r}")
    try:
        doc = UserDocument.model_validate(document)
    except ValidationError as exc:
        raise InvalidInput(f"not a valid {USER_FORMAT} document: {exc}") from exc
    validate_id(doc.user_id, "user_id")
    seen: set[str] = set()
    for session in doc.sessions:
        sid = validate_id(session.session_id, "session_id")
        if sid in seen:
            raise InvalidInput(f"session {sid!r} is in the document twice")
        seen.add(sid)
        for entry in session.entries:
            check_tags(entry.tags)
            for n, message in enumerate(entry.messages):
                _check_value(message.metadata, f"session {sid!r}, entry {entry.id!r}, message {n}")
    for sid in doc.summaries:
        validate_id(sid, "summaries key")
    items: set[tuple[tuple[str, ...], str]] = set()
    for part, listed in (("memories", doc.memories), ("store", doc.store)):
        for item in listed:
            namespace = check_namespace(tuple(item.namespace), f"{part} item namespace")
            where = f"{part} item {item.key!r} of {namespace!r}"
            key = validate_id(item.key, f"{part} item key")
            if namespace[0] != doc.user_id:
                raise InvalidInput(f"{where} is not of the user {doc.user_id!r}")
            if _is_memory(namespace) != (part == "memories"):
                raise InvalidInput(
                    f"{where} belongs in {'store' if part == 'memories' else 'memories'}"
                )
            if (namespace, key) in items:
                raise InvalidInput(f"{where} is in the document twice")
            items.add((namespace, key))
            check_index(item.index)
            numbers = [v.version for v in item.versions]
            if numbers != sorted(set(numbers)):
                raise InvalidInput(f"{where}: its versions are not in increasing order")
            for version in item.versions:
                if version.deleted and version.value:
                    raise InvalidInput(f"{where}: the tombstone {version.version} holds a value")
                _check_value(version.value, f"{where}, version {version.version}, value")
                if version.source is not None:
                    _check_value(version.source, f"{where}, version {version.version}, source")
    return doc


def _check_value(value: object, where: str) -> None:
    try:
        check_json_value(value, where)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def _write_id(*parts: Any) -> str:
    """A write id derived from what is written (the same document imported
    again sends the same ids; a changed version or entry, another one)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "import:" + hashlib.sha256(blob.encode()).hexdigest()[:32]


def _seconds_left(deadline: datetime | None) -> float | None:
    """Seconds until ``deadline`` (None: none); 0 once it has passed."""
    if deadline is None:
        return None
    return max(0.0, deadline.timestamp() - time.time())


def _same(held: Any, version: ExportedVersion) -> bool:
    return bool(
        held.version == version.version
        and held.deleted == version.deleted
        and held.value == version.value
        and held.source == version.source
    )


async def _import_item(mem: Memory, uid: str, item: ExportedItem, report: ImportReport) -> None:
    namespace = (uid, *item.namespace[1:])
    where = f"item {item.key!r} of {namespace!r}"
    store = mem.store
    if _seconds_left(item.expires_at) == 0.0:
        report.expired += 1
        return
    held = await store.history(namespace, item.key)
    if len(held) > len(item.versions) or not all(
        _same(h, v) for h, v in zip(held, item.versions, strict=False)
    ):
        report.conflicts.append(f"{where}: it has another history")
        return
    if len(held) == len(item.versions):
        report.items_present += 1
        return
    live = held[-1].version if held and not held[-1].deleted else 0
    for version in item.versions[len(held) :]:
        wid = _write_id("item", item.namespace[1:], item.key, version.model_dump(mode="json"))
        if version.deleted:
            await store.delete(namespace, item.key, source=version.source, write_id=wid)
            live = 0
        else:
            ttl = _seconds_left(item.expires_at)
            try:
                put = await store.put(
                    namespace,
                    item.key,
                    version.value,
                    index=item.index,
                    ttl=None if ttl is None else max(ttl, 0.001),
                    source=version.source,
                    write_id=wid,
                    if_version=live,
                )
            except VersionConflict:
                report.conflicts.append(f"{where}: changed while it was imported")
                return
            live = put.version
        report.versions_written += 1
    report.items_written += 1


def _entry_mark(created_at: datetime, agent_name: str | None, tags: Mapping[str, str]) -> str:
    """What tells a session's entry apart: its time (ms), agent and tags."""
    return json.dumps([check_time_ms(created_at, "created_at"), agent_name, sorted(tags.items())])


async def _import_session(
    mem: Memory, uid: str, session: ExportedSession, report: ImportReport
) -> None:
    sid = session.session_id
    entries = [e for e in session.entries if e.messages]
    if not entries:
        return
    if _seconds_left(session.expires_at) == 0.0:
        report.expired += 1
        return
    held = {
        _entry_mark(e.metadata.created_at, e.metadata.agent_name, e.metadata.tags)
        for e in await mem.entries(session_id=sid, user_id=uid)
    }
    start = 0
    for n, entry in enumerate(entries):
        if _entry_mark(entry.created_at, entry.agent_name, entry.tags) in held:
            start = n + 1
    report.entries_present += start
    args = mem.summarize_args()
    settings = args.encode() if args else ""
    for entry in entries[start:]:
        left = _seconds_left(session.expires_at)
        await mem.write_entry(
            entry.messages,
            session_id=sid,
            user_id=uid,
            tags=entry.tags,
            agent_name=entry.agent_name,
            summarize=settings,
            enqueue=True,
            store_system=True,
            ttl_ms=0 if left is None else max(1, int(left * 1000)),
            write_id=_write_id("entry", sid, entry.model_dump(mode="json")),
            created_at=entry.created_at,
        )
        report.entries_written += 1
    if start < len(entries):
        report.sessions_written += 1
