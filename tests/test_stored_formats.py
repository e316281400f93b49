"""The stored formats, byte for byte, and message times (see docs/mutation-testing.md).

``redismem/codec.py`` documents the stored message and entry records; data
written by one release must stay readable by the next, so the bytes are
pinned here, through ``Memory`` and a raw client on the same server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

from redismem import ROLES, CorruptData, KeyLayout, Message, ToolCall
from redismem.core import codec


def _pack(fields: Any) -> bytes:
    return msgpack.packb(fields, use_bin_type=True)


async def test_stored_message_records_are_the_documented_bytes(make_memory, raw, namespace):
    mem = await make_memory()
    messages = [
        Message(role="user", content="hello"),
        Message(
            role="assistant",
            content="",
            name="bot",
            tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"q": 1}')],
            metadata={"k": "v"},
        ),
        Message(role="tool", content="42", tool_call_id="c1"),
    ]
    await mem.write(messages, session_id="s")
    stored = await mem.read(session_id="s")
    keys = KeyLayout(namespace).session("default", "s")
    elements = await raw.lrange(keys.msgs, 0, -1)

    tokens = [m.token_count for m in stored]
    head = codec.MESSAGE_HEAD
    assert elements == [
        # One byte holds format and role; trailing empty fields are left out.
        b"%d|" % tokens[0] + _pack([head + ROLES.index("user"), "hello"]),
        b"%d|" % tokens[1]
        + _pack(
            [
                head + ROLES.index("assistant"),
                "",
                "bot",
                [["c1", "lookup", '{"q": 1}']],
                None,
                {"k": "v"},
            ]
        ),
        b"%d|" % tokens[2] + _pack([head + ROLES.index("tool"), "42", None, None, "c1"]),
    ]


async def test_stored_entry_records_are_the_documented_bytes(make_memory, raw, namespace):
    mem = await make_memory()
    await mem.write([Message(role="user", content="a")], session_id="s")
    await mem.write(
        [Message(role="user", content="b"), Message(role="assistant", content="c")],
        session_id="s",
        agent_name="planner",
        tags={"team": "x"},
    )
    entries = await mem.entries(session_id="s")
    keys = KeyLayout(namespace).session("default", "s")
    records = await raw.lrange(keys.entries, 0, -1)

    def expected(entry: Any, first_seq: int, body: list[Any]) -> bytes:
        created_ms = round(entry.metadata.created_at.timestamp() * 1000)
        return b"%d,%d," % (first_seq, created_ms) + _pack(body)

    assert records == [
        expected(entries[0], 1, [1, 1, entries[0].metadata.token_count]),
        expected(entries[1], 2, [1, 2, entries[1].metadata.token_count, "planner", {"team": "x"}]),
    ]


@pytest.mark.parametrize("fmt", [1, 2])
async def test_records_in_the_documented_formats_are_read_back(make_memory, raw, namespace, fmt):
    # Data as each format writes it (format 1: [1, role, content, ...], the
    # one sessions written before hold; format 2: [MESSAGE_HEAD + role,
    # content, ...]), put in place by hand: a reader that changed a format
    # (version, role codes, field order) fails here.
    mem = await make_memory()
    await mem.write(
        [Message(role="user", content="x"), Message(role="user", content="y")], session_id="s"
    )
    keys = KeyLayout(namespace).session("default", "s")

    def head(role: str) -> list[Any]:
        code = ROLES.index(role)
        return [1, code] if fmt == 1 else [codec.MESSAGE_HEAD + code]

    await raw.lset(keys.msgs, 0, b"7|" + _pack([*head("system"), "be brief"]))
    await raw.lset(
        keys.msgs,
        1,
        b"9|" + _pack([*head("assistant"), "", None, [["c9", "f", "{}"]], None, {"m": 1}]),
    )
    first, second = await mem.read(session_id="s")
    assert (first.role, first.content, first.token_count) == ("system", "be brief", 7)
    assert second.role == "assistant" and second.token_count == 9
    assert [(c.id, c.name, c.arguments) for c in second.tool_calls] == [("c9", "f", "{}")]
    assert second.metadata == {"m": 1}


async def test_each_message_carries_the_time_of_its_own_write(make_memory):
    mem = await make_memory()
    sizes = [2, 1, 3]
    for n, size in enumerate(sizes):
        await mem.write(
            [Message(role="user", content=f"w{n}m{i}") for i in range(size)], session_id="s"
        )
        await asyncio.sleep(0.005)  # distinct write times
    entries = await mem.entries(session_id="s")
    times = [e.metadata.created_at for e in entries]
    assert len(set(times)) == 3
    written_at = {m.id: e.metadata.created_at for e in entries for m in e.messages}

    everything = await mem.read(session_id="s")
    assert [m.created_at for m in everything] == [written_at[m.id] for m in everything]
    assert [m.created_at for m in everything] == [times[0]] * 2 + [times[1]] + [times[2]] * 3
    # A read starting inside an entry still dates each message by its own write.
    for limit in (1, 2, 3, 4, 5):
        tail = await mem.read(session_id="s", limit=limit)
        assert [m.created_at for m in tail] == [written_at[m.id] for m in tail]


async def test_entry_records_whose_body_holds_commas_decode(make_memory):
    # The record is "first,created," + msgpack: only the first two commas
    # separate fields; the msgpack body may contain comma bytes of its own.
    mem = await make_memory()
    tags = {"a,b": "c,d", ",": ",,"}
    await mem.write([Message(role="user", content="x")], session_id="s", tags=tags)
    await mem.write([Message(role="user", content="y")], session_id="s", agent_name="a,gent")
    entries = await mem.entries(session_id="s")
    assert [e.metadata.tags for e in entries] == [tags, {}]
    assert [e.metadata.agent_name for e in entries] == [None, "a,gent"]


@pytest.mark.parametrize(
    "body",
    [
        [2, 1, 1],  # unknown schema version
        [1, 1],  # too short
        {"v": 1},  # not a list
    ],
    ids=["version", "short", "map"],
)
async def test_entry_records_of_an_unknown_shape_are_corrupt(make_memory, raw, namespace, body):
    mem = await make_memory()
    await mem.write([Message(role="user", content="x")], session_id="s")
    keys = KeyLayout(namespace).session("default", "s")
    await raw.lset(keys.entries, 0, b"1,1700000000000," + _pack(body))
    with pytest.raises(CorruptData):
        await mem.entries(session_id="s")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ([codec.SCHEMA_VERSION, 9, "x"], "role code"),
        ([codec.SCHEMA_VERSION, "user", "x"], "role code"),
        ([codec.SCHEMA_VERSION, 1, 5], "content"),
        ([codec.SCHEMA_VERSION, 1, "x", 5], "name"),
        ([codec.SCHEMA_VERSION, 2, "", None, [["id", "f"]]], "tool call"),
        ([codec.SCHEMA_VERSION, 2, "", None, [["id", 3, "{}"]]], "tool call name"),
        ([codec.SCHEMA_VERSION, 2, "", None, [[3, "f", "{}"]]], "tool call id"),
        ([codec.SCHEMA_VERSION, 2, "", None, [["id", "f", 7]]], "arguments"),
        ([codec.SCHEMA_VERSION, 3, "x", None, None, 8], "tool_call_id"),
        ([codec.SCHEMA_VERSION, 1, "x", None, None, None, [1]], "metadata"),
        ([codec.SCHEMA_VERSION, 1, "x", None, None, None, {}, "extra"], "schema"),
        ([codec.MESSAGE_HEAD + 4, "x"], "schema"),
        ([codec.MESSAGE_HEAD - 1, "x"], "schema"),
        ([codec.MESSAGE_HEAD], "schema"),
        ([codec.MESSAGE_HEAD, 5], "content"),
        ([codec.MESSAGE_HEAD, "x", 5], "name"),
        ([codec.MESSAGE_HEAD, "x", None, None, None, [1]], "metadata"),
        ([codec.MESSAGE_HEAD, "x", None, None, None, {}, "extra"], "schema"),
    ],
)
def test_decoding_refuses_fields_of_the_wrong_type(fields, reason):
    element = b"3|" + msgpack.packb(fields)
    with pytest.raises(CorruptData, match=reason):
        codec.decode_messages([element], 1, [], "k")


def test_decoded_messages_equal_validated_ones():
    given = Message(
        role="assistant",
        content="",
        name="bot",
        tool_calls=[ToolCall(id="c1", name="f", arguments={"a": [1, 2.5, None]})],
        metadata={"k": "v"},
    )
    [back] = codec.decode_messages([codec.encode_message(given, 4)], 7, [(7, 1_000)], "k")
    expected = given.model_copy(
        update={
            "id": codec.message_id(7),
            "token_count": 4,
            "created_at": codec.ms_to_datetime(1_000),
        }
    )
    assert back == expected
    assert back.model_dump() == expected.model_dump()
    assert back.tool_calls[0].model_fields_set == {"id", "name", "arguments"}
    assert Message.model_validate(back.model_dump()) == back
