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


#: Entry times already converted (a ``datetime`` is immutable, so shared):
#: a session read again and again, as agents do each turn, converts only its
#: new entries' times. Emptied when full.
_ENTRY_TIMES: dict[int, datetime] = {}
_ENTRY_TIMES_KEPT = 4096


def entry_time(ms: int) -> datetime:
    """``ms_to_datetime`` of an entry's created time, converted once per process."""
    when = _ENTRY_TIMES.get(ms)
    if when is None:
        if len(_ENTRY_TIMES) >= _ENTRY_TIMES_KEPT:
            _ENTRY_TIMES.clear()
        when = _ENTRY_TIMES[ms] = ms_to_datetime(ms)
    return when


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
    # The hot path of every read: a message of the usual shape (format 2,
    # role and content only) is built here directly, anything else by
    # ``_message``; both build what ``Message`` validation would.
    out: list[Message] = []
    append = out.append
    starts = [first for first, _ in created]
    entry = -1
    next_start = starts[0] if starts else None
    when: datetime | None = None
    seq = first_seq
    unpackb = msgpack.unpackb
    role_of_head = _ROLE_OF_HEAD
    try:
        for seq, element in enumerate(raw, first_seq):
            bar = element.find(b"|")
            tokens = element[:bar]
            if bar <= 0 or not tokens.isdigit():
                # The scripts read the prefix as ASCII digits; int() would also
                # accept spaces, signs and underscores.
                raise ValueError("no token prefix")
            fields = unpackb(element[bar + 1 :], raw=False, strict_map_key=False)
            if next_start is not None and next_start <= seq:
                while next_start is not None and next_start <= seq:
                    entry += 1
                    next_start = starts[entry + 1] if entry + 1 < len(starts) else None
                when = entry_time(created[entry][1])
            if (
                type(fields) is list
                and len(fields) == 2
                and type(fields[0]) is int
                and type(fields[1]) is str
                and fields[0] in role_of_head
            ):
                values: dict[str, Any] = {
                    "role": role_of_head[fields[0]],
                    "content": fields[1],
                    "name": None,
                    "tool_calls": [],
                    "tool_call_id": None,
                    "metadata": {},
                    "id": str(seq).zfill(_ID_WIDTH),
                    "created_at": when,
                    "token_count": int(tokens),
                }
                append(stored_message(values, _FIELDS_SETS[when is not None].copy()))
            else:
                append(_message(fields, str(seq).zfill(_ID_WIDTH), int(tokens), when))
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
        raise CorruptData(key, f"message {seq}: {exc}") from exc
    return out


#: The role of a format 2 record, by its first field.
_ROLE_OF_HEAD = {MESSAGE_HEAD + code: role for code, role in enumerate(ROLES)}
_REQUIRED_FIELDS = frozenset({"role", "content", "id", "token_count"})
#: The fields set of a decoded message by its shape, a bit per optional field
#: present (in this order), built once; each message gets a copy (never
#: changed here: a set copies faster than a frozenset converts).
_OPTIONAL_FIELDS = ("created_at", "name", "tool_calls", "tool_call_id", "metadata")
_FIELDS_SETS = tuple(
    set(_REQUIRED_FIELDS) | {f for bit, f in enumerate(_OPTIONAL_FIELDS) if shape >> bit & 1}
    for shape in range(1 << len(_OPTIONAL_FIELDS))
)


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
    shape = 0 if when is None else 1
    if name is not None:
        _check_str(name, "name")
        shape |= 2
    tool_calls = []
    if calls:
        tool_calls = [_tool_call(call) for call in calls]
        shape |= 4
    if call_id is not None:
        _check_str(call_id, "tool_call_id")
        shape |= 8
    if metadata:
        if type(metadata) is not dict:
            raise ValueError("metadata is not a map")
        shape |= 16
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
    return stored_message(values, _FIELDS_SETS[shape].copy())


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


def parse_covering(
    covering: Sequence[bytes], key: str, first_seq: int = 0
) -> list[tuple[int, int]]:
    """``(first_seq, created_ms)`` ascending, from entry records newest first,
    whole or their ``b"first_seq,created_ms"`` prefix (as the scripts return
    them), down to the one holding message ``first_seq`` (0: all of them)."""
    out = []
    try:
        for item in covering:
            parts = item.split(b",", 2)
            first = int(parts[0])
            out.append((first, int(parts[1])))
            if first <= first_seq:
                break
    except (ValueError, IndexError) as exc:
        raise CorruptData(key, f"entry record: {exc}") from exc
    out.reverse()
    return out


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
