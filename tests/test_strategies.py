"""Context strategies: worked conversations and properties over random ones."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from redismem.context.strategies import (
    Hybrid,
    LastMessages,
    MemoryStrategy,
    StrategyResult,
    TokenBudget,
    Turns,
    trim_to_token_budget,
)
from redismem.context.tokens import estimate_messages_tokens
from redismem.errors import InvalidInput
from redismem.models import Message, Role, ToolCall

PROPERTY_SETTINGS = settings(max_examples=examples(200), deadline=None)


# -- building conversations ------------------------------------------------------


def system(content: str) -> Message:
    return Message(role="system", content=content)


def user(content: str) -> Message:
    return Message(role="user", content=content)


def answer(content: str) -> Message:
    return Message(role="assistant", content=content)


def calls(*tool_calls: ToolCall, content: str = "") -> Message:
    return Message(role="assistant", content=content, tool_calls=list(tool_calls))


def result(call_id: str, content: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=content)


def trip_planning() -> list[Message]:
    """Three turns: parallel tool calls, a two-step tool chain, a short close."""
    flights = json.dumps(
        [
            {"flight": f"LX{160 + i}", "from": "ZRH", "to": "NRT", "price_chf": 900 + 37 * i}
            for i in range(12)
        ]
    )
    return [
        system("You are a travel assistant. Answer briefly."),
        user("What's the weather in Zürich and in 東京 this weekend?"),
        calls(
            ToolCall(id="call_w1", name="get_weather", arguments={"city": "Zürich"}),
            ToolCall(id="call_w2", name="get_weather", arguments={"city": "東京"}),
        ),
        result("call_w1", '{"city": "Zürich", "forecast": "rain", "high_c": 14}'),
        result("call_w2", '{"city": "東京", "forecast": "sunny", "high_c": 24}'),
        answer("Zürich: rain, 14 °C. 東京: sunny, 24 °C ☀️."),
        user("Book me the cheapest flight from Zürich to Tokyo on Friday."),
        calls(ToolCall(id="call_s", name="search_flights", arguments='{"from":"ZRH","to":"NRT"}')),
        result("call_s", flights),
        calls(
            ToolCall(id="call_b", name="book_flight", arguments={"flight": "LX160"}),
            content="The cheapest is LX160; booking it.",
        ),
        result("call_b", '{"status": "confirmed", "pnr": "Q7X2LM"}'),
        answer("Booked LX160 on Friday, confirmation Q7X2LM."),
        user("merci 🙏"),
        answer("De rien — bon voyage!"),
    ]


def positions(conversation: Sequence[Message], subset: Sequence[Message]) -> list[int]:
    index = {id(m): i for i, m in enumerate(conversation)}
    return [index[id(m)] for m in subset]


def kept_positions(conversation: Sequence[Message], outcome: StrategyResult) -> list[int]:
    return positions(conversation, outcome.kept)


# -- worked examples ---------------------------------------------------------------


def test_all_strategies_satisfy_the_protocol() -> None:
    strategies: list[MemoryStrategy] = [
        LastMessages(5),
        TokenBudget(100),
        Hybrid(5, 100),
        Turns(2),
    ]
    assert all(isinstance(s, MemoryStrategy) for s in strategies)


def test_fitting_history_is_kept_whole() -> None:
    conversation = trip_planning()
    for strategy in (LastMessages(50), TokenBudget(10_000), Hybrid(50, 10_000), Turns(10)):
        outcome = strategy.apply(conversation)
        assert outcome.kept == conversation
        assert outcome.dropped == []


def test_empty_history() -> None:
    for strategy in (LastMessages(1), TokenBudget(1), Hybrid(1, 1), Turns(1)):
        assert strategy.apply([]) == StrategyResult(kept=[], dropped=[])


def test_sliding_window_keeps_most_recent_messages() -> None:
    conversation = trip_planning()
    outcome = LastMessages(3).apply(conversation)
    assert kept_positions(conversation, outcome) == [11, 12, 13]
    assert outcome.dropped == conversation[:11]


def test_sliding_window_never_splits_a_tool_call_from_its_results() -> None:
    conversation = trip_planning()
    # One more slot would take the booking result but not its call: both stay out.
    assert kept_positions(conversation, LastMessages(4).apply(conversation)) == [11, 12, 13]
    assert kept_positions(conversation, LastMessages(5).apply(conversation)) == [9, 10, 11, 12, 13]
    # The parallel weather calls: the assistant message and both results move together.
    outcome = LastMessages(10).apply(conversation)
    assert kept_positions(conversation, outcome) == [5, 6, 7, 8, 9, 10, 11, 12, 13]
    outcome = LastMessages(12).apply(conversation)
    assert kept_positions(conversation, outcome) == list(range(2, 14))


def test_preserve_recent_extends_to_the_whole_tool_group() -> None:
    conversation = [
        user("Compare the populations of Lyon and Graz."),
        calls(
            ToolCall(id="a", name="population", arguments={"city": "Lyon"}),
            ToolCall(id="b", name="population", arguments={"city": "Graz"}),
        ),
        result("a", "522250"),
        result("b", "298479"),
    ]
    # Preserving the last message alone would orphan it: the call and both results stay.
    outcome = LastMessages(1, preserve_recent=1).apply(conversation)
    assert outcome.kept == conversation[1:]
    assert outcome.dropped == conversation[:1]
    # Without preservation the group is over budget, so nothing fits.
    assert LastMessages(1).apply(conversation).kept == []


def test_preserved_messages_are_kept_over_budget() -> None:
    conversation = [user("x" * 400), answer("y" * 400), user("z" * 400)]
    outcome = TokenBudget(50, preserve_recent=2).apply(conversation)
    assert outcome.kept == conversation[1:]
    assert TokenBudget(50).apply(conversation).kept == []


def test_trailing_tool_call_without_results_is_kept() -> None:
    conversation = [
        user("Run the test suite."),
        calls(ToolCall(id="run", name="shell", arguments={"cmd": "pytest -q"})),
    ]
    assert LastMessages(1).apply(conversation).kept == conversation[1:]
    assert TokenBudget(1_000).apply(conversation).kept == conversation


def test_orphaned_tool_results_are_dropped_even_when_preserved() -> None:
    # The call was trimmed away before this history was read.
    conversation = [result("gone", "42"), result("gone2", "43"), answer("It is 42."), user("ok")]
    for strategy in (
        LastMessages(10, preserve_recent=10),
        TokenBudget(10_000, preserve_recent=10),
        Hybrid(10, 10_000, preserve_recent=10),
        Turns(10),
    ):
        outcome = strategy.apply(conversation)
        assert outcome.kept == conversation[2:]
        assert outcome.dropped == conversation[:2]


def test_system_messages_counted_by_default() -> None:
    conversation = trip_planning()
    outcome = LastMessages(13).apply(conversation)
    assert outcome.dropped == conversation[:1]


def test_uncounted_system_messages_are_always_kept_and_free() -> None:
    conversation = trip_planning()
    conversation.insert(12, system("The user prefers French."))
    outcome = LastMessages(3, count_system=False).apply(conversation)
    assert [m.content for m in outcome.kept] == [
        conversation[0].content,
        "Booked LX160 on Friday, confirmation Q7X2LM.",
        "The user prefers French.",
        "merci 🙏",
        "De rien — bon voyage!",
    ]
    huge_system = [system("rules " * 10_000), user("hi"), answer("hello")]
    outcome = TokenBudget(20, count_system=False).apply(huge_system)
    assert outcome.kept == huge_system


def test_system_message_between_a_call_and_its_results_stays_in_the_group() -> None:
    conversation = [
        user("Look up order 17."),
        calls(ToolCall(id="o", name="get_order", arguments={"id": 17})),
        system("Note: order service is slow today."),
        result("o", '{"status": "shipped"}'),
        answer("Order 17 has shipped."),
    ]
    outcome = LastMessages(2).apply(conversation)
    assert outcome.kept == conversation[4:]
    outcome = LastMessages(4).apply(conversation)
    assert outcome.kept == conversation[1:]
    # Uncounted, the system message stays even though its group is dropped.
    outcome = LastMessages(1, count_system=False).apply(conversation)
    assert outcome.kept == [conversation[2], conversation[4]]


def test_token_budget_counts_content_tool_arguments_and_overhead() -> None:
    conversation = trip_planning()
    last_three = estimate_messages_tokens(conversation[11:])
    outcome = TokenBudget(last_three).apply(conversation)
    assert kept_positions(conversation, outcome) == [11, 12, 13]
    outcome = TokenBudget(last_three - 1).apply(conversation)
    assert kept_positions(conversation, outcome) == [12, 13]


def test_token_budget_with_a_long_tool_result_drops_its_call_too() -> None:
    conversation = trip_planning()
    # The flight search result is large; a budget that covers everything after it
    # but not the result itself must also leave out the search call.
    after_search = estimate_messages_tokens(conversation[9:])
    outcome = TokenBudget(after_search + 50).apply(conversation)
    assert kept_positions(conversation, outcome) == list(range(9, 14))


def test_stored_token_counts_are_used() -> None:
    conversation = [user("a" * 4_000), answer("b" * 4_000)]
    for message in conversation:
        message.token_count = 3
    assert TokenBudget(6).apply(conversation).kept == conversation


def test_custom_tokenizer_is_used() -> None:
    conversation = [user("one two three"), answer("four five")]

    def words(text: str) -> int:
        return len(text.split())

    # 4 overhead + 3 words, then 4 + 2 words
    assert TokenBudget(5).apply(conversation, words).kept == []
    assert TokenBudget(6).apply(conversation, words).kept == conversation[1:]
    assert TokenBudget(12).apply(conversation, words).kept == conversation[1:]
    assert TokenBudget(13).apply(conversation, words).kept == conversation


def test_hybrid_stops_at_whichever_limit_is_hit_first() -> None:
    conversation = [user("short"), answer("short"), user("w" * 400), answer("short")]
    # The message limit binds.
    assert Hybrid(2, 10_000).apply(conversation).kept == conversation[2:]
    # The token limit binds: the long user message does not fit.
    assert Hybrid(10, 20).apply(conversation).kept == conversation[3:]


def test_turns_keep_whole_turns() -> None:
    conversation = trip_planning()
    assert kept_positions(conversation, Turns(1).apply(conversation)) == [12, 13]
    assert kept_positions(conversation, Turns(2).apply(conversation)) == list(range(6, 14))
    assert Turns(3).apply(conversation).kept == conversation


def test_turns_token_limit_drops_whole_oldest_turns() -> None:
    conversation = trip_planning()
    two_turns = estimate_messages_tokens(conversation[6:])
    assert kept_positions(conversation, Turns(3, two_turns).apply(conversation)) == list(
        range(6, 14)
    )
    outcome = Turns(3, two_turns - 1).apply(conversation)
    assert kept_positions(conversation, outcome) == [12, 13]
    assert Turns(3, max_tokens=1).apply(conversation).kept == []


def test_unfinished_turn_counts_as_a_turn() -> None:
    conversation = [*trip_planning(), user("Also a hotel near Shinjuku?")]
    conversation.append(calls(ToolCall(id="h", name="search_hotels", arguments={"near": "新宿"})))
    outcome = Turns(1).apply(conversation)
    assert kept_positions(conversation, outcome) == [14, 15]
    assert kept_positions(conversation, Turns(2).apply(conversation)) == [12, 13, 14, 15]


def test_turns_with_uncounted_system_messages() -> None:
    conversation = trip_planning()
    outcome = Turns(1, count_system=False).apply(conversation)
    assert kept_positions(conversation, outcome) == [0, 12, 13]


@pytest.mark.parametrize(
    "make",
    [
        lambda: LastMessages(0),
        lambda: LastMessages(-3),
        lambda: LastMessages("5"),  # type: ignore[arg-type]
        lambda: LastMessages(True),
        lambda: LastMessages(2.5),  # type: ignore[arg-type]
        lambda: LastMessages(5, preserve_recent=-1),
        lambda: LastMessages(5, preserve_recent=None),  # type: ignore[arg-type]
        lambda: LastMessages(5, count_system="no"),  # type: ignore[arg-type]
        lambda: TokenBudget(0),
        lambda: TokenBudget(None),  # type: ignore[arg-type]
        lambda: Hybrid(0, 100),
        lambda: Hybrid(10, 0),
        lambda: Hybrid(10, 100, preserve_recent=-2),
        lambda: Turns(0),
        lambda: Turns(2, 0),
        lambda: Turns(2, max_tokens=-5),
        lambda: Turns(2, count_system=1),  # type: ignore[arg-type]
    ],
)
def test_invalid_settings_are_rejected(make: Callable[[], Any]) -> None:
    with pytest.raises(InvalidInput):
        make()


def test_invalid_input_is_also_value_error() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        LastMessages(0)


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        LastMessages(5, 2)  # type: ignore[call-arg]


def test_strategies_are_frozen() -> None:
    window = LastMessages(5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        window.max_messages = 6  # type: ignore[misc]


def test_non_messages_are_rejected() -> None:
    with pytest.raises(InvalidInput, match=r"messages\[1\]"):
        LastMessages(5).apply([user("hi"), {"role": "user", "content": "hi"}])  # type: ignore[list-item]


# -- random conversations -----------------------------------------------------------

SNIPPETS = [
    "ok",
    "hello world ",
    "Grüße ",
    "東京の天気 ",
    "🙂🚀 ",
    "def f(x):\n    return x\n",
    " ",
]
TEXT = st.builds(
    lambda snippet, times: snippet * times, st.sampled_from(SNIPPETS), st.integers(0, 40)
)
ARGUMENTS = st.one_of(
    TEXT,
    st.dictionaries(
        st.sampled_from(["city", "q", "limit"]),
        st.one_of(TEXT, st.integers(-(2**63), 2**64 - 1)),
        max_size=3,
    ),
)
TOKEN_COUNT = st.one_of(st.none(), st.none(), st.none(), st.integers(0, 60))


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Well-formed histories: tool calls are followed by all their results (except,
    possibly, a last call still running); system messages may appear anywhere,
    including between a call and its results."""
    call_ids = itertools.count()
    messages: list[Message] = []

    def add(role: Role, **fields: Any) -> None:
        content = draw(TEXT)
        messages.append(
            Message(role=role, content=content, token_count=draw(TOKEN_COUNT), **fields)
        )

    def maybe_system() -> None:
        if draw(st.integers(0, 7)) == 0:
            add("system")

    if draw(st.booleans()):
        add("system")
    for _ in range(draw(st.integers(0, 6))):
        add("user")
        for _ in range(draw(st.integers(0, 2))):
            tool_calls = [
                ToolCall(id=f"call_{next(call_ids)}", name="tool", arguments=draw(ARGUMENTS))
                for _ in range(draw(st.integers(1, 3)))
            ]
            add("assistant", tool_calls=tool_calls)
            for call in tool_calls:
                maybe_system()
                add("tool", tool_call_id=call.id)
        add("assistant")
        maybe_system()
    ending = draw(st.sampled_from(["answered", "asked", "calling", "partial"]))
    if ending != "answered":
        add("user")
    if ending in ("calling", "partial"):
        tool_calls = [
            ToolCall(id=f"call_{next(call_ids)}", name="tool"),
            ToolCall(id=f"call_{next(call_ids)}", name="tool"),
        ]
        add("assistant", tool_calls=tool_calls)
        if ending == "partial":
            add("tool", tool_call_id=tool_calls[0].id)
    return messages


