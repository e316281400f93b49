"""What text costs in tokens, and cutting a text to fit a budget.

The store records a token estimate per message so reads can honour a token
budget without re-tokenizing. A ``Tokenizer`` is any callable ``str -> int``;
the default estimates about four characters per token, which is close enough
for budgeting English and code and needs no model files.

``tiktoken_tokenizer()`` gives exact counts when the optional ``tiktoken``
package is installed and its encoding can be loaded; ``default_tokenizer()``
picks it when it can and falls back to the estimate otherwise. The core never
switches tokenizers on its own: callers opt in.

``message_tokens`` is what one message costs (content, name, tool calls and
the per-message overhead), ``estimate_messages_tokens`` what a list costs.

``fit_text`` is the one way text is cut to a budget: the summary in
``Memory.context`` (and every other summary message), the memory message of
``build_context`` and the summaries ``SummarizingMemory`` writes all go
through it. It is internal, so it is not in ``__all__``. Trimming a history
to a budget is a strategy: ``trim_to_token_budget`` in
``redismem.context.strategies``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Literal, Protocol, runtime_checkable

from redismem.checks import check_text
from redismem.models import Message

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "Tokenizer",
    "default_tokenizer",
    "estimate_messages_tokens",
    "estimate_tokens",
    "message_tokens",
    "tiktoken_tokenizer",
]

logger = logging.getLogger(__name__)

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


# -- tokenizers --------------------------------------------------------------

# Encoding name -> tokenizer, or None when it could not be loaded. Loading is
# tried once per encoding: a failed load may mean a network timeout, which we
# do not want to pay on every call.
_TIKTOKEN_CACHE: dict[str, Tokenizer | None] = {}
_fallback_logged = False


def tiktoken_tokenizer(encoding: str = "cl100k_base") -> Tokenizer | None:
    """An exact tokenizer for ``encoding`` backed by ``tiktoken``, or ``None``.

    Returns ``None`` when ``tiktoken`` is not installed or the encoding cannot
    be loaded (tiktoken downloads encodings on first use, so this fails
    offline unless its cache holds the file). The first fallback is logged at
    INFO level, once per process. The outcome is remembered per encoding.
    Special-token text such as ``<|endoftext|>`` is counted as plain text.
    """
    check_text("encoding", encoding)
    if encoding not in _TIKTOKEN_CACHE:
        _TIKTOKEN_CACHE[encoding] = _load_tiktoken(encoding)
    return _TIKTOKEN_CACHE[encoding]


def _load_tiktoken(encoding: str) -> Tokenizer | None:
    try:
        import tiktoken

        codec = tiktoken.get_encoding(encoding)
    except Exception as exc:  # ImportError, network errors, unknown encodings, ...
        _log_fallback(encoding, exc)
        return None

    def count_tiktoken_tokens(text: str, /) -> int:
        return len(codec.encode(text, disallowed_special=()))

    return count_tiktoken_tokens


def _log_fallback(encoding: str, exc: Exception) -> None:
    global _fallback_logged
    if _fallback_logged:
        return
    _fallback_logged = True
    logger.info(
        "tiktoken encoding %r unavailable (%s: %s); counting tokens with the "
        "four-characters-per-token estimate",
        encoding,
        type(exc).__name__,
        exc,
    )


def default_tokenizer() -> Tokenizer:
    """The ``cl100k_base`` tiktoken tokenizer when available, else ``estimate_tokens``."""
    return tiktoken_tokenizer() or estimate_tokens
