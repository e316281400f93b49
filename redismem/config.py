"""Client options as one typed object.

``MemoryConfig`` holds every option ``Memory.connect`` takes. Build it from
keyword arguments, from a URL (``from_url``) or from the environment
(``from_env``: ``REDISMEM_URL``, ``REDISMEM_NAMESPACE``, ``REDISMEM_TTL``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any

from .connection import CallPolicy
from .errors import InvalidInput
from .keys import KeyLayout
from .queue import DEFAULT_QUEUE_NAME
from .tokens import estimate_tokens

__all__ = ["DEFAULT_TTL", "EMBEDDED_URL", "MAX_TTL", "MemoryConfig", "Hook"]

EMBEDDED_URL = "memory://"
DEFAULT_TTL = timedelta(days=7)
#: Longest ttl accepted (Redis takes far more; a century is "keep").
MAX_TTL = timedelta(days=36_500)
#: Most retries accepted; with the backoff cap that is over an hour of waiting.
MAX_RETRIES = 1000

#: A hook gets keyword arguments ``session_id``, ``user_id`` and ``messages``;
#: it may be a plain function or a coroutine function.
Hook = Callable[..., Any]


def _ttl_ms(value: float | timedelta | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError as exc:
            raise InvalidInput(f"ttl is too large: {value!r}") from exc
    else:
        raise InvalidInput(f"ttl must be seconds, a timedelta or None, not {type(value).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput(f"ttl must be a positive number of seconds or None, got {value!r}")
    if seconds > MAX_TTL.total_seconds():
        raise InvalidInput(
            f"ttl must be at most {MAX_TTL.total_seconds():.0f} seconds (use None to keep "
            f"sessions forever), got {seconds}"
        )
    return max(1, round(seconds * 1000))


def _positive_seconds(name: str, value: object) -> None:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
        or value > 86_400
    ):
        raise InvalidInput(f"{name} must be a number of seconds in (0, 86400], got {value!r}")


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
    queue_name: str = DEFAULT_QUEUE_NAME
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
        if (
            not isinstance(self.retries, int)
            or isinstance(self.retries, bool)
            or not 0 <= self.retries <= MAX_RETRIES
        ):
            raise InvalidInput(
                f"retries must be an int in [0, {MAX_RETRIES}], got {self.retries!r}"
            )
        _positive_seconds("connect_timeout", self.connect_timeout)
        _positive_seconds("socket_timeout", self.socket_timeout)
        if not isinstance(self.summarize_delay, int | float) or not (
            0 <= self.summarize_delay <= 86_400
        ):
            raise InvalidInput(
                f"summarize_delay must be seconds in [0, 86400], got {self.summarize_delay!r}"
            )
        if not isinstance(self.queue_name, str) or not self.queue_name:
            raise InvalidInput("queue_name must be a non-empty str")
        if self.layout.owns_queue_name(self.queue_name):
            raise InvalidInput(
                f"queue_name {self.queue_name!r} lies inside namespace {self.namespace!r}: "
                "clear_all() would delete the queue; choose another name"
            )
        if self.queue_url is not None and (
            not isinstance(self.queue_url, str) or "://" not in self.queue_url
        ):
            raise InvalidInput(
                f"queue_url must look like redis://host:port/db, got {self.queue_url!r}"
            )

    @property
    def policy(self) -> CallPolicy:
        """How calls to the memory Redis are attempted (timeouts, retries)."""
        return CallPolicy(self.url, attempt_timeout=self.socket_timeout, retries=self.retries)

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
