"""What text costs in tokens, and cutting a text to fit a budget.

The store records a token estimate per message so reads can honour a token
budget without re-tokenizing. A ``Tokenizer`` is any callable ``str -> int``;
the default estimates about four characters per token, which is close enough
for budgeting English and code and needs no model files. (Exact tokenizers
and the public face of all this: ``redismem.context.tokens``.)

``fit_text`` is the one way text is cut to a budget: the summary in
``Memory.context`` (and every other summary message), the memory message of
``build_context`` and the summaries ``SummarizingMemory`` writes all go
through it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Literal, Protocol, runtime_checkable

from redismem.models import Message

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "Tokenizer",
    "estimate_messages_tokens",
    "estimate_tokens",
    "fit_text",
    "message_tokens",
]

#: Tokens a chat API spends per message on role and separators.
MESSAGE_OVERHEAD_TOKENS = 4


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens of a text."""

    def __call__(self, text: str, /) -> int: ...


def estimate_tokens(text: str) -> int:
    """About one token per four characters (rounded up)."""
    return (len(text) + 3) // 4


def message_tokens(message: Message, tokenizer: Callable[[str], int] = estimate_tokens) -> int:
    """Tokens of one message: content, name, tool calls and the per-message overhead.

    Tool calls count their id, function name and arguments (dict arguments as
    their JSON text), so a tool-heavy history is not underestimated.
    """
    total = MESSAGE_OVERHEAD_TOKENS + tokenizer(message.content)
    if message.name:
        total += tokenizer(message.name)
    for call in message.tool_calls:
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        total += tokenizer(call.name) + tokenizer(args) + tokenizer(call.id)
    if message.tool_call_id:
        total += tokenizer(message.tool_call_id)
    return total


def estimate_messages_tokens(
    messages: Iterable[Message], tokenizer: Callable[[str], int] = estimate_tokens
) -> int:
    """Tokens of a list of messages, using stored counts where the store filled them."""
    return sum(
        m.token_count if m.token_count is not None else message_tokens(m, tokenizer)
        for m in messages
    )


def fit_text(
    text: str,
    cost: Callable[[str], int],
    budget: int,
    *,
    keep: Literal["head", "tail"] = "head",
    text_cost: int | None = None,
) -> str:
    """The longest start (``keep="head"``) or end (``"tail"``) of ``text``
    whose ``cost`` is at most ``budget``: ``text`` itself when it fits, ""
    when no part does. Pass ``text_cost`` when ``cost(text)`` is known.

    ``cost`` renders a candidate and counts its tokens; it is assumed not to
    fall when the candidate grows. The size is found by interpolating between
    the costs seen so far, galloping along a run of sizes that cost exactly
    the budget, and bisecting when interpolation stalls: a handful of ``cost``
    calls, mostly on candidates about the size of the result.
    """
    full = cost(text) if text_cost is None else text_cost
    if full <= budget:
        return text
    empty = cost("")
    if empty > budget:
        return ""

    def part(size: int) -> str:
        return text[:size] if keep == "head" else text[len(text) - size :]

    low, high = 0, len(text)  # part(low) fits, part(high) does not
    low_cost, high_cost = empty, full
    step = 0  # the gallop's stride along sizes costing exactly the budget; -1 once past them
    slow = 0  # interpolations in a row that did not halve the bracket
    while high - low > 1:
        width = high - low
        interpolated = False
        if slow >= 2 or step < 0:
            size, slow = low + width // 2, 0
        elif low_cost == budget:
            step = step * 2 or 1
            size = low + step
        else:  # where the cost would meet the budget, growing linearly across the bracket
            size = low + (budget - low_cost) * width // (high_cost - low_cost)
            interpolated = True
        size = min(max(size, low + 1), high - 1)
        size_cost = cost(part(size))
        if size_cost <= budget:
            low, low_cost = size, size_cost
        else:
            high, high_cost = size, size_cost
            step = -1 if step else 0
        if interpolated:
            slow = slow + 1 if 2 * (high - low) > width else 0
    return part(low)