def counted(messages: Sequence[Message], count_system: bool) -> list[Message]:
    return [m for m in messages if count_system or m.role != "system"]


def owner_of(messages: Sequence[Message], tool_message: Message) -> int | None:
    """Position of the assistant message that issued this tool result's call."""
    for i, m in enumerate(messages):
        if any(c.id == tool_message.tool_call_id for c in m.tool_calls):
            return i
    return None


def group_start(messages: Sequence[Message], i: int) -> int:
    """Where the tool group holding messages[i] starts (found by call ids)."""
    message = messages[i]
    if message.role == "tool":
        owner = owner_of(messages, message)
        assert owner is not None
        return owner
    if message.role == "system":
        for later in messages[i + 1 :]:
            if later.role == "tool":
                owner = owner_of(messages, later)
                assert owner is not None
                return owner if owner < i else i
            if later.role != "system":
                break
    return i


def assert_partition_in_order(conversation: Sequence[Message], outcome: StrategyResult) -> None:
    kept = positions(conversation, outcome.kept)
    dropped = positions(conversation, outcome.dropped)
    assert kept == sorted(kept)
    assert dropped == sorted(dropped)
    assert sorted(kept + dropped) == list(range(len(conversation)))


def assert_tool_groups_whole(conversation: Sequence[Message], kept: Sequence[Message]) -> None:
    """No orphaned tool result in ``kept``; no kept call is missing its results."""
    non_system = [m for m in kept if m.role != "system"]
    assert not non_system or non_system[0].role != "tool"
    kept_ids = {id(m) for m in kept}
    for m in kept:
        if m.role == "tool":
            owner = owner_of(conversation, m)
            assert owner is not None and id(conversation[owner]) in kept_ids
        for call in m.tool_calls:
            answers = [r for r in conversation if r.role == "tool" and r.tool_call_id == call.id]
            assert all(id(r) in kept_ids for r in answers)


