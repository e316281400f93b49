"""Stored formats: msgpack with a schema version, never pickle.

A stored message (an element of the ``msgs`` list) is::

    b"<token_count>|" + msgpack([MESSAGE_HEAD + role, content, name,
                                 tool_calls, tool_call_id, metadata])

with trailing empty fields left out. The first field is one byte holding
both the format and the role (format 2); format 1, still read, stored
``[1, role, content, ...]``, one byte more per message. The token count sits in a short text
prefix so Lua scripts can budget and trim without decoding msgpack (the
embedded backend's Lua has no cmsgpack). A stored entry (one write) is::

    b"<first_seq>,<created_ms>," + msgpack([version, count, tokens, agent, tags])

where the prefix is added inside the write script, which owns the sequence
and the clock. Message ids are the session sequence, zero padded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgpack

from redismem.errors import CorruptData, InvalidInput
from redismem.models import ROLES, Message, ToolCall, stored_message, stored_tool_call

__all__ = [
    "MESSAGE_HEAD",
    "ROLE_CODE",
    "SCHEMA_VERSION",
    "DecodedEntry",
    "decode_entry",
    "parse_covering",
    "decode_messages",
    "encode_entry_tail",
    "encode_message",
    "message_id",
    "ms_to_datetime",
]

SCHEMA_VERSION = 1
#: The first field of a stored message (format 2) is this plus its role code.
MESSAGE_HEAD = 16
#: The stored code of each role.
ROLE_CODE = {role: i for i, role in enumerate(ROLES)}
_ID_WIDTH = 12


def message_id(seq: int) -> str:
    return f"{seq:0{_ID_WIDTH}d}"


def seq_of(message_id_: str) -> int:
    return int(message_id_)


def ms_to_datetime(ms: int | float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class _Packers(threading.local):
    # A Packer per thread, reused: msgpack.packb builds one per call, which
    # costs more than packing a message (a failed pack resets the buffer).
    def __init__(self) -> None:
        self.packer = msgpack.Packer(use_bin_type=True, datetime=False)


_packers = _Packers()


def _pack(obj: Any) -> bytes:
    try:
        return _packers.packer.pack(obj)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInput(f"value cannot be stored (msgpack): {exc}") from exc


def encode_message(message: Message, token_count: int) -> bytes:
    fields: list[Any] = [
        MESSAGE_HEAD + ROLE_CODE[message.role],
        message.content,
        message.name,
        [[c.id, c.name, c.arguments] for c in message.tool_calls] or None,
        message.tool_call_id,
        message.metadata or None,
    ]
    while fields[-1] is None:
        fields.pop()
    return b"%d|" % token_count + _pack(fields)


def decode_messages(
    raw: Sequence[bytes], first_seq: int, created: Sequence[tuple[int, int]], key: str
) -> list[Message]:
    """Decode stored messages ``first_seq, first_seq + 1, ...``. ``created`` is
    ``(first_seq, created_ms)`` of the entries covering them, ascending; a
    message takes its entry's time. Raises ``CorruptData`` for an element
    that is not a stored message of a known schema version."""
    out: list[Message] = []
    # Entry times, converted once per entry and only for entries in use.
    starts = [first for first, _ in created]
    entry = -1
    next_start = starts[0] if starts else None
    when: datetime | None = None
    seq = first_seq
    unpackb = msgpack.unpackb
    try:
        for seq, element in enumerate(raw, first_seq):
            bar = element.find(b"|")
            tokens = element[:bar]
            if bar <= 0 or not tokens.isdigit():
                # The scripts read the prefix as ASCII digits; int() would also
                # accept spaces, signs and underscores.
                raise ValueError("no token prefix")
            fields = unpackb(element[bar + 1 :], raw=False, strict_map_key=False)
            while next_start is not None and next_start <= seq:
                entry += 1
                when = ms_to_datetime(created[entry][1])
                next_start = starts[entry + 1] if entry + 1 < len(starts) else None
            out.append(_message(fields, f"{seq:0{_ID_WIDTH}d}", int(tokens), when))
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"message {seq}: {exc}") from exc
    return out


_REQUIRED_FIELDS = frozenset({"role", "content", "id", "token_count"})


def _message(fields: Any, id_: str, tokens: int, when: datetime | None) -> Message:
    if type(fields) is not list or not fields or type(fields[0]) is not int:
        raise ValueError("not a message record of a known schema version")
    head = fields[0]
    if MESSAGE_HEAD <= head < MESSAGE_HEAD + len(ROLES) and 2 <= len(fields) <= 6:
        fields += [None] * (6 - len(fields))
        role_code = head - MESSAGE_HEAD
        _, content, name, calls, call_id, metadata = fields
    elif head == SCHEMA_VERSION and 3 <= len(fields) <= 7:  # format 1
        fields += [None] * (7 - len(fields))
        _, role_code, content, name, calls, call_id, metadata = fields
        if type(role_code) is not int or not 0 <= role_code < len(ROLES):
            raise ValueError(f"unknown role code {role_code!r}")
    else:
        raise ValueError("not a message record of a known schema version")
    if type(content) is not str:
        raise ValueError("content is not a str")
    fields_set = set(_REQUIRED_FIELDS)
    if when is not None:
        fields_set.add("created_at")
    if name is not None:
        _check_str(name, "name")
        fields_set.add("name")
    tool_calls = []
    if calls:
        tool_calls = [_tool_call(call) for call in calls]
        fields_set.add("tool_calls")
    if call_id is not None:
        _check_str(call_id, "tool_call_id")
        fields_set.add("tool_call_id")
    if metadata:
        if type(metadata) is not dict:
            raise ValueError("metadata is not a map")
        fields_set.add("metadata")
    values = {
        "role": ROLES[role_code],
        "content": content,
        "name": name,
        "tool_calls": tool_calls,
        "tool_call_id": call_id,
        "metadata": metadata or {},
        "id": id_,
        "created_at": when,
        "token_count": tokens,
    }
    return stored_message(values, fields_set)


def _tool_call(call: Any) -> ToolCall:
    if type(call) is not list or len(call) != 3:
        raise ValueError("a tool call is not [id, name, arguments]")
    call_id, name, arguments = call
    _check_str(call_id, "tool call id")
    _check_str(name, "tool call name")
    if type(arguments) is not str and type(arguments) is not dict:
        raise ValueError("tool call arguments are neither a str nor a map")
    return stored_tool_call(call_id, name, arguments)


def _check_str(value: Any, what: str) -> None:
    if type(value) is not str:
        raise ValueError(f"{what} is not a str")


def parse_covering(covering: Sequence[bytes], key: str) -> list[tuple[int, int]]:
    """``(first_seq, created_ms)`` ascending, from the scripts' newest-first
    ``b"first_seq,created_ms"`` list."""
    try:
        out = []
        for item in reversed(covering):
            first, created = item.split(b",")
            out.append((int(first), int(created)))
        return out
    except ValueError as exc:
        raise CorruptData(key, f"entry record: {exc}") from exc


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
