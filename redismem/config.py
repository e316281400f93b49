"""Client options as one typed object.

``MemoryConfig`` holds every option ``Memory.connect`` takes. Build it from
keyword arguments, from a URL (``from_url``) or from the environment
(``from_env``: ``REDISMEM_URL``, ``REDISMEM_NAMESPACE``, ``REDISMEM_TTL``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any

from .errors import InvalidInput
from .keys import KeyLayout
from .tokens import estimate_tokens

__all__ = ["DEFAULT_TTL", "EMBEDDED_URL", "MemoryConfig", "Hook"]

EMBEDDED_URL = "memory://"
DEFAULT_TTL = timedelta(days=7)

#: A hook gets keyword arguments ``session_id``, ``user_id`` and ``messages``;
#: it may be a plain function or a coroutine function.
Hook = Callable[..., Any]


def _ttl_ms(value: float | timedelta | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidInput(f"ttl must be seconds, a timedelta or None, not {type(value).__name__}")
    if seconds <= 0:
        raise InvalidInput(f"ttl must be positive, got {seconds} seconds")
    return max(1, round(seconds * 1000))


def _optional_positive_int(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidInput(f"{name} must be a positive int or None, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """Every option of a ``Memory`` client. See the README's options table."""

    url: str = EMBEDDED_URL
    namespace: str = "redismem"
    ttl: float | timedelta | None = DEFAULT_TTL
    refresh_ttl_on_read: bool = True
    max_messages: int | None = None
    store_system_messages: bool = False
    max_message_bytes: int = 1024 * 1024
    tokenizer: Callable[[str], int] = estimate_tokens
    on_read: Hook | None = None
    on_write: Hook | None = None
    # Connection behaviour.
    connect_timeout: float = 2.0
    socket_timeout: float = 5.0
    retries: int = 3
    # Summarization (driven by the workers).
    keep_recent: int | None = None
    summarize_batch: int = 20
    compact: bool = True
    queue_url: str | None = None
    queue_name: str = "redismem:queue"
    summarize_delay: float = 1.0
    layout: KeyLayout = field(init=False, repr=False)
    ttl_ms: int | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or "://" not in self.url:
            raise InvalidInput(f"url must look like redis://host:port/db, got {self.url!r}")
        object.__setattr__(self, "layout", KeyLayout(self.namespace))
        object.__setattr__(self, "ttl_ms", _ttl_ms(self.ttl))
        for name in ("refresh_ttl_on_read", "store_system_messages", "compact"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInput(f"{name} must be a bool")
        _optional_positive_int("max_messages", self.max_messages)
        _optional_positive_int("max_message_bytes", self.max_message_bytes)
        _optional_positive_int("summarize_batch", self.summarize_batch)
        if self.keep_recent is not None and (
            not isinstance(self.keep_recent, int)
            or isinstance(self.keep_recent, bool)
            or self.keep_recent < 0
        ):
            raise InvalidInput(f"keep_recent must be an int >= 0 or None, got {self.keep_recent!r}")
        if not callable(self.tokenizer):
            raise InvalidInput("tokenizer must be a callable str -> int")
        for hook in ("on_read", "on_write"):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise InvalidInput(f"{hook} must be callable")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise InvalidInput("retries must be an int >= 0")
        if self.connect_timeout <= 0 or self.socket_timeout <= 0:
            raise InvalidInput("timeouts must be positive")

    @property
    def embedded(self) -> bool:
        return self.url.startswith("memory://")

    @classmethod
    def option_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls) if f.init)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryConfig:
        return cls(url=url, **options)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **options: Any) -> MemoryConfig:
        """Options from ``REDISMEM_URL``, ``REDISMEM_NAMESPACE``, ``REDISMEM_TTL``
        (seconds; ``none`` for no expiry) and ``REDISMEM_QUEUE_URL``; keyword
        arguments win."""
        env = os.environ if env is None else env
        found: dict[str, Any] = {}
        if env.get("REDISMEM_URL"):
            found["url"] = env["REDISMEM_URL"]
        if env.get("REDISMEM_NAMESPACE"):
            found["namespace"] = env["REDISMEM_NAMESPACE"]
        if env.get("REDISMEM_QUEUE_URL"):
            found["queue_url"] = env["REDISMEM_QUEUE_URL"]
        if env.get("REDISMEM_TTL"):
            raw = env["REDISMEM_TTL"].strip().lower()
            try:
                found["ttl"] = None if raw in ("none", "0", "never") else float(raw)
            except ValueError as exc:
                raise InvalidInput(f"REDISMEM_TTL must be seconds or 'none', got {raw!r}") from exc
        found.update(options)
        return cls(**found)

    def replace(self, **changes: Any) -> MemoryConfig:
        return replace(self, **changes)