def assert_is_suffix(whole: Sequence[Message], part: Sequence[Message]) -> None:
    assert [id(m) for m in part] == [id(m) for m in whole[len(whole) - len(part) :]]


def check_limited(
    conversation: list[Message],
    outcome: StrategyResult,
    *,
    max_messages: int | None,
    max_tokens: int | None,
    preserve_recent: int,
    count_system: bool,
) -> None:
    assert_partition_in_order(conversation, outcome)
    assert_tool_groups_whole(conversation, outcome.kept)
    if not count_system:
        kept_ids = {id(m) for m in outcome.kept}
        assert all(id(m) in kept_ids for m in conversation if m.role == "system")

    sequence = counted(conversation, count_system)
    kept = counted(outcome.kept, count_system)
    assert_is_suffix(sequence, kept)

    def over_budget(part: Sequence[Message]) -> bool:
        too_many = max_messages is not None and len(part) > max_messages
        too_long = max_tokens is not None and estimate_messages_tokens(part) > max_tokens
        return too_many or too_long

    first_kept = len(sequence) - len(kept)
    preserved_from = len(sequence)
    if preserve_recent and sequence:
        preserved_from = group_start(sequence, max(0, len(sequence) - preserve_recent))
    # Preserved messages (extended to whole groups) are never dropped ...
    assert first_kept <= preserved_from
    # ... and are the only reason to go over budget.
    if over_budget(kept):
        assert first_kept == preserved_from
    # As much as fits is kept: the next older group would not fit.
    if first_kept > 0:
        assert over_budget(sequence[group_start(sequence, first_kept - 1) :])


