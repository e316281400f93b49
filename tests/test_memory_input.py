"""Bad input is rejected with ``InvalidInput`` before anything reaches Redis,
and hostile ids stay inside their own keys."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from helpers import Snapshot, examples, keys_matching, pttls, snapshot, user
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from redismem import InvalidInput, Memory, Message, RedisMemError
from redismem.core.keys import MAX_ID_BYTES
from redismem.models import input_message
from redismem.values import MAX_DEPTH

SMALL_LIMIT = 1000


async def _assert_unchanged(
    raw: Any, namespace: str, before: Snapshot, before_ttl: dict[bytes, int]
) -> None:
    assert await snapshot(raw, f"{namespace}:*") == before
    after_ttl = await pttls(raw, f"{namespace}:*")
    # Not refreshed either: a rejected read must not slide the TTL.
    assert all(after_ttl[k] <= before_ttl[k] for k in after_ttl), (before_ttl, after_ttl)


@pytest_asyncio.fixture(loop_scope="function")
async def seeded(make_memory, raw, namespace):
    """A store with some data, a snapshot of its namespace, and clients to misuse."""
    mem = await make_memory(ttl=60)
    small = await make_memory(ttl=60, max_message_bytes=SMALL_LIMIT)
    await mem.write([user("a"), user("b")], session_id="s", tags={"k": "v"})
    await mem.write([user("c")], session_id="s2", user_id="bob")
    before = await snapshot(raw, f"{namespace}:*")
    ttl = await pttls(raw, f"{namespace}:*")
    assert before
    return mem, small, before, ttl


def _expect_invalid(exc_info: pytest.ExceptionInfo[InvalidInput]) -> None:
    assert isinstance(exc_info.value, ValueError)
    assert isinstance(exc_info.value, RedisMemError)


class _Unpackable:
    pass


def _nested(depth: int) -> Any:
    """``depth`` lists and dicts nested in one another."""
    value: Any = "leaf"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


_LOOP: dict[str, Any] = {}
_LOOP["again"] = _LOOP
#: A Message validated, then poisoned in place: write() validates it again.
_MUTATED = Message(role="user", content="x")
_MUTATED.metadata["d"] = {(1, 2): "x"}


BAD_WRITES: dict[str, tuple[Any, dict[str, Any]]] = {
    # messages
    "unknown role": ([{"role": "robot", "content": "x"}], {}),
    "missing role": ([{"content": "x"}], {}),
    "role not str": ([{"role": 1, "content": "x"}], {}),
    "unknown field": ([{"role": "user", "content": "x", "colour": "red"}], {}),
    "content int": ([{"role": "user", "content": 5}], {}),
    "content None": ([{"role": "user", "content": None}], {}),
    "content lone surrogate": ([{"role": "user", "content": "a\ud800"}], {}),
    "name lone surrogate": ([{"role": "user", "content": "a", "name": "\udfff"}], {}),
    "tool call without id": ([{"role": "assistant", "tool_calls": [{"name": "f"}]}], {}),
    "tool call args int": (
        [{"role": "assistant", "tool_calls": [{"id": "c", "name": "f", "arguments": 3}]}],
        {},
    ),
    "metadata not dict": ([{"role": "user", "content": "x", "metadata": "m"}], {}),
    "metadata unpackable": ([user("x", metadata={"o": _Unpackable()})], {}),
    "metadata datetime": ([user("x", metadata={"t": datetime(2020, 1, 1)})], {}),
    "metadata huge int": ([user("x", metadata={"n": 2**70})], {}),
    # metadata that would not come back as given (issue 7, defect 5)
    "metadata nested tuple key": ([user("x", metadata={"d": {(1, 2): "x"}})], {}),
    "metadata nested int key": ([user("x", metadata={"d": {1: "x"}})], {}),
    "metadata tuple": ([user("x", metadata={"t": (1, 2)})], {}),
    "metadata bytes": ([user("x", metadata={"b": b"x"})], {}),
    "metadata nan": ([user("x", metadata={"f": float("nan")})], {}),
    "metadata inf": ([user("x", metadata={"f": [float("-inf")]})], {}),
    "metadata nested huge int": ([user("x", metadata={"l": [-(2**63) - 1]})], {}),
    "metadata lone surrogate key": ([user("x", metadata={"d": {"\ud800": 1}})], {}),
    "metadata too deep": ([user("x", metadata={"d": _nested(MAX_DEPTH)})], {}),
    "metadata hostile depth": ([user("x", metadata={"d": _nested(100_000)})], {}),
    "metadata self reference": ([user("x", metadata=_LOOP)], {}),
    "metadata mutated after validation": ([_MUTATED], {}),
    "second message poisoned": ([user("ok"), user("x", metadata={"d": {(1,): 2}})], {}),
    "tool args nested tuple key": (
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "f", "arguments": {"d": {(1,): 2}}}],
            }
        ],
        {},
    ),
    "tool args nan": (
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "f", "arguments": {"x": float("nan")}}],
            }
        ],
        {},
    ),
    # content: only an assistant message with tool calls may leave it out
    "user without content": ([{"role": "user"}], {}),
    "user without content, with metadata": ([{"role": "user", "metadata": {"k": "v"}}], {}),
    "tool result without content": ([{"role": "tool", "tool_call_id": "c"}], {}),
    "system without content": ([{"role": "system"}], {}),
    "assistant without content or tool calls": ([{"role": "assistant"}], {}),
    "assistant tool call content None": (
        [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "name": "f"}]}],
        {},
    ),
    "tool args unpackable": (
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "f", "arguments": {"s": {1, 2}}}],
            }
        ],
        {},
    ),
    "item is a str": (["hello"], {}),
    "item is an int": ([42], {}),
    "item is None": ([None], {}),
    "last item bad": ([user("ok"), user("ok"), {"role": "bad"}], {}),
    "messages is a dict": (user("x"), {}),
    "messages is a Message": (Message(role="user", content="x"), {}),
    "messages is a str": ("hello", {}),
    "messages is None": (None, {}),
    "messages is an int": (42, {}),
    "messages is bytes": (b"hello", {}),
    "empty list": ([], {}),
    "empty tuple": ((), {}),
    "empty generator": ((m for m in []), {}),
    # ids
    "session id empty": ([user("x")], {"session_id": ""}),
    "session id None": ([user("x")], {"session_id": None}),
    "session id int": ([user("x")], {"session_id": 5}),
    "session id bytes": ([user("x")], {"session_id": b"s"}),
    "session id list": ([user("x")], {"session_id": ["s"]}),
    "session id too long": ([user("x")], {"session_id": "x" * (MAX_ID_BYTES + 1)}),
    "session id surrogate": ([user("x")], {"session_id": "a\ud800"}),
    "user id empty": ([user("x")], {"user_id": ""}),
    "user id None": ([user("x")], {"user_id": None}),
    "user id int": ([user("x")], {"user_id": 7}),
    "user id bytes": ([user("x")], {"user_id": b"u"}),
    "user id too long": ([user("x")], {"user_id": "é" * (MAX_ID_BYTES // 2 + 1)}),
    # tags and agent
    "tags a list": ([user("x")], {"tags": [("a", "b")]}),
    "tags a str": ([user("x")], {"tags": "a=b"}),
    "tags an int": ([user("x")], {"tags": 5}),
    "tag key int": ([user("x")], {"tags": {1: "x"}}),
    "tag key empty": ([user("x")], {"tags": {"": "x"}}),
    "tag key None": ([user("x")], {"tags": {None: "x"}}),
    "tag value int": ([user("x")], {"tags": {"k": 1}}),
    "tag value None": ([user("x")], {"tags": {"k": None}}),
    "tag value bytes": ([user("x")], {"tags": {"k": b"v"}}),
    "too many tags": ([user("x")], {"tags": {f"k{i}": "v" for i in range(65)}}),
    "agent name int": ([user("x")], {"agent_name": 5}),
    "agent name lone surrogate": ([user("x")], {"agent_name": "\ud800"}),
    "tag key lone surrogate": ([user("x")], {"tags": {"\ud800": "v"}}),
    "tag value lone surrogate": ([user("x")], {"tags": {"k": "\ud800"}}),
    # size
    "oversized": ([user("x" * SMALL_LIMIT)], {}),
    "second message oversized": ([user("ok"), user("y" * (SMALL_LIMIT + 1))], {}),
    "oversized tool arguments": (
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "f", "arguments": {"x": "z" * SMALL_LIMIT}}],
            }
        ],
        {},
    ),
}


@pytest.mark.parametrize("case", list(BAD_WRITES), ids=list(BAD_WRITES))
async def test_bad_write_is_rejected_and_writes_nothing(seeded, raw, case, namespace):
    _, small, before, ttl = seeded
    messages, kwargs = BAD_WRITES[case]
    kwargs = {"session_id": "s", **kwargs}
    with pytest.raises(InvalidInput) as info:
        await small.write(messages, **kwargs)
    _expect_invalid(info)
    await _assert_unchanged(raw, namespace, before, ttl)


async def test_poisoned_metadata_is_rejected_and_the_session_stays_readable(seeded, raw, namespace):
    """Issue 7, defect 5: ``{"d": {(1, 2): "x"}}`` was stored, then every read of
    the session raised ``CorruptData``."""
    mem, _, before, ttl = seeded
    poisoned = [user("x", metadata={"d": {(1, 2): "x"}})]
    with pytest.raises(
        InvalidInput, match=r"(?s)messages\[0\] is invalid.*metadata\['d'\] has a key"
    ):
        await mem.write(poisoned, session_id="s", tags={"k": "v"})
    await _assert_unchanged(raw, namespace, before, ttl)
    assert [m.content for m in await mem.read(session_id="s")] == ["a", "b"]
    assert len(await mem.entries(session_id="s")) == 1


async def test_what_is_accepted_comes_back_exactly(make_memory):
    mem = await make_memory()
    metadata = {
        "bounds": [-(2**63), 2**64 - 1, -0.0, 1e308, 5e-324],
        "scalars": {"none": None, "yes": True, "no": False, "text": "é🚀\x00"},
        "deep": _nested(MAX_DEPTH - 1),
        "empty": [{}, [], ""],
    }
    written = [
        user("q", metadata=metadata),
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "name": "f", "arguments": metadata}],
            "metadata": {"k": [1]},
        },
        {"role": "tool", "tool_call_id": "c", "content": "", "metadata": {}},
        Message(role="assistant", tool_calls=[{"id": "d", "name": "g", "arguments": "{}"}]),
    ]
    entry = await mem.write(written, session_id="s")
    got = await mem.read(session_id="s")
    assert got == entry.messages
    assert got[0].metadata == metadata
    assert repr(got[0].metadata) == repr(metadata)  # same types, not just equal
    assert got[1].content == "" and got[1].tool_calls[0].arguments == metadata
    assert [m.to_chat() for m in got] == [
        Message.model_validate(m).to_chat() if isinstance(m, dict) else m.to_chat() for m in written
    ]


async def test_default_size_limit_is_one_mebibyte(seeded, raw, namespace):
    mem, _, before, ttl = seeded
    with pytest.raises(InvalidInput):
        await mem.write([user("x" * (1024 * 1024))], session_id="s")
    await _assert_unchanged(raw, namespace, before, ttl)
    entry = await mem.write([user("x" * (1024 * 1024 - 100))], session_id="s")
    assert len(entry.messages) == 1


@pytest.mark.parametrize(
    "tokenizer",
    [
        pytest.param(lambda text: 1 // 0, id="raises"),
        pytest.param(lambda text: -1000, id="negative"),
        pytest.param(lambda text: 1.5, id="float"),
        pytest.param(lambda text: "3", id="str"),
    ],
)
async def test_a_broken_tokenizer_is_rejected_before_writing(
    seeded, make_memory, raw, tokenizer, namespace
):
    _, _, before, ttl = seeded
    mem = await make_memory(tokenizer=tokenizer)
    with pytest.raises(InvalidInput):
        await mem.write([user("a")], session_id="s")
    await _assert_unchanged(raw, namespace, before, ttl)


BAD_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "read limit negative": ("read", {"session_id": "s", "limit": -1}),
    "read limit str": ("read", {"session_id": "s", "limit": "5"}),
    "read limit float": ("read", {"session_id": "s", "limit": 1.5}),
    "read limit bool": ("read", {"session_id": "s", "limit": True}),
    "read max_tokens negative": ("read", {"session_id": "s", "max_tokens": -1}),
    "read max_tokens str": ("read", {"session_id": "s", "max_tokens": "100"}),
    "read max_tokens float": ("read", {"session_id": "s", "max_tokens": 2.5}),
    "read max_tokens bool": ("read", {"session_id": "s", "max_tokens": False}),
    "read tags str": ("read", {"session_id": "s", "tags": "k=v"}),
    "read tag value int": ("read", {"session_id": "s", "tags": {"k": 1}}),
    "read tag key int": ("read", {"session_id": "s", "tags": {1: "v"}}),
    "read session id empty": ("read", {"session_id": ""}),
    "read session id None": ("read", {"session_id": None}),
    "read user id int": ("read", {"session_id": "s", "user_id": 1}),
    "entries tags list": ("entries", {"session_id": "s", "tags": ["k"]}),
    "entries session id bytes": ("entries", {"session_id": b"s"}),
    "entries user id empty": ("entries", {"session_id": "s", "user_id": ""}),
    "sessions user id None": ("sessions", {"user_id": None}),
    "sessions user id empty": ("sessions", {"user_id": ""}),
    "sessions tags int": ("sessions", {"tags": 3}),
    "sessions tag value None": ("sessions", {"tags": {"k": None}}),
    "clear session id empty": ("clear", {"session_id": ""}),
    "clear session id int": ("clear", {"session_id": 1}),
    "clear user id None": ("clear", {"session_id": "s", "user_id": None}),
}


@pytest.mark.parametrize("case", list(BAD_CALLS), ids=list(BAD_CALLS))
async def test_bad_arguments_are_rejected_and_change_nothing(seeded, raw, case, namespace):
    mem, _, before, ttl = seeded
    method, kwargs = BAD_CALLS[case]
    with pytest.raises(InvalidInput) as info:
        await getattr(mem, method)(**kwargs)
    _expect_invalid(info)
    await _assert_unchanged(raw, namespace, before, ttl)


@pytest.mark.parametrize("user_id", ["", None, 5, b"default", "x" * (MAX_ID_BYTES + 1)], ids=repr)
async def test_clear_user_rejects_bad_ids_and_deletes_nothing(seeded, raw, user_id, namespace):
    mem, _, before, ttl = seeded
    with pytest.raises(InvalidInput):
        await mem.clear_user(user_id)
    await _assert_unchanged(raw, namespace, before, ttl)


BAD_OPTIONS: dict[str, dict[str, Any]] = {
    "unknown option": {"colour": "red"},
    "ttl str": {"ttl": "5"},
    "ttl negative": {"ttl": -1},
    "ttl zero": {"ttl": 0},
    "ttl bool": {"ttl": True},
    "ttl list": {"ttl": [5]},
    "ttl zero timedelta": {"ttl": timedelta(0)},
    "ttl negative timedelta": {"ttl": timedelta(seconds=-1)},
    "max_messages zero": {"max_messages": 0},
    "max_messages negative": {"max_messages": -3},
    "max_messages str": {"max_messages": "5"},
    "max_messages float": {"max_messages": 1.5},
    "max_messages bool": {"max_messages": True},
    "max_message_bytes zero": {"max_message_bytes": 0},
    "max_message_bytes str": {"max_message_bytes": "1k"},
    "namespace empty": {"namespace": ""},
    "namespace colon": {"namespace": "a:b"},
    "namespace braces": {"namespace": "a{b}"},
    "namespace glob": {"namespace": "a*"},
    "namespace space": {"namespace": "a b"},
    "namespace trailing newline": {"namespace": "abc\n"},
    "namespace too long": {"namespace": "n" * 65},
    "namespace int": {"namespace": 5},
    "store_system_messages str": {"store_system_messages": "yes"},
    "refresh_ttl_on_read int": {"refresh_ttl_on_read": 1},
    "tokenizer not callable": {"tokenizer": "len"},
    "on_read not callable": {"on_read": 5},
    "on_write not callable": {"on_write": "print"},
    "retries negative": {"retries": -1},
    "connect_timeout zero": {"connect_timeout": 0},
    "connect_timeout str": {"connect_timeout": "1"},
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS), ids=list(BAD_OPTIONS))
async def test_bad_connect_options_are_rejected(backend_url, clean_env, case):
    with pytest.raises(InvalidInput) as info:
        await Memory.connect(backend_url, **BAD_OPTIONS[case])
    _expect_invalid(info)


@pytest.mark.parametrize("url", [123, "nonsense", "http://127.0.0.1:6379/0"], ids=repr)
async def test_bad_urls_are_rejected(clean_env, url):
    with pytest.raises(InvalidInput) as info:
        await Memory.connect(url)
    _expect_invalid(info)


HOSTILE = [
    "a:b",
    "{a}",
    "a}",
    "}",
    "{",
    "*",
    "?",
    "[a-z]",
    "[",
    "]",
    "\\",
    "a\nb",
    "\r\n",
    " ",
    "\t",
    "ünï©ødé 🚀",
    "x" * 1024,
    "€" * (MAX_ID_BYTES // 3),  # 4095 bytes, just under the limit
    "a}:s:x",
    "a}:sessions",
    "{u:a}",
    "u:a",
    "%41",
    "A",
    "%",
    "a*",
    ".",
    "\x00",
    "\x7f",
]


async def test_hostile_ids_round_trip(make_memory, raw, namespace):
    mem = await make_memory(index=False)
    for i, hostile in enumerate(HOSTILE):
        await mem.write([user(f"u{i}")], session_id="s", user_id=hostile, tags={hostile: hostile})
        await mem.write([user(f"s{i}")], session_id=hostile, user_id="a")
    for i, hostile in enumerate(HOSTILE):
        got = await mem.read(session_id="s", user_id=hostile)
        assert [m.content for m in got] == [f"u{i}"], hostile
        got = await mem.read(session_id=hostile, user_id="a")
        assert [m.content for m in got] == [f"s{i}"], hostile
        infos = await mem.sessions(user_id=hostile, tags={hostile: hostile})
        assert [(s.user_id, s.session_id) for s in infos] == [(hostile, "s")]
    listed = {s.session_id for s in await mem.sessions(user_id="a")}
    assert listed == set(HOSTILE)

    # Every key parses back to the ids that made it, and none escapes the
    # layout: every key holding the namespace anywhere is one of its users'.
    layout = mem.layout
    owners = set()
    for key in await keys_matching(raw, f"*{namespace}*"):
        text = key.decode("ascii")
        assert text.startswith(f"{namespace}:{{u:")
        parsed = layout.parse_key(text)
        assert layout.user_prefix(parsed.user_id) in text
        owners.add((parsed.user_id, parsed.session_id))
    expected = {(h, "s") for h in HOSTILE} | {("a", h) for h in HOSTILE}
    assert {o for o in owners if o[1] is not None} == expected


async def test_hostile_user_ids_cannot_reach_another_user(make_memory, raw):
    mem = await make_memory(index=False)
    await mem.write([user("a's secret")], session_id="s", user_id="a", tags={"k": "v"})
    await mem.write([user("a's other")], session_id="x", user_id="a")
    a_before = await snapshot(raw, mem.layout.user_pattern("a"))
    attackers = ["a}:s:s", "a}", "a}:*", "*", "a*", "?", "[a]", "a\\", "a?", "a}:s:x"]
    for attacker in attackers:
        assert await mem.read(session_id="s", user_id=attacker) == []
        assert await mem.read(session_id="s:msgs", user_id="a") == []
        assert await mem.sessions(user_id=attacker) == []
        assert await mem.sessions(user_id=attacker, tags={"k": "v"}) == []
        assert await mem.clear(session_id="s", user_id=attacker) == 0
        await mem.write([user("attack")], session_id="s", user_id=attacker)
        assert await mem.clear_user(attacker) == 5
    assert await snapshot(raw, mem.layout.user_pattern("a")) == a_before
    assert [m.content for m in await mem.read(session_id="s", user_id="a")] == ["a's secret"]


async def test_clear_user_of_hostile_ids_touches_only_that_user(make_memory, raw, namespace):
    mem = await make_memory(index=False)
    for hostile in HOSTILE:
        await mem.write([user(hostile)], session_id="s", user_id=hostile, tags={"t": "1"})
    for victim in ("*", "a}", "[a-z]", "%41", "{u:a}"):
        victim_keys = await keys_matching(raw, mem.layout.user_pattern(victim))
        assert len(victim_keys) == 7  # 5 session keys, sessions and tagidx
        own = await snapshot(raw, f"*{namespace}*")
        before = {k: v for k, v in own.items() if k not in victim_keys}
        assert await mem.clear_user(victim) == 7
        assert await snapshot(raw, f"*{namespace}*") == before
        assert await mem.read(session_id="s", user_id=victim) == []
    assert [m.content for m in await mem.read(session_id="s", user_id="A")] == ["A"]


async def test_id_length_limit_is_in_utf8_bytes(make_memory):
    mem = await make_memory()
    longest = "é" * (MAX_ID_BYTES // 2)
    await mem.write([user("x")], session_id=longest, user_id=longest)
    assert len(await mem.read(session_id=longest, user_id=longest)) == 1
    with pytest.raises(InvalidInput):
        await mem.write([user("x")], session_id=longest + "a", user_id="u")


class _Text(str):
    pass


_ANY_VALUE = st.one_of(
    st.none(),
    st.sampled_from(["user", "assistant", "tool", "system", "robot", "", "x\ud800"]),
    st.text(max_size=8),
    st.builds(_Text, st.sampled_from(["user", "hi"])),
    st.integers(-2, 2),
    st.booleans(),
    st.binary(max_size=4),
    st.builds(list),
    st.builds(dict),
    st.just(()),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(lambda: [{"id": "c1", "name": "f", "arguments": "{}"}]),
)
_FIELDS = ["role", "content", "name", "tool_calls", "tool_call_id", "metadata", "extra"]


@st.composite
def _inputs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid message of the usual shape with up to two fields replaced by
    anything (or removed): inputs on both sides of the fast path's edge."""
    data: dict[str, Any] = {
        "role": draw(st.sampled_from(["user", "assistant", "tool", "system"])),
        "content": draw(st.text(max_size=8)),
    }
    for key, value in (
        ("name", st.one_of(st.none(), st.text(max_size=4))),
        ("tool_call_id", st.one_of(st.none(), st.text(max_size=4))),
        ("tool_calls", st.builds(list)),
        ("metadata", st.builds(dict)),
    ):
        if draw(st.booleans()):
            data[key] = draw(value)
    for key in draw(st.lists(st.sampled_from(_FIELDS), max_size=2, unique=True)):
        if draw(st.integers(0, 3)) == 0:
            data.pop(key, None)
        else:
            data[key] = draw(_ANY_VALUE)
    return data


