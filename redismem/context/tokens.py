"""Tokenizers and token budgets: the public face of token counting.

The store records a token estimate per message so reads can honour a token
budget without re-tokenizing. A ``Tokenizer`` is any callable ``str -> int``;
the default estimates about four characters per token, which is close enough
for budgeting English and code and needs no model files.

``tiktoken_tokenizer()`` gives exact counts when the optional ``tiktoken``
package is installed and its encoding can be loaded; ``default_tokenizer()``
picks it when it can and falls back to the estimate otherwise. The core never
switches tokenizers on its own: callers opt in.

The counting itself lives in ``redismem.context.counting`` and trimming a history to
a budget (``trim_to_token_budget``) in ``redismem.context.strategies``; both are
exported here too.
"""

from __future__ import annotations

import logging

from redismem.checks import check_text
from redismem.context.counting import (
    MESSAGE_OVERHEAD_TOKENS,
    Tokenizer,
    estimate_messages_tokens,
    estimate_tokens,
    message_tokens,
)
from redismem.context.strategies import trim_to_token_budget

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
