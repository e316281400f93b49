"""Token counting.

The store records a token estimate per message so reads can honour a token
budget without re-tokenizing. A ``Tokenizer`` is any callable ``str -> int``;
the default estimates about four characters per token, which is close enough
for budgeting English and code and needs no model files.

``tiktoken_tokenizer()`` gives exact counts when the optional ``tiktoken``
package is installed and its encoding can be loaded; ``default_tokenizer()``
picks it when it can and falls back to the estimate otherwise. The core never
switches tokenizers on its own: callers opt in.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from .errors import InvalidInput
from .models import Message

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "Tokenizer",
    "default_tokenizer",
    "estimate_messages_tokens",
    "estimate_tokens",
    "message_tokens",
    "tiktoken_tokenizer",
    "trim_to_token_budget",
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
    if not isinstance(encoding, str) or not encoding:
        raise InvalidInput(f"encoding must be a non-empty string, got {encoding!r}")
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


def trim_to_token_budget(
    messages: Sequence[Message],
    max_tokens: int,
    tokenizer: Callable[[str], int] = estimate_tokens,
) -> list[Message]:
    """The most recent messages whose tokens fit in ``max_tokens``, in order.

    Shorthand for ``TokenBudget(max_tokens).apply(messages, tokenizer).kept``
    (see ``redismem.strategies`` for the full rules). In short: an assistant
    tool call and the tool results right after it are kept or cut together,
    so the result never starts with an orphaned tool result and never holds a
    tool call whose results were cut; a trailing tool call that has no
    results yet is kept like any message; tool results whose call is not in
    ``messages`` are left out. Stored ``token_count`` values are used when
    set. ``max_tokens=0`` keeps nothing; a negative budget is ``InvalidInput``.
    """
    # Imported here because redismem.strategies builds on this module.
    from .strategies import TokenBudget

    if max_tokens == 0 and isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        return []
    return TokenBudget(max_tokens).apply(messages, tokenizer).kept