_INPUTS = _inputs()


# Fresh objects each draw (no st.just of a mutable value shared by every
# example) and no replay from the example database: a CI run under load
# raised FlakyStrategyDefinition here.
@settings(max_examples=examples(3000), deadline=None, database=None)
@given(data=_INPUTS)
def test_the_fast_message_check_agrees_with_pydantic(data: dict[str, Any]) -> None:
    """``input_message`` checks the usual shape itself and leaves the rest to
    pydantic: for any input it accepts exactly what pydantic accepts, giving
    the same message (values, types and fields set), or raises the same way."""
    try:
        expected: Message | None = Message.model_validate(data)
    except ValidationError:
        expected = None
    if expected is None:
        with pytest.raises(ValidationError):
            input_message(data)
        return
    got = input_message(data)
    assert type(got) is Message
    assert got.model_dump() == expected.model_dump()
    assert got.model_fields_set == expected.model_fields_set
    assert [type(v) for v in got.__dict__.values()] == [type(v) for v in expected.__dict__.values()]
    assert list(got.__dict__) == list(expected.__dict__)
    # A new object: nothing shared with the input that the caller could mutate.
    assert got.tool_calls is not data.get("tool_calls")
    assert got.metadata is not data.get("metadata")


async def test_a_message_object_is_checked_again_and_copied(make_memory, raw, namespace) -> None:
    """A ``Message`` object is validated again on write (a model's fields can
    be assigned anything) and the entry returned shares nothing with it."""
    mem = await make_memory()
    plain = Message(role="user", content="plain")
    nested = Message(role="user", content="nested", metadata={"a": [1]})
    entry = await mem.write([plain, nested], session_id="s")
    assert [m.content for m in entry.messages] == ["plain", "nested"]
    assert entry.messages[0] is not plain and plain.id is None
    nested.metadata["a"].append(2)
    assert entry.messages[1].metadata == {"a": [1]}

    before = await snapshot(raw, f"{namespace}:*")
    broken = Message(role="user", content="fine")
    broken.content = None  # type: ignore[assignment]
    with pytest.raises(InvalidInput, match=r"messages\[0\] is invalid"):
        await mem.write([broken], session_id="s")
    assert await snapshot(raw, f"{namespace}:*") == before


