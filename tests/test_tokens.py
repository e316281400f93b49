"""Token counting, the optional tiktoken tokenizer and trimming to a budget."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from redismem.context import tokens
from redismem.context.strategies import trim_to_token_budget
from redismem.context.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    Tokenizer,
    default_tokenizer,
    estimate_messages_tokens,
    estimate_tokens,
    message_tokens,
    tiktoken_tokenizer,
)
from redismem.errors import InvalidInput
from redismem.models import Message, ToolCall


@pytest.fixture(autouse=True)
def fresh_tiktoken_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees no remembered encodings and no earlier fallback log."""
    monkeypatch.setattr(tokens, "_TIKTOKEN_CACHE", {})
    monkeypatch.setattr(tokens, "_fallback_logged", False)


def install_fake_tiktoken(monkeypatch: pytest.MonkeyPatch, *, loads: bool) -> list[str]:
    """A stand-in ``tiktoken`` whose encoding counts whitespace-separated words."""
    requested: list[str] = []

    class WordEncoding:
        def encode(self, text: str, *, disallowed_special: object = "all") -> list[str]:
            assert disallowed_special == ()
            return text.split()

    def get_encoding(name: str) -> WordEncoding:
        requested.append(name)
        if not loads:
            raise ConnectionError("no route to openaipublic.blob.core.windows.net")
        return WordEncoding()

    module = types.ModuleType("tiktoken")
    module.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", module)
    return requested


def hide_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes `import tiktoken` fail


# -- estimates -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100), ("東京🙂", 1)],
)
def test_estimate_tokens_is_a_quarter_of_the_characters_rounded_up(
    text: str, expected: int
) -> None:
    assert estimate_tokens(text) == expected


def test_estimate_tokens_is_a_tokenizer() -> None:
    assert isinstance(estimate_tokens, Tokenizer)


def test_message_tokens_counts_content_and_overhead() -> None:
    message = Message(role="user", content="Wie wird das Wetter morgen in Zürich?")
    assert message_tokens(message) == MESSAGE_OVERHEAD_TOKENS + estimate_tokens(message.content)


def test_message_tokens_counts_tool_call_id_name_and_arguments() -> None:
    bare = Message(role="assistant", tool_calls=[ToolCall(id="c", name="f")])
    long_arguments = Message(
        role="assistant",
        tool_calls=[ToolCall(id="c", name="f", arguments={"query": "x" * 400})],
    )
    assert message_tokens(long_arguments) - message_tokens(bare) >= 100
    as_text = Message(
        role="assistant",
        tool_calls=[ToolCall(id="call_1", name="search", arguments='{"q": "redis"}')],
    )
    expected = (
        MESSAGE_OVERHEAD_TOKENS
        + estimate_tokens("call_1")
        + estimate_tokens("search")
        + estimate_tokens('{"q": "redis"}')
    )
    assert message_tokens(as_text) == expected


def test_message_tokens_counts_every_parallel_call() -> None:
    one = Message(role="assistant", tool_calls=[ToolCall(id="a", name="get_weather")])
    three = Message(
        role="assistant",
        tool_calls=[ToolCall(id=i, name="get_weather") for i in ("a", "b", "c")],
    )
    assert message_tokens(three) - MESSAGE_OVERHEAD_TOKENS == 3 * (
        message_tokens(one) - MESSAGE_OVERHEAD_TOKENS
    )


def test_message_tokens_counts_name_and_tool_call_id() -> None:
    plain = Message(role="tool", content="42")
    labelled = Message(role="tool", content="42", name="calculator", tool_call_id="call_abc")
    assert message_tokens(labelled) == (
        message_tokens(plain) + estimate_tokens("calculator") + estimate_tokens("call_abc")
    )


def test_message_tokens_uses_the_given_tokenizer() -> None:
    message = Message(role="user", content="one two three")
    assert message_tokens(message, lambda text: len(text.split())) == MESSAGE_OVERHEAD_TOKENS + 3


def test_estimate_messages_tokens_prefers_stored_counts() -> None:
    stored = Message(role="user", content="x" * 4_000, token_count=7)
    fresh = Message(role="assistant", content="abcd")
    assert estimate_messages_tokens([stored, fresh]) == 7 + MESSAGE_OVERHEAD_TOKENS + 1
    assert estimate_messages_tokens([]) == 0


# -- tiktoken --------------------------------------------------------------------


def test_tiktoken_missing_falls_back_and_logs_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    hide_tiktoken(monkeypatch)
    with caplog.at_level(logging.INFO, logger="redismem.context.tokens"):
        assert tiktoken_tokenizer() is None
        assert tiktoken_tokenizer() is None
        assert tiktoken_tokenizer("o200k_base") is None
        assert default_tokenizer() is estimate_tokens
    fallbacks = [r for r in caplog.records if r.name == "redismem.context.tokens"]
    assert len(fallbacks) == 1
    assert fallbacks[0].levelno == logging.INFO
    assert "estimate" in fallbacks[0].getMessage()


