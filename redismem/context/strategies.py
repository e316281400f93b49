"""Context strategies: which messages of a history go to the model.

A strategy splits a history (oldest first) into ``kept``, the messages to
send, and ``dropped``, the messages cut off, which are candidates for
summarization. Every strategy follows the same rules.

Tool groups are atomic
    An assistant message with ``tool_calls`` and the tool messages right after
    it form one group (system messages sitting between the call and its
    results belong to the group too; results are matched by position, not by
    call id: the rule of ``redismem.context.toolgroups`` with
    ``system="join_if_results_follow"``). A group is kept or dropped whole,
    so ``kept`` never starts with a tool result whose call was cut and never
    holds a tool call whose results were cut. A trailing tool call with no
    results yet is a group of one: it is the real state of the conversation
    and is kept like any other message.

Orphaned tool results are dropped
    A tool message that does not follow an assistant tool call (its call was
    trimmed away before the history reached the strategy) is always dropped,
    even when it would be preserved: no chat API accepts it.

Budgets are never exceeded, except for preserved messages
    A strategy keeps the longest run of most recent groups that fits all its
    limits. It stops at the first group that does not fit; it never skips a
    group to keep an older one. The ``preserve_recent`` most recent messages
    are always kept, even over budget; if that would split a tool group, the
    whole group is preserved. Without preservation, when the newest group
    alone is over budget nothing is kept.

System messages
    With ``count_system=True`` (the default) system messages count toward the
    limits and are dropped like any other message. With ``count_system=False``
    they are always kept, in place, and count toward no limit (so the kept
    messages may exceed ``max_tokens`` by their size, and ``preserve_recent``
    counts only the other messages).

Order is kept
    Every input message lands in exactly one of ``kept`` and ``dropped``, both
    in input order; they are the input's own objects, not copies. For a
    well-formed history, ``dropped`` is the oldest messages: a prefix of the
    input (of its non-system messages when ``count_system=False``).

Token costs are a message's stored ``token_count`` when set, else
``message_tokens(message, tokenizer)``.

``trim_to_token_budget`` is the shorthand for ``TokenBudget``'s kept messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Protocol, runtime_checkable

from redismem.checks import check_bool, check_int, check_items
from redismem.context.tokens import estimate_tokens, message_tokens
from redismem.context.toolgroups import SystemRule, ToolUnits, is_tool_call, tool_units
from redismem.models import Message

__all__ = [
    "Hybrid",
    "MemoryStrategy",
    "LastMessages",
    "StrategyResult",
    "TokenBudget",
    "Turns",
    "trim_to_token_budget",
]


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """What a strategy kept and what it cut off, each in input order."""

    kept: list[Message]
    dropped: list[Message]


@runtime_checkable
class MemoryStrategy(Protocol):
    """Decides which messages of a history stay in the context window."""

    def apply(
        self,
        messages: Sequence[Message],
        tokenizer: Callable[[str], int] = estimate_tokens,
    ) -> StrategyResult: ...


@dataclass(frozen=True, slots=True)
class LastMessages:
    """Keep at most ``max_messages`` of the most recent messages.

    The ``preserve_recent`` most recent messages are always kept, even beyond
    ``max_messages`` (extended to whole tool groups). See the module docstring
    for the rules on tool groups and system messages.
    """

    max_messages: int
    _: KW_ONLY
    preserve_recent: int = 0
    count_system: bool = True

    def __post_init__(self) -> None:
        check_int("max_messages", self.max_messages, minimum=1)
        check_int("preserve_recent", self.preserve_recent)
        check_bool("count_system", self.count_system)

    def apply(
        self,
        messages: Sequence[Message],
        tokenizer: Callable[[str], int] = estimate_tokens,
    ) -> StrategyResult:
        return _apply_limits(
            messages,
            tokenizer,
            max_messages=self.max_messages,
            max_tokens=None,
            preserve_recent=self.preserve_recent,
            count_system=self.count_system,
        )


@dataclass(frozen=True, slots=True)
class TokenBudget:
    """Keep the most recent messages whose tokens total at most ``max_tokens``.

    The ``preserve_recent`` most recent messages are always kept, even beyond
    ``max_tokens`` (extended to whole tool groups). See the module docstring
    for the rules on tool groups and system messages.
    """

    max_tokens: int
    _: KW_ONLY
    preserve_recent: int = 0
    count_system: bool = True

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, minimum=1)
        check_int("preserve_recent", self.preserve_recent)
        check_bool("count_system", self.count_system)

    def apply(
        self,
        messages: Sequence[Message],
        tokenizer: Callable[[str], int] = estimate_tokens,
    ) -> StrategyResult:
        return _apply_limits(
            messages,
            tokenizer,
            max_messages=None,
            max_tokens=self.max_tokens,
            preserve_recent=self.preserve_recent,
            count_system=self.count_system,
        )


@dataclass(frozen=True, slots=True)
class Hybrid:
    """Keep the most recent messages within ``max_messages`` and ``max_tokens``.

    Trimming stops at whichever limit is hit first. The ``preserve_recent``
    most recent messages are always kept, even beyond either limit (extended
    to whole tool groups). See the module docstring for the rules on tool
    groups and system messages.
    """

    max_messages: int
    max_tokens: int
    _: KW_ONLY
    preserve_recent: int = 0
    count_system: bool = True

    def __post_init__(self) -> None:
        check_int("max_messages", self.max_messages, minimum=1)
        check_int("max_tokens", self.max_tokens, minimum=1)
        check_int("preserve_recent", self.preserve_recent)
        check_bool("count_system", self.count_system)

    def apply(
        self,
        messages: Sequence[Message],
        tokenizer: Callable[[str], int] = estimate_tokens,
    ) -> StrategyResult:
        return _apply_limits(
            messages,
            tokenizer,
            max_messages=self.max_messages,
            max_tokens=self.max_tokens,
            preserve_recent=self.preserve_recent,
            count_system=self.count_system,
        )


@dataclass(frozen=True, slots=True)
class Turns:
    """Keep the last ``max_turns`` whole turns, within ``max_tokens`` if given.

    A turn runs up to and including an assistant message without tool calls
    (the answer); an unfinished last turn (a user message not yet answered, or
    tool calls still running) counts as a turn too. Turns are kept or dropped
    whole, oldest first, so tool sequences always stay whole. When
    ``max_tokens`` is set, the oldest kept turns are dropped until the rest
    fit; if the newest turn alone does not fit, nothing is kept. Nothing is
    preserved over budget. System messages follow ``count_system`` as in the
    module docstring: counted ones belong to the turn they appear in.
    """

    max_turns: int
    max_tokens: int | None = None
    _: KW_ONLY
    count_system: bool = True

    def __post_init__(self) -> None:
        check_int("max_turns", self.max_turns, minimum=1)
        if self.max_tokens is not None:
            check_int("max_tokens", self.max_tokens, minimum=1)
        check_bool("count_system", self.count_system)

    def apply(
        self,
        messages: Sequence[Message],
        tokenizer: Callable[[str], int] = estimate_tokens,
    ) -> StrategyResult:
        layout = _layout(messages, self.count_system)
        turns = _turns(messages, layout.units)
        costs = [(1, _tokens(messages, turn, tokenizer)) for turn in turns]
        first = _first_kept_unit(costs, (self.max_turns, self.max_tokens), preserved_units=0)
        return _result(messages, layout.free, turns[first:])


def trim_to_token_budget(
    messages: Sequence[Message],
    max_tokens: int,
    tokenizer: Callable[[str], int] = estimate_tokens,
) -> list[Message]:
    """The most recent messages whose tokens fit in ``max_tokens``, in order.

    Shorthand for ``TokenBudget(max_tokens).apply(messages, tokenizer).kept``
    (see ``redismem.context.strategies`` for the full rules). In short: an assistant
    tool call and the tool results right after it are kept or cut together,
    so the result never starts with an orphaned tool result and never holds a
    tool call whose results were cut; a trailing tool call that has no
    results yet is kept like any message; tool results whose call is not in
    ``messages`` are left out. Stored ``token_count`` values are used when
    set. ``max_tokens=0`` keeps nothing; a negative budget is ``InvalidInput``.
    """
    if check_int("max_tokens", max_tokens) == 0:
        return []
    return TokenBudget(max_tokens).apply(messages, tokenizer).kept


# -- shared machinery ---------------------------------------------------------


def _layout(messages: Sequence[Message], count_system: bool) -> ToolUnits:
    """Group the positions of ``messages``: budgeted units (each kept or dropped
    whole), free positions (uncounted system messages, always kept) and
    orphaned tool results (dropped)."""
    check_items("messages", messages, Message)
    system: SystemRule = "join_if_results_follow" if count_system else "free"
    return tool_units(messages, system=system, orphans="drop")


def _turns(messages: Sequence[Message], groups: list[list[int]]) -> list[list[int]]:
    """Concatenate groups into turns, each ending at an assistant answer."""
    turns: list[list[int]] = []
    current: list[int] = []
    for group in groups:
        current.extend(group)
        head = messages[group[0]]
        if head.role == "assistant" and not is_tool_call(head):
            turns.append(current)
            current = []
    if current:
        turns.append(current)
    return turns


def _apply_limits(
    messages: Sequence[Message],
    tokenizer: Callable[[str], int],
    *,
    max_messages: int | None,
    max_tokens: int | None,
    preserve_recent: int,
    count_system: bool,
) -> StrategyResult:
    layout = _layout(messages, count_system)
    groups = layout.units
    costs = [(len(group), _tokens(messages, group, tokenizer)) for group in groups]
    first = _first_kept_unit(
        costs, (max_messages, max_tokens), _preserved_groups(groups, preserve_recent)
    )
    return _result(messages, layout.free, groups[first:])


def _preserved_groups(groups: list[list[int]], preserve_recent: int) -> int:
    """How many of the newest groups hold the ``preserve_recent`` newest messages."""
    preserved_groups = 0
    preserved_messages = 0
    for group in reversed(groups):
        if preserved_messages >= preserve_recent:
            break
        preserved_groups += 1
        preserved_messages += len(group)
    return preserved_groups


def _first_kept_unit(
    costs: list[tuple[int, int]],
    limits: tuple[int | None, int | None],
    preserved_units: int,
) -> int:
    """Index of the oldest unit kept: newest units are taken while they fit.

    ``costs[i]`` is unit i's (messages or turns, tokens); a ``None`` limit is
    no limit. The ``preserved_units`` newest units are taken regardless.
    """
    totals = (0, 0)
    first = len(costs)
    for index in range(len(costs) - 1, -1, -1):
        candidate = (totals[0] + costs[index][0], totals[1] + costs[index][1])
        preserved = index >= len(costs) - preserved_units
        fits = all(
            limit is None or total <= limit for total, limit in zip(candidate, limits, strict=True)
        )
        if not (preserved or fits):
            break
        totals = candidate
        first = index
    return first


def _tokens(
    messages: Sequence[Message], positions: list[int], tokenizer: Callable[[str], int]
) -> int:
    total = 0
    for position in positions:
        message = messages[position]
        stored = message.token_count
        total += stored if stored is not None else message_tokens(message, tokenizer)
    return total


def _result(
    messages: Sequence[Message], free: list[int], kept_units: list[list[int]]
) -> StrategyResult:
    kept_positions = set(free)
    for unit in kept_units:
        kept_positions.update(unit)
    kept = [m for position, m in enumerate(messages) if position in kept_positions]
    dropped = [m for position, m in enumerate(messages) if position not in kept_positions]
    return StrategyResult(kept=kept, dropped=dropped)


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