@pytest.mark.parametrize(
    "data",
    [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "name": "bot", "tool_calls": [], "metadata": {}},
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": None},
        {"role": "system", "content": "s", "tool_call_id": None},
    ],
)
def test_the_usual_message_shape_skips_pydantic(data: dict[str, Any], monkeypatch) -> None:
    """The write path's common case is checked without a pydantic pass (its
    cost on every write is what ``input_message`` exists to save)."""
    expected = Message.model_validate(data)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("pydantic was asked")

    monkeypatch.setattr(Message, "model_validate", refuse)
    got = input_message(data)
    assert got.model_dump() == expected.model_dump()
    assert got.model_fields_set == expected.model_fields_set == set(data)


@pytest.mark.parametrize(
    "data",
    [
        {"role": "user", "content": "hi", "metadata": {"k": 1}},
        {"role": "assistant", "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}]},
        {"role": "user", "content": b"bytes"},
        {"role": "user", "content": "x", "extra": 1},
        {"role": "robot", "content": "x"},
        {"role": "user", "content": "x", "name": 5},
        {"role": "user", "content": "x", "tool_call_id": 5},
        {"role": "user", "content": "x", "tool_calls": ()},
        {"role": "user", "content": "x", "metadata": []},
    ],
)
def test_other_shapes_go_through_pydantic(data: dict[str, Any], monkeypatch) -> None:
    asked: list[object] = []
    validate = Message.model_validate

    def spy(value: object) -> Message:
        asked.append(value)
        return validate(value)

    monkeypatch.setattr(Message, "model_validate", spy)
    with contextlib.suppress(ValidationError):
        input_message(data)
    assert asked == [data]


@pytest.mark.parametrize(
    "bad",
    [
        datetime(2023, 5, 8),  # naive
        "2023-05-08T00:00:00Z",
        1683504000,
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
    ],
    ids=repr,
)
async def test_a_bad_created_at_is_rejected_and_changes_nothing(seeded, raw, bad, namespace):
    mem, _, before, before_ttl = seeded
    with pytest.raises(InvalidInput, match="created_at"):
        await mem.write([user("x")], session_id="s", created_at=bad)
    await _assert_unchanged(raw, namespace, before, before_ttl)
