"""The one rule for free-form values (``redismem.values.check_json_value``)
and the message rules built on it: everything accepted comes back from the
store exactly as given; everything else is rejected when the model is built."""

from __future__ import annotations

import math
from collections import OrderedDict
from datetime import datetime
from enum import IntEnum, StrEnum
from typing import Any

import msgpack
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from redismem import CorruptData, Message, ToolCall
from redismem.core.codec import SCHEMA_VERSION, decode_messages, encode_message
from redismem.values import INT_MAX, INT_MIN, MAX_DEPTH, check_json_value


class Colour(StrEnum):
    RED = "red"


class Level(IntEnum):
    HIGH = 3


def nested(depth: int) -> Any:
    """``depth`` containers, alternating dict and list, around a leaf."""
    value: Any = "leaf"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


def self_referencing() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    return loop


ACCEPTED: dict[str, Any] = {
    "empty": {},
    "scalars": {"n": None, "t": True, "f": False, "i": -5, "x": 1.5, "s": "é🚀"},
    "negative zero": {"z": -0.0},
    "int bounds": {"lo": INT_MIN, "hi": INT_MAX},
    "nested": {"a": [1, {"b": [None, {"c": "d"}]}], "e": {}},
    "empty containers": {"l": [], "d": {}, "s": ""},
    "deepest allowed": {"d": nested(MAX_DEPTH - 1)},
    "unicode keys": {"ключ": 1, "🔑": [2]},
}

REJECTED: dict[str, Any] = {
    "nested tuple key": {"d": {(1, 2): "x"}},
    "nested int key": {"d": {1: "x"}},
    "nested None key": {"d": {None: "x"}},
    "nested bool key": {"d": {True: "x"}},
    "tuple value": {"t": (1, 2)},
    "tuple in list": {"l": [1, (2,)]},
    "bytes": {"b": b"x"},
    "bytearray": {"b": bytearray(b"x")},
    "nan": {"x": math.nan},
    "inf": {"x": math.inf},
    "-inf in list": {"x": [-math.inf]},
    "int above uint64": {"n": INT_MAX + 1},
    "int below int64": {"n": INT_MIN - 1},
    "set": {"s": {1, 2}},
    "frozenset": {"s": frozenset()},
    "datetime": {"t": datetime(2020, 1, 1)},
    "object": {"o": object()},
    "StrEnum value": {"c": Colour.RED},
    "IntEnum value": {"l": Level.HIGH},
    "StrEnum key": {"d": {Colour.RED: 1}},
    "OrderedDict": {"d": OrderedDict(a=1)},
    "lone surrogate value": {"s": "a\ud800"},
    "lone surrogate key": {"d": {"\udfff": 1}},
    "too deep": {"d": nested(MAX_DEPTH)},
    "self reference": self_referencing(),
    "complex": {"c": 1j},
}


@pytest.mark.parametrize("case", list(ACCEPTED), ids=list(ACCEPTED))
def test_accepted_values_pass_and_round_trip(case: str) -> None:
    value = ACCEPTED[case]
    check_json_value(value)
    message = Message(role="user", content="x", metadata=value)
    assert round_trip(message).metadata == value
    call = ToolCall(id="c", name="f", arguments=value)
    tool_message = Message(role="assistant", tool_calls=[call])
    assert round_trip(tool_message).tool_calls[0].arguments == value


@pytest.mark.parametrize("case", list(REJECTED), ids=list(REJECTED))
def test_rejected_values_fail_the_rule_and_the_models(case: str) -> None:
    value = REJECTED[case]
    with pytest.raises(ValueError):
        check_json_value(value)
    with pytest.raises(ValidationError):
        Message(role="user", content="x", metadata=value)
    with pytest.raises(ValidationError):
        ToolCall(id="c", name="f", arguments=value)


