"""Stored formats: msgpack with a schema version, never pickle.

A stored message (an element of the ``msgs`` list) is::

    b"<token_count>|" + msgpack([version, role, content, name, tool_calls,
                                 tool_call_id, metadata])

with trailing empty fields left out. The token count sits in a short text
prefix so Lua scripts can budget and trim without decoding msgpack (the
embedded backend's Lua has no cmsgpack). A stored entry (one write) is::

    b"<first_seq>,<created_ms>," + msgpack([version, count, tokens, agent, tags])

where the prefix is added inside the write script, which owns the sequence
and the clock. Message ids are the session sequence, zero padded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgpack

from .errors import CorruptData, InvalidInput
from .models import ROLES, Message

__all__ = [
    "SCHEMA_VERSION",
    "DecodedEntry",
    "decode_entry",
    "decode_message",
    "encode_entry_tail",
    "encode_message",
    "message_id",
    "ms_to_datetime",
]

SCHEMA_VERSION = 1
_ROLE_CODE = {role: i for i, role in enumerate(ROLES)}
_ID_WIDTH = 12


def message_id(seq: int) -> str:
    return f"{seq:0{_ID_WIDTH}d}"


def seq_of(message_id_: str) -> int:
    return int(message_id_)


def ms_to_datetime(ms: int | float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _pack(obj: Any) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True, datetime=False)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInput(f"value cannot be stored (msgpack): {exc}") from exc


def encode_message(message: Message, token_count: int) -> bytes:
    fields: list[Any] = [
        SCHEMA_VERSION,
        _ROLE_CODE[message.role],
        message.content,
        message.name,
        [[c.id, c.name, c.arguments] for c in message.tool_calls] or None,
        message.tool_call_id,
        message.metadata or None,
    ]
    while fields[-1] is None:
        fields.pop()
    return b"%d|" % token_count + _pack(fields)


def decode_message(raw: bytes, seq: int, created_ms: int | None, key: str) -> dict[str, Any]:
    """Decode one stored message into a dict ready for ``Message`` validation."""
    try:
        tokens, sep, body = raw.partition(b"|")
        if not sep or not tokens.isdigit():
            # The scripts read the prefix as ASCII digits; int() would also
            # accept spaces, signs and underscores.
            raise ValueError("no token prefix")
        fields = msgpack.unpackb(body, raw=False, strict_map_key=False)
        if not isinstance(fields, list) or len(fields) < 3:
            raise ValueError("not a message record")
        if fields[0] != SCHEMA_VERSION:
            raise ValueError(f"unknown schema version {fields[0]!r}")
        fields += [None] * (7 - len(fields))
        _, role, content, name, calls, call_id, metadata = fields[:7]
        out: dict[str, Any] = {
            "role": ROLES[role],
            "content": content,
            "id": message_id(seq),
            "token_count": int(tokens),
        }
        if created_ms is not None:
            out["created_at"] = ms_to_datetime(created_ms)
        if name is not None:
            out["name"] = name
        if calls:
            out["tool_calls"] = [{"id": c[0], "name": c[1], "arguments": c[2]} for c in calls]
        if call_id is not None:
            out["tool_call_id"] = call_id
        if metadata:
            out["metadata"] = metadata
        return out
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"message {seq}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    first_seq: int
    created_ms: int
    count: int
    token_count: int
    agent_name: str | None
    tags: dict[str, str]

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


def encode_entry_tail(
    count: int, token_count: int, agent_name: str | None, tags: dict[str, str]
) -> bytes:
    fields: list[Any] = [SCHEMA_VERSION, count, token_count, agent_name, tags or None]
    while fields[-1] is None:
        fields.pop()
    return _pack(fields)


def entry_prefix(raw: bytes, key: str) -> tuple[int, int]:
    """``(first_seq, created_ms)`` of a stored entry, as the scripts return it."""
    try:
        first, created, _ = raw.split(b",", 2)
        return int(first), int(created)
    except ValueError as exc:
        raise CorruptData(key, f"entry record: {exc}") from exc


def decode_entry(raw: bytes, key: str) -> DecodedEntry:
    try:
        first, created, body = raw.split(b",", 2)
        fields = msgpack.unpackb(body, raw=False)
        if not isinstance(fields, list) or len(fields) < 3 or fields[0] != SCHEMA_VERSION:
            raise ValueError("not an entry record")
        fields += [None] * (5 - len(fields))
        _, count, tokens, agent, tags = fields[:5]
        if not isinstance(count, int) or not isinstance(tokens, int):
            raise ValueError("counts are not integers")
        if agent is not None and not isinstance(agent, str):
            raise ValueError("agent name is not text")
        if tags is not None and not (
            isinstance(tags, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
        ):
            raise ValueError("tags are not a map of text to text")
        return DecodedEntry(int(first), int(created), count, tokens, agent, tags or {})
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"entry record: {exc}") from exc


def encode_summary(text: str, message_count: int, until_seq: int, updated_ms: int) -> bytes:
    return _pack([SCHEMA_VERSION, text, message_count, until_seq, updated_ms])


def decode_summary(raw: bytes, key: str) -> dict[str, Any]:
    """Decode a stored summary into a dict ready for ``Summary`` validation."""
    try:
        fields = msgpack.unpackb(raw, raw=False)
        if not isinstance(fields, list) or len(fields) < 5 or fields[0] != SCHEMA_VERSION:
            raise ValueError("not a summary record")
        _, text, count, until, updated = fields[:5]
        return {
            "text": str(text),
            "message_count": int(count),
            "summarized_until": message_id(int(until)),
            "updated_at": ms_to_datetime(int(updated)),
        }
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"summary record: {exc}") from exc
