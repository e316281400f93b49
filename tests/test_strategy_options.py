"""Strategy settings and edge rules the mutation run found unpinned
(see docs/mutation-testing.md). Through the exported strategy classes only."""

from __future__ import annotations

from typing import Any

import pytest

from redismem import Hybrid, InvalidInput, LastMessages, TokenBudget, Turns

# Each strategy with valid required arguments, and the options it takes.
STRATEGIES: dict[str, tuple[type[Any], tuple[Any, ...], dict[str, str]]] = {
    "LastMessages": (
        LastMessages,
        (5,),
        {"max_messages": "positive", "preserve_recent": "non_negative", "count_system": "bool"},
    ),
    "TokenBudget": (
        TokenBudget,
        (100,),
        {"max_tokens": "positive", "preserve_recent": "non_negative", "count_system": "bool"},
    ),
    "Hybrid": (
        Hybrid,
        (5, 100),
        {
            "max_messages": "positive",
            "max_tokens": "positive",
            "preserve_recent": "non_negative",
            "count_system": "bool",
        },
    ),
    "Turns": (
        Turns,
        (2,),
        {"max_turns": "positive", "max_tokens": "positive", "count_system": "bool"},
    ),
}
BAD = {
    "positive": [0, -1, True, 2.0, "3", None],
    "non_negative": [-1, True, 1.5, "0", None],
    "bool": [1, 0, "yes", None],
}
GOOD = {"positive": [1, 7], "non_negative": [0, 3], "bool": [True, False]}
POSITIONAL = {"max_messages", "max_tokens", "max_turns"}


def _make(name: str, option: str, value: Any) -> Any:
    cls, required, options = STRATEGIES[name]
    kwargs: dict[str, Any] = {}
    positional = list(required)
    positional_names = [o for o in options if o in POSITIONAL]
    if option in positional_names and positional_names.index(option) < len(positional):
        positional[positional_names.index(option)] = value
    else:
        kwargs[option] = value
    return cls(*positional, **kwargs)


CASES = [
    (name, option, value)
    for name, (_, _, options) in STRATEGIES.items()
    for option, kind in options.items()
    for value in BAD[kind]
    # Turns' max_tokens is optional: None means no token limit.
    if not (name == "Turns" and option == "max_tokens" and value is None)
]


@pytest.mark.parametrize(("name", "option", "value"), CASES)
def test_every_option_of_every_strategy_is_checked_and_named(
    name: str, option: str, value: Any
) -> None:
    with pytest.raises(InvalidInput, match=rf"\b{option}\b"):
        _make(name, option, value)


@pytest.mark.parametrize(
    ("name", "option", "value"),
    [
        (name, option, value)
        for name, (_, _, options) in STRATEGIES.items()
        for option, kind in options.items()
        for value in GOOD[kind]
    ],
)
def test_valid_options_are_accepted(name: str, option: str, value: Any) -> None:
    assert getattr(_make(name, option, value), option) == value
