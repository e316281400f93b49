"""Settings as typed objects: the one home of redismem's configuration.

``MemoryConfig`` holds every option ``Memory.connect`` takes; ``WorkerConfig``
every setting of a summarization worker. Build them from keyword arguments or
from the environment (``from_env``, read when called, never at import; the
variables are parsed in ``env.py``), keyword arguments winning. Plug-ins
(summarizers, extractors, consolidators, embedders) are named here and
resolved through ``plugins.py``, which imports one only when it is used.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from redismem import env, plugins
from redismem.checks import check_int, check_optional_int, shown
from redismem.context.tokens import estimate_tokens
from redismem.core.connection import RetryPolicy
from redismem.core.keys import KeyLayout
from redismem.core.queue import DEFAULT_QUEUE_NAME
from redismem.core.urls import describe_url, parse_url
from redismem.errors import InvalidInput

if TYPE_CHECKING:
    from redismem.recall.embeddings import Embedder
    from redismem.summarization.summarizers import Summarizer

__all__ = [
    "DEFAULT_TTL",
    "EMBEDDED_URL",
    "MAX_TTL",
    "MemoryConfig",
    "Hook",
    "WorkerConfig",
    "check_queue_url",
    "check_url",
]

EMBEDDED_URL = "memory://"
#: URL schemes of a Redis server (every process can reach it), unlike ``memory://``.
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "redis+sentinel", "local")
#: The URL forms, for error messages.
URL_FORMS = (
    "use redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], rediss://... (TLS), unix:///PATH, "
    "redis+cluster://HOST:PORT[,HOST:PORT...], redis+sentinel://HOST:PORT[,...]/SERVICE[/DB] "
    "or local://PATH"
)
DEFAULT_TTL = timedelta(days=7)
#: ``memory_ttl`` default: a long-term memory lives a year after its last change.
DEFAULT_MEMORY_TTL = timedelta(days=365)
#: Longest ttl accepted (Redis takes far more; a century is "keep").
MAX_TTL = timedelta(days=36_500)
#: Most retries accepted; with the backoff cap that is over an hour of waiting.
MAX_RETRIES = 1000

#: ``recall_ttl`` default: the same as the session ``ttl``.
SAME_AS_TTL = "ttl"

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
            raise InvalidInput(f"ttl is too large: {shown(value)}") from exc
    else:
        raise InvalidInput(f"ttl must be seconds, a timedelta or None, not {type(value).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput(f"ttl must be a positive number of seconds or None, got {shown(value)}")
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
        or not 0 < value <= 86_400  # nan fails it too; no OverflowError for a huge int
    ):
        raise InvalidInput(f"{name} must be a number of seconds in (0, 86400], got {shown(value)}")


def _optional_positive_int(name: str, value: object) -> None:
    check_optional_int(name, value, minimum=1)


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
    # Durability: a write returns once this many replicas have it (WAIT).
    replica_acks: int = 0
    replica_timeout: float = 1.0
    # Summarization (driven by the workers).
    keep_recent: int | None = None
    summarize_batch: int = 20
    compact: bool = True
    queue_url: str | None = None
    queue_name: str = DEFAULT_QUEUE_NAME
    summarize_delay: float = 1.0
    # Recall (indexing by the workers).
    index: bool = True
    recall_ttl: float | timedelta | str | None = SAME_AS_TTL
    embedder: Any = None
    # Long-term memories (``mem.memories``): kept this long after their last change.
    memory_ttl: float | timedelta | None = DEFAULT_MEMORY_TTL
    layout: KeyLayout = field(init=False, repr=False)
    embedder_object: Embedder | None = field(init=False, repr=False)
    ttl_ms: int | None = field(init=False, repr=False)
    recall_ttl_ms: int | None = field(init=False, repr=False)
    memory_ttl_ms: int | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or "://" not in self.url:
            raise InvalidInput(f"url must look like redis://host:port/db, got {self.url!r}")
        object.__setattr__(self, "layout", KeyLayout(self.namespace))
        object.__setattr__(self, "ttl_ms", _ttl_ms(self.ttl))
        object.__setattr__(self, "memory_ttl_ms", _ttl_ms(self.memory_ttl))
        object.__setattr__(self, "embedder_object", plugins.embedder(self.embedder))
        if self.recall_ttl == SAME_AS_TTL:
            object.__setattr__(self, "recall_ttl_ms", self.ttl_ms)
        elif isinstance(self.recall_ttl, str):
            raise InvalidInput(
                f"recall_ttl must be seconds, a timedelta, None or {SAME_AS_TTL!r}, "
                f"got {self.recall_ttl!r}"
            )
        else:
            object.__setattr__(self, "recall_ttl_ms", _ttl_ms(self.recall_ttl))
        for name in ("refresh_ttl_on_read", "store_system_messages", "compact", "index"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInput(f"{name} must be a bool")
        _optional_positive_int("max_messages", self.max_messages)
        _optional_positive_int("max_message_bytes", self.max_message_bytes)
        _optional_positive_int("summarize_batch", self.summarize_batch)
        check_optional_int("keep_recent", self.keep_recent)
        if not callable(self.tokenizer):
            raise InvalidInput("tokenizer must be a callable str -> int")
        for hook in ("on_read", "on_write"):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise InvalidInput(f"{hook} must be callable")
        check_int("retries", self.retries, maximum=MAX_RETRIES)
        _positive_seconds("connect_timeout", self.connect_timeout)
        _positive_seconds("socket_timeout", self.socket_timeout)
        _positive_seconds("replica_timeout", self.replica_timeout)
        check_int("replica_acks", self.replica_acks, maximum=16)
        if self.replica_acks and self.replica_timeout >= self.socket_timeout:
            raise InvalidInput("replica_timeout must be shorter than socket_timeout")
        if (
            not isinstance(self.summarize_delay, int | float)
            or isinstance(self.summarize_delay, bool)
            or not 0 <= self.summarize_delay <= 86_400
        ):
            raise InvalidInput(
                f"summarize_delay must be seconds in [0, 86400], got {shown(self.summarize_delay)}"
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
        if self.index or self.keep_recent is not None:  # writes enqueue jobs
            check_queue_url(self.queue_url or self.url, memory_url=self.url)

    @property
    def policy(self) -> RetryPolicy:
        """How calls to the memory Redis are attempted (timeouts, retries)."""
        return RetryPolicy(self.url, attempt_timeout=self.socket_timeout, retries=self.retries)

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
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> MemoryConfig:
        """Options from ``REDISMEM_URL``, ``REDISMEM_NAMESPACE``, ``REDISMEM_TTL``
        (seconds; ``none`` for no expiry) and ``REDISMEM_QUEUE_URL``; keyword
        arguments win."""
        found: dict[str, Any] = {}
        for option, variable in (
            ("url", "REDISMEM_URL"),
            ("namespace", "REDISMEM_NAMESPACE"),
            ("queue_url", "REDISMEM_QUEUE_URL"),
        ):
            value = env.text(variable, environ)
            if value is not None:
                found[option] = value
        if "ttl" not in options and env.text("REDISMEM_TTL", environ) is not None:
            found["ttl"] = env.ttl("REDISMEM_TTL", environ)
        found.update(options)
        return cls(**found)

    def replace(self, **changes: Any) -> MemoryConfig:
        return replace(self, **changes)


def check_url(url: str, what: str = "the URL") -> str:
    """``url`` if it names a Redis server, else ``InvalidInput`` naming ``what``
    (workers and operator commands cannot use the embedded backend)."""
    try:
        target = parse_url(url)
    except InvalidInput:
        raise InvalidInput(
            f"{what} {describe_url(url)!r} is not a Redis URL: {URL_FORMS}"
        ) from None
    if target.kind == "embedded":
        raise InvalidInput(
            f"{what} {url!r} is the embedded in-process backend, which no other process can see"
        )
    return url


def check_queue_url(url: str, *, memory_url: str | None = None) -> str:
    """``url`` if the work queue (arq) can live there: not on a cluster."""
    try:
        kind = parse_url(url).kind
    except InvalidInput:
        return url  # reported where the URL is used, with its own name
    if kind == "cluster":
        where = "the memory URL is a cluster" if url == memory_url else "it is a cluster"
        raise InvalidInput(
            f"the work queue cannot use {describe_url(url)!r}: {where}, and arq does not run "
            "on Redis Cluster; set queue_url / REDISMEM_QUEUE_URL to a standalone or Sentinel "
            "Redis (redis://... or redis+sentinel://...)"
        )
    return url


def _whole_seconds(value: float | None) -> int | None:
    return None if value is None else max(1, int(value))


#: ``WorkerConfig`` fields read from the environment, and how.
_WORKER_ENV: dict[str, Callable[[Mapping[str, str] | None], Any]] = {
    "url": lambda e: env.text("REDISMEM_URL", e),
    "queue_url": lambda e: env.text("REDISMEM_QUEUE_URL", e),
    "queue_name": lambda e: env.text("REDISMEM_QUEUE_NAME", e),
    "name": lambda e: env.text("REDISMEM_WORKER_NAME", e),
    "namespaces": lambda e: env.words("REDISMEM_NAMESPACE", e),
    "summarizer": plugins.SUMMARIZERS.from_env,
    "summarizer_timeout": lambda e: env.seconds("REDISMEM_SUMMARIZER_TIMEOUT", e),
    "job_timeout": lambda e: _whole_seconds(env.seconds("REDISMEM_JOB_TIMEOUT", e)),
    "sweep_seconds": lambda e: _whole_seconds(env.seconds("REDISMEM_SWEEP_SECONDS", e)),
    "sweep_grace": lambda e: env.seconds("REDISMEM_SWEEP_GRACE", e, zero=True),
    "embedder": lambda e: env.choice("REDISMEM_EMBEDDER", plugins.EMBEDDERS.names(), e),
    "extractor": plugins.EXTRACTORS.from_env,
    "consolidator": plugins.CONSOLIDATORS.from_env,
    "extract_quiet": lambda e: env.seconds("REDISMEM_EXTRACT_QUIET", e, zero=True),
}


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Every setting of a summarization worker (``redismem worker``, ``arq
    workers.WorkerSettings``, ``InProcessWorker``). ``from_env()`` reads them
    when a worker is created; ``redismem worker --help`` lists the variables."""

    #: Memory Redis (sessions, summaries).
    url: str = EMBEDDED_URL
    #: Queue Redis (arq jobs, stats); "" = ``url``.
    queue_url: str = ""
    queue_name: str = DEFAULT_QUEUE_NAME
    #: This worker's name in health checks; "" = HOST-PID.
    name: str = ""
    #: Namespaces the reconcile sweep covers.
    namespaces: tuple[str, ...] = ("redismem",)
    summarizer: Summarizer = field(default_factory=lambda: plugins.SUMMARIZERS.create("keypoints"))
    #: Seconds one summarizer call may take.
    summarizer_timeout: float = 30.0
    #: arq's timeout of a job, whole seconds: a crashed worker's job re-runs
    #: after it + 10 s, and a job starts another pass only while that pass can
    #: end in time.
    job_timeout: int = 45
    #: Seconds between two runs of the reconcile sweep.
    sweep_seconds: int = 10
    #: Seconds a pending mark waits for its job before the sweep re-enqueues it.
    sweep_grace: float = 30.0
    #: Recall: what embeds indexed messages (see ``redismem.recall.embeddings``).
    embedder: Any = None
    embedder_object: Embedder | None = field(init=False, repr=False, default=None)
    #: Knowledge: what extracts them from indexed sessions (a
    #: ``redismem.longterm.extraction.Extractor``); None: no extraction.
    extractor: Any = None
    #: Seconds a session must be quiet (no write) before its new messages are
    #: extracted, so a burst is extracted once.
    extract_quiet: float = 2.0
    #: Decides about near-duplicate memories the extractor finds (a
    #: ``redismem.longterm.consolidation.Consolidator``); None: kept side by side.
    consolidator: Any = None
    #: How long an extracted memory is kept after its last change (None: forever).
    memory_ttl: float | timedelta | None = DEFAULT_MEMORY_TTL

    def __post_init__(self) -> None:
        for name in ("url", "queue_url", "queue_name", "name"):
            if not isinstance(getattr(self, name), str):
                raise InvalidInput(f"{name} must be a str")
        if "://" not in self.url:
            raise InvalidInput(f"url must look like redis://host:port/db, got {self.url!r}")
        object.__setattr__(self, "queue_url", self.queue_url or self.url)
        check_queue_url(self.queue_url, memory_url=self.url)
        object.__setattr__(self, "name", self.name or f"{socket.gethostname()}-{os.getpid()}")
        if not self.queue_name:
            raise InvalidInput("queue_name (REDISMEM_QUEUE_NAME) must be a non-empty str")
        if isinstance(self.namespaces, str) or not self.namespaces:
            raise InvalidInput("namespaces must be a non-empty tuple of namespaces")
        object.__setattr__(self, "namespaces", tuple(self.namespaces))
        for namespace in self.namespaces:
            if KeyLayout(namespace).owns_queue_name(self.queue_name):
                raise InvalidInput(
                    f"queue name {self.queue_name!r} lies inside namespace {namespace!r}: "
                    "clear_all() would delete the queue; choose another name"
                )
        if not callable(getattr(self.summarizer, "summarize", None)):
            raise InvalidInput("summarizer must have an async summarize(previous, messages)")
        object.__setattr__(self, "embedder_object", plugins.embedder(self.embedder))
        if self.extractor is not None and not (
            callable(getattr(self.extractor, "extract", None))
            and isinstance(getattr(self.extractor, "name", None), str)
        ):
            raise InvalidInput(
                "extractor must have a name and an async extract(messages, user_id=)"
            )
        if (
            not isinstance(self.extract_quiet, int | float)
            or isinstance(self.extract_quiet, bool)
            or not 0 <= self.extract_quiet <= 3600
        ):
            raise InvalidInput(
                f"extract_quiet must be seconds in [0, 3600], got {shown(self.extract_quiet)}"
            )
        _ttl_ms(self.memory_ttl)
        _positive_seconds("summarizer_timeout", self.summarizer_timeout)
        if (
            not isinstance(self.sweep_grace, int | float)
            or isinstance(self.sweep_grace, bool)
            or not 0 <= self.sweep_grace <= 86_400
        ):
            raise InvalidInput(
                f"sweep_grace must be seconds in [0, 86400], got {shown(self.sweep_grace)}"
            )
        for name in ("job_timeout", "sweep_seconds"):
            check_int(f"{name} (whole seconds)", getattr(self, name), minimum=1)
        if self.job_timeout <= self.summarizer_timeout:
            raise InvalidInput(
                f"the job timeout (REDISMEM_JOB_TIMEOUT, {self.job_timeout} s) must exceed the "
                f"summarizer timeout (REDISMEM_SUMMARIZER_TIMEOUT, {self.summarizer_timeout:g} s)"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> WorkerConfig:
        """The settings in the environment (``environ``, else the process's,
        read now); keyword arguments win, and the variables they replace are
        not read."""
        found: dict[str, Any] = {}
        for option, read in _WORKER_ENV.items():
            if option not in options:
                value = read(environ)
                if value is not None:
                    found[option] = value
        if "memory_ttl" not in options and env.text("REDISMEM_MEMORY_TTL", environ) is not None:
            # "none" (keep forever) reads as None: set it even so.
            found["memory_ttl"] = env.ttl("REDISMEM_MEMORY_TTL", environ)
        found.update(options)
        try:
            return cls(**found)
        except TypeError as exc:  # an unknown option
            raise InvalidInput(str(exc)) from exc

    def replace(self, **changes: Any) -> WorkerConfig:
        """A copy with ``changes`` (``queue_url`` and ``name`` keep their
        resolved values unless changed too)."""
        return replace(self, **changes)