LIMITS = {
    "max_messages": st.integers(1, 12),
    "max_tokens": st.integers(1, 400),
    "preserve_recent": st.integers(0, 5),
    "count_system": st.booleans(),
}


@PROPERTY_SETTINGS
@given(
    conversations(),
    LIMITS["max_messages"],
    LIMITS["preserve_recent"],
    LIMITS["count_system"],
)
def test_sliding_window_properties(
    conversation: list[Message], max_messages: int, preserve_recent: int, count_system: bool
) -> None:
    strategy = LastMessages(
        max_messages, preserve_recent=preserve_recent, count_system=count_system
    )
    check_limited(
        conversation,
        strategy.apply(conversation),
        max_messages=max_messages,
        max_tokens=None,
        preserve_recent=preserve_recent,
        count_system=count_system,
    )


@PROPERTY_SETTINGS
@given(
    conversations(),
    LIMITS["max_tokens"],
    LIMITS["preserve_recent"],
    LIMITS["count_system"],
)
def test_token_budget_properties(
    conversation: list[Message], max_tokens: int, preserve_recent: int, count_system: bool
) -> None:
    strategy = TokenBudget(max_tokens, preserve_recent=preserve_recent, count_system=count_system)
    check_limited(
        conversation,
        strategy.apply(conversation),
        max_messages=None,
        max_tokens=max_tokens,
        preserve_recent=preserve_recent,
        count_system=count_system,
    )