def test_tiktoken_that_cannot_load_its_encoding_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    requested = install_fake_tiktoken(monkeypatch, loads=False)
    with caplog.at_level(logging.INFO, logger="redismem.context.tokens"):
        assert tiktoken_tokenizer() is None
        assert tiktoken_tokenizer() is None
    assert requested == ["cl100k_base"]  # a failed load is not retried
    assert "ConnectionError" in caplog.text
    assert default_tokenizer() is estimate_tokens


def test_tiktoken_tokenizer_when_available(monkeypatch: pytest.MonkeyPatch) -> None:
    requested = install_fake_tiktoken(monkeypatch, loads=True)
    count = tiktoken_tokenizer("o200k_base")
    assert count is not None
    assert isinstance(count, Tokenizer)
    assert count("tokens are counted by the encoding <|endoftext|>") == 7
    assert tiktoken_tokenizer("o200k_base") is count
    assert requested == ["o200k_base"]
    chosen = default_tokenizer()
    assert chosen is not estimate_tokens
    assert chosen("a b c") == 3
    message = Message(role="user", content="one two three")
    assert message_tokens(message, chosen) == MESSAGE_OVERHEAD_TOKENS + 3


@pytest.mark.parametrize("encoding", ["", 5, None])
def test_tiktoken_tokenizer_rejects_bad_encoding_names(encoding: object) -> None:
    with pytest.raises(InvalidInput):
        tiktoken_tokenizer(encoding)  # type: ignore[arg-type]


# -- trimming to a budget -----------------------------------------------------------


def research_session() -> list[Message]:
    return [
        Message(role="system", content="You are a research assistant."),
        Message(role="user", content="Summarise the last three Redis releases. " * 5),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="r1", name="fetch", arguments={"url": "https://redis.io/7.2"}),
                ToolCall(id="r2", name="fetch", arguments={"url": "https://redis.io/7.4"}),
            ],
        ),
        Message(role="tool", tool_call_id="r1", content="Release notes 7.2 … " * 40),
        Message(role="tool", tool_call_id="r2", content="Release notes 7.4 … " * 40),
        Message(role="assistant", content="7.2 added functions; 7.4 added hash-field TTLs."),
        Message(role="user", content="Und auf Deutsch, bitte."),
        Message(role="assistant", content="7.2 brachte Funktionen; 7.4 TTLs für Hash-Felder."),
    ]


def test_trim_keeps_everything_that_fits() -> None:
    session = research_session()
    assert trim_to_token_budget(session, estimate_messages_tokens(session)) == session


def test_trim_keeps_the_most_recent_messages_that_fit() -> None:
    session = research_session()
    budget = estimate_messages_tokens(session[5:])
    assert trim_to_token_budget(session, budget) == session[5:]
    assert trim_to_token_budget(session, budget - 1) == session[6:]


def test_trim_drops_a_tool_call_with_its_results() -> None:
    session = research_session()
    # Room for the second (long) result but not the first: neither result nor
    # the call that asked for them is kept.
    budget = estimate_messages_tokens(session[4:])
    assert trim_to_token_budget(session, budget) == session[5:]
    # Room for the whole group brings it back in one piece.
    budget = estimate_messages_tokens(session[2:])
    assert trim_to_token_budget(session, budget) == session[2:]


def test_trim_never_starts_with_an_orphaned_tool_result() -> None:
    session = research_session()[3:]  # the call was already trimmed away
    trimmed = trim_to_token_budget(session, 100_000)
    assert trimmed == session[2:]
    assert trimmed[0].role == "assistant"


def test_trim_keeps_a_trailing_tool_call_without_results() -> None:
    session = [
        *research_session(),
        Message(role="user", content="Check 8.0 too."),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="r3", name="fetch", arguments={"url": "https://redis.io/8"})],
        ),
    ]
    budget = estimate_messages_tokens(session[-2:])
    assert trim_to_token_budget(session, budget) == session[-2:]


def test_trim_uses_the_given_tokenizer_and_stored_counts() -> None:
    session = [
        Message(role="user", content="alpha beta"),
        Message(role="assistant", content="x" * 10_000, token_count=1),
    ]

    def words(text: str) -> int:
        return len(text.split())

    assert trim_to_token_budget(session, 1 + MESSAGE_OVERHEAD_TOKENS + 2, words) == session
    assert trim_to_token_budget(session, 1 + MESSAGE_OVERHEAD_TOKENS + 1, words) == session[1:]


def test_trim_with_zero_budget_keeps_nothing() -> None:
    assert trim_to_token_budget(research_session(), 0) == []
    assert trim_to_token_budget([], 10) == []


@pytest.mark.parametrize("budget", [-1, 2.5, "100", True])
def test_trim_rejects_bad_budgets(budget: object) -> None:
    with pytest.raises(InvalidInput):
        trim_to_token_budget(research_session(), budget)  # type: ignore[arg-type]
