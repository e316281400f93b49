"""What the long-term store holds: its items, their namespaces, and the stored record.

``Item`` (and ``SearchItem``, ``ItemVersion``) are what the store returns. A
namespace is a non-empty tuple of labels whose first label is the tenant.

Stored, one version of an item is a record (see ``redismem.core.keys``)::

    b"<version>,<created_ms>,<updated_ms>,<p|d>," + msgpack([RECORD_SCHEMA, value, source, index])

``p`` is a put (``value`` a dict), ``d`` a delete, a tombstone (``value``
nil, no ``index``). ``index`` is the ``index`` the put was given (nil: every
string, false: none, or field paths). Records stored before puts kept it
lack it and read as before; redismem of that time reads no record holding
it. The Lua scripts write the numbers and the op; Python packs the payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict

from redismem.core.codec import ms_to_datetime
from redismem.core.keys import parse_store_ref, validate_id
from redismem.errors import CorruptData, InvalidInput

__all__ = [
    "RECORD_SCHEMA",
    "Item",
    "ItemVersion",
    "Record",
    "SearchItem",
    "check_namespace",
    "check_pattern",
    "decode_record",
    "item_fields",
    "namespace_matches",
    "record_payload",
    "search_item",
]

#: Version of the stored record payload ``[schema, value, source]``.
RECORD_SCHEMA = 1


# -- models -------------------------------------------------------------------------


class Item(BaseModel):
    """One stored item: a JSON object under a namespace and key."""

    model_config = ConfigDict(extra="forbid")

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    #: When the item was first put (after a delete: put again).
    created_at: datetime
    #: When this version was put (a tombstone: when it was deleted).
    updated_at: datetime
    #: 1 on the first put, one more per put (and per delete).
    version: int
    #: Provenance given to ``put``, e.g. the session and message ids.
    source: dict[str, Any] | None = None


class SearchItem(Item):
    """An item found by ``search``; ``score`` is its relevance to the query
    (None without a query)."""

    score: float | None = None


class ItemVersion(Item):
    """One version in an item's ``history``; a delete is a version too, a
    tombstone with ``deleted`` set and an empty ``value``."""

    deleted: bool = False


# -- namespaces ---------------------------------------------------------------------


def check_namespace(value: object, name: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    """A tuple of non-empty str labels; empty only when ``allow_empty``."""
    if not isinstance(value, tuple):
        raise InvalidInput(f"{name} must be a tuple of str labels, not {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidInput(f"{name} must not be empty: its first label is the tenant")
    for position, label in enumerate(value):
        validate_id(label, f"{name}[{position}]")
    return tuple(value)


def check_pattern(value: object, name: str) -> tuple[str, ...] | None:
    """A namespace pattern of ``list_namespaces`` (``"*"`` any one label), or None."""
    if value is None:
        return None
    return check_namespace(value, name, allow_empty=True)


def namespace_matches(
    namespace: tuple[str, ...], prefix: tuple[str, ...] | None, suffix: tuple[str, ...] | None
) -> bool:
    """Whether ``namespace`` starts with ``prefix`` and ends with ``suffix``
    (None: any), ``"*"`` in a pattern matching any one label."""
    if prefix is not None and (
        len(namespace) < len(prefix) or not _labels_match(namespace[: len(prefix)], prefix)
    ):
        return False
    if suffix is not None and suffix:
        if len(namespace) < len(suffix):
            return False
        return _labels_match(namespace[len(namespace) - len(suffix) :], suffix)
    return True


def _labels_match(labels: Sequence[str], pattern: Sequence[str]) -> bool:
    return all(p == "*" or p == label for label, p in zip(labels, pattern, strict=True))


# -- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One stored version of an item, decoded."""

    version: int
    created_ms: int
    updated_ms: int
    deleted: bool
    value: dict[str, Any]
    source: dict[str, Any] | None
    #: The ``index`` the put was given; None for a tombstone, and for a put
    #: stored before puts kept it (then ``index_kept`` is False).
    index: list[str] | Literal[False] | None = None
    index_kept: bool = False


def record_payload(
    value: dict[str, Any] | None,
    source: dict[str, Any] | None,
    index: list[str] | Literal[False] | None = None,
) -> bytes:
    """The msgpack part of a record: a put's value and ``index``, or None
    (and no index) for a tombstone."""
    fields = [RECORD_SCHEMA, value, source] + ([] if value is None else [index])
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def decode_record(key: str, raw: bytes) -> Record:
    """A stored record; ``CorruptData`` naming ``key`` if unreadable."""
    try:
        version, created, updated, op, payload = raw.split(b",", 4)
        schema, value, source, *kept = msgpack.unpackb(payload, raw=False)
        deleted = op == b"d"
        index = kept[0] if kept else None
        if (
            schema != RECORD_SCHEMA
            or op not in (b"p", b"d")
            or type(value) is not (type(None) if deleted else dict)
            or not (source is None or type(source) is dict)
            or len(kept) > (0 if deleted else 1)
            or not (index is None or index is False or _paths(index))
        ):
            raise ValueError(f"unexpected record layout (schema {schema!r}, op {op!r})")
        numbers = int(version), int(created), int(updated)
        return Record(*numbers, deleted, value or {}, source, index, bool(kept))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"store record: {exc}") from exc


def _paths(index: object) -> bool:
    return type(index) is list and all(type(path) is str and path for path in index)


def item_fields(namespace: tuple[str, ...], key: str, record: Record) -> dict[str, Any]:
    """The fields of an ``Item`` for one version of it."""
    return {
        "namespace": namespace,
        "key": key,
        "value": record.value,
        "created_at": ms_to_datetime(record.created_ms),
        "updated_at": ms_to_datetime(record.updated_ms),
        "version": record.version,
        "source": record.source,
    }


def search_item(ref: str, key: str, record: Record, score: float | None) -> SearchItem:
    """The ``SearchItem`` of the item ``ref`` (read at Redis key ``key``)."""
    try:
        namespace, item_key = parse_store_ref(ref)
    except InvalidInput as exc:
        raise CorruptData(key, f"bad item ref {ref!r}") from exc
    return SearchItem(**item_fields(namespace, item_key, record), score=score)