@PROPERTY_SETTINGS
@given(
    conversations(),
    LIMITS["max_messages"],
    LIMITS["max_tokens"],
    LIMITS["preserve_recent"],
    LIMITS["count_system"],
)
def test_hybrid_properties(
    conversation: list[Message],
    max_messages: int,
    max_tokens: int,
    preserve_recent: int,
    count_system: bool,
) -> None:
    strategy = Hybrid(
        max_messages, max_tokens, preserve_recent=preserve_recent, count_system=count_system
    )
    check_limited(
        conversation,
        strategy.apply(conversation),
        max_messages=max_messages,
        max_tokens=max_tokens,
        preserve_recent=preserve_recent,
        count_system=count_system,
    )


def split_turns(messages: Sequence[Message]) -> list[list[Message]]:
    turns: list[list[Message]] = [[]]
    for m in messages:
        turns[-1].append(m)
        if m.role == "assistant" and not m.tool_calls:
            turns.append([])
    return [t for t in turns if t]


@PROPERTY_SETTINGS
@given(
    conversations(),
    st.integers(1, 6),
    st.one_of(st.none(), LIMITS["max_tokens"]),
    LIMITS["count_system"],
)
def test_turns_properties(
    conversation: list[Message], max_turns: int, max_tokens: int | None, count_system: bool
) -> None:
    outcome = Turns(max_turns, max_tokens, count_system=count_system).apply(conversation)
    assert_partition_in_order(conversation, outcome)
    assert_tool_groups_whole(conversation, outcome.kept)

    turns = split_turns(counted(conversation, count_system))
    kept = counted(outcome.kept, count_system)
    kept_turns = 0
    while sum(len(t) for t in turns[len(turns) - kept_turns :]) < len(kept):
        kept_turns += 1
    last_turns = [m for t in turns[len(turns) - kept_turns :] for m in t]
    assert [id(m) for m in kept] == [id(m) for m in last_turns]  # whole turns only
    assert kept_turns <= max_turns
    if max_tokens is not None:
        assert estimate_messages_tokens(kept) <= max_tokens
    if kept_turns < min(max_turns, len(turns)):
        one_more = [m for t in turns[len(turns) - kept_turns - 1 :] for m in t]
        assert max_tokens is not None and estimate_messages_tokens(one_more) > max_tokens