def test_the_error_names_where_the_bad_value_is() -> None:
    with pytest.raises(ValueError, match=r"metadata\['d'\] has a key of type tuple"):
        check_json_value({"d": {(1, 2): "x"}}, "metadata")
    with pytest.raises(ValueError, match=r"metadata\['a'\]\[1\] is a tuple \(use a list\)"):
        check_json_value({"a": [0, (1,)]}, "metadata")
    with pytest.raises(ValueError, match="nests more than 32"):
        check_json_value(nested(MAX_DEPTH + 1))
    with pytest.raises(ValidationError, match="arguments"):
        ToolCall(id="c", name="f", arguments={"b": b"x"})


def test_a_hostile_deep_structure_is_rejected_without_recursion_error() -> None:
    with pytest.raises(ValidationError, match="nests more than"):
        Message(role="user", content="x", metadata={"d": nested(100_000)})


def test_text_arguments_are_not_parsed() -> None:
    # JSON text is the model's own output: stored and returned as the same str.
    call = ToolCall(id="c", name="f", arguments='{"q": NaN, "t": [1, 2]}')
    assert round_trip(Message(role="assistant", tool_calls=[call])).tool_calls[0] == call


# -- the content rule ---------------------------------------------------------

CALL = {"id": "c", "name": "f", "arguments": {}}


@pytest.mark.parametrize(
    "data",
    [
        {"role": "user"},
        {"role": "system"},
        {"role": "tool", "tool_call_id": "c"},
        {"role": "assistant"},
        {"role": "assistant", "tool_calls": []},
        {"role": "user", "content": None},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "user", "content": None, "tool_calls": [CALL]},
    ],
    ids=repr,
)
def test_only_an_assistant_tool_call_may_omit_content(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="content"):
        Message.model_validate(data)


def test_an_assistant_tool_call_without_content_round_trips() -> None:
    message = Message.model_validate({"role": "assistant", "tool_calls": [CALL]})
    assert message.content == ""
    back = round_trip(message)
    assert back.model_dump(exclude={"id", "token_count"}) == message.model_dump(
        exclude={"id", "token_count"}
    )
    assert back.to_chat() == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}],
    }


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool"])
def test_empty_content_given_explicitly_is_accepted(role: str) -> None:
    assert Message.model_validate({"role": role, "content": ""}).content == ""


def test_stored_messages_stay_readable_even_if_written_before_the_rule() -> None:
    # Values msgpack decodes (bytes, nan, non-str nested keys) are what older
    # versions stored: reading them must not turn the session corrupt.
    metadata = {"b": b"\xff", "n": math.inf, "d": {1: "x"}}
    legacy = b"1|" + msgpack.packb([SCHEMA_VERSION, 1, "old", None, None, None, metadata])
    [message] = decode_messages([legacy], 1, [], "k")
    assert message.metadata == metadata
    assert message.model_fields_set == {"role", "content", "id", "token_count", "metadata"}
    with pytest.raises(ValidationError):
        Message.model_validate(message.model_dump())  # but it cannot be written again
    with pytest.raises(CorruptData, match="schema"):
        decode_messages([b"1|" + msgpack.packb([SCHEMA_VERSION, 1])], 1, [], "k")


# -- every accepted value round-trips ------------------------------------------

_keys = st.text(max_size=5)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=INT_MIN, max_value=INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=20,
)
# Also what the rule must turn away: tuples, bytes, nan/inf, big ints, non-str keys.
_anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=4),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(_keys | st.integers() | st.booleans(), children, max_size=4)
    ),
    max_leaves=20,
)


def round_trip(message: Message) -> Message:
    """The message after the store's encoding and decoding."""
    raw = encode_message(message, 1)
    [back] = decode_messages([raw], 1, [], "k")
    return back


@settings(max_examples=examples(100), deadline=None)
@given(st.dictionaries(_keys, _json, max_size=5))
def test_every_json_value_is_accepted_and_round_trips(value: dict[str, Any]) -> None:
    message = Message(role="user", content="x", metadata=value)
    assert round_trip(message).metadata == value


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(_keys, _anything, max_size=5))
def test_whatever_the_rule_accepts_round_trips_exactly(value: dict[str, Any]) -> None:
    try:
        message = Message(role="user", content="x", metadata=value)
    except ValidationError:
        return
    back = round_trip(message).metadata
    assert back == value
    assert repr(back) == repr(value)  # same types too (a tuple would show as a list)