@PROPERTY_SETTINGS
@given(conversations(), st.data())
def test_histories_cut_mid_tool_sequence_never_yield_orphans(
    conversation: list[Message], data: st.DataObject
) -> None:
    """The store may have trimmed a call but not its results: those results go."""
    cut = conversation[data.draw(st.integers(0, len(conversation))) :]
    candidates: list[MemoryStrategy] = [
        LastMessages(6, preserve_recent=3),
        TokenBudget(200, preserve_recent=2, count_system=False),
        Hybrid(8, 300, preserve_recent=100),
        Turns(2, 500),
    ]
    strategy = data.draw(st.sampled_from(candidates))
    outcome = strategy.apply(cut)
    assert_partition_in_order(cut, outcome)
    assert_tool_groups_whole(cut, outcome.kept)
    orphans = [m for m in cut if m.role == "tool" and owner_of(cut, m) is None]
    dropped_ids = {id(m) for m in outcome.dropped}
    assert all(id(m) in dropped_ids for m in orphans)
    if isinstance(strategy, Hybrid):  # preserves everything that can be sent
        assert len(outcome.kept) + len(orphans) == len(cut)


@PROPERTY_SETTINGS
@given(conversations(), LIMITS["max_tokens"])
def test_trim_to_token_budget_matches_token_budget(
    conversation: list[Message], max_tokens: int
) -> None:
    trimmed = trim_to_token_budget(conversation, max_tokens)
    assert trimmed == TokenBudget(max_tokens).apply(conversation).kept
    assert estimate_messages_tokens(trimmed) <= max_tokens
    assert_is_suffix(conversation, trimmed)
    assert_tool_groups_whole(conversation, trimmed)
