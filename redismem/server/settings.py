"""``ServerSettings``: how ``redismem serve`` runs, read from the environment
when the server starts (``ServerSettings.from_env``); the command's flags win.

With ``--workers N`` uvicorn starts N processes, each building its app with
``redismem.server.app:create_app_from_env``: the command puts its flags into
the environment its processes inherit (``to_env``), so every process reads the
same settings. The variables are listed in ``redismem.env.SERVER_VARIABLES``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from redismem import env
from redismem.config import check_queue_url, check_url
from redismem.core.keys import KeyLayout
from redismem.core.queue import DEFAULT_QUEUE_NAME
from redismem.errors import InvalidInput

__all__ = [
    "DEFAULT_BURST_FACTOR",
    "DEFAULT_MAX_BODY",
    "DEFAULT_RATE",
    "ServerSettings",
    "is_loopback",
]

#: Largest request body, bytes (1 MiB).
DEFAULT_MAX_BODY = 1024 * 1024
#: Requests per second per API key and process.
DEFAULT_RATE = 1000
#: The burst is this many seconds of the rate, unless set.
DEFAULT_BURST_FACTOR = 2


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """Everything the app needs (``host``/``port``/``workers`` are uvicorn's)."""

    url: str
    queue_url: str | None = None
    queue_name: str = DEFAULT_QUEUE_NAME
    #: The redismem namespaces served (``/v1/namespaces/{namespace}``).
    namespaces: tuple[str, ...] = ("redismem",)
    keys_file: str | None = None
    #: No API keys: every caller is an admin of every served namespace.
    #: Loopback hosts only.
    insecure_no_auth: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY
    #: Requests per second per key (per process); 0 turns the limit off.
    rate: int = DEFAULT_RATE
    #: Requests a key may make at once (the bucket's size); 0: 2 x the rate.
    burst: int = 0
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    #: Seconds SIGTERM waits for in-flight requests before closing them.
    shutdown_timeout: float = 25.0
    #: Options of each namespace's ``Memory`` (``Memory.connect``), beyond
    #: the URLs, namespace and queue name (tests, embedding apps).
    memory_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_url(self.url, "the memory URL")
        if self.queue_url is not None:
            check_url(self.queue_url, "the queue URL")
        check_queue_url(self.queue_url or self.url, memory_url=self.url)
        if not self.namespaces:
            raise InvalidInput("serve at least one namespace")
        for namespace in self.namespaces:
            KeyLayout(namespace)  # raises InvalidInput for a bad name
        if len(set(self.namespaces)) != len(self.namespaces):
            raise InvalidInput(f"a namespace is named twice: {', '.join(self.namespaces)}")
        if self.insecure_no_auth and not is_loopback(self.host):
            raise InvalidInput(
                f"--insecure-no-auth serves without API keys, so only on a loopback host "
                f"(127.0.0.1, ::1, localhost), not {self.host!r}"
            )
        if self.insecure_no_auth and self.workers != 1:
            raise InvalidInput("--insecure-no-auth runs one process: leave out --workers")
        if not self.insecure_no_auth and not self.keys_file:
            raise InvalidInput(
                "no API keys file: pass --keys-file or set REDISMEM_API_KEYS_FILE "
                "(redismem keys create makes one)"
            )
        for name, minimum in (("max_body_bytes", 1), ("rate", 0), ("burst", 0), ("workers", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidInput(f"{name} must be a whole number >= {minimum}, got {value!r}")
        if not 0 < self.port < 65536:
            raise InvalidInput(f"port must be in 1..65535, got {self.port}")
        if not 0 <= self.shutdown_timeout <= 3600:
            raise InvalidInput(f"shutdown_timeout must be 0..3600 s, got {self.shutdown_timeout}")

    @property
    def bucket_size(self) -> int:
        """How many requests a key may make at once."""
        return self.burst or max(1, DEFAULT_BURST_FACTOR * self.rate)

    @classmethod
    def from_env(cls, environ: env.Environ = None, **overrides: Any) -> ServerSettings:
        """Settings from the ``REDISMEM_*`` variables; ``overrides`` (the
        command's flags; None values are left out) win."""
        found: dict[str, Any] = {}
        readers: dict[str, Any] = {
            "url": env.text("REDISMEM_URL", environ),
            "queue_url": env.text("REDISMEM_QUEUE_URL", environ),
            "queue_name": env.text("REDISMEM_QUEUE_NAME", environ),
            "namespaces": env.words("REDISMEM_NAMESPACE", environ),
            "keys_file": env.text("REDISMEM_API_KEYS_FILE", environ),
            "max_body_bytes": env.integer("REDISMEM_SERVER_MAX_BODY", environ),
            "rate": env.integer("REDISMEM_SERVER_RATE", environ, minimum=0),
            "burst": env.integer("REDISMEM_SERVER_BURST", environ),
        }
        found = {name: value for name, value in readers.items() if value is not None}
        found.update({name: value for name, value in overrides.items() if value is not None})
        if not found.get("url"):
            raise InvalidInput(
                "no Redis URL given: set REDISMEM_URL or pass --url redis://HOST:6379/0"
            )
        names = {f.name for f in fields(cls)}
        unknown = set(found) - names
        if unknown:
            raise InvalidInput(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return cls(**found)

    def to_env(self) -> dict[str, str]:
        """The variables that make ``from_env`` give these settings (for the
        server's worker processes)."""
        out = {
            "REDISMEM_URL": self.url,
            "REDISMEM_QUEUE_URL": self.queue_url or "",
            "REDISMEM_QUEUE_NAME": self.queue_name,
            "REDISMEM_NAMESPACE": ",".join(self.namespaces),
            "REDISMEM_API_KEYS_FILE": self.keys_file or "",
            "REDISMEM_SERVER_MAX_BODY": str(self.max_body_bytes),
            "REDISMEM_SERVER_RATE": str(self.rate),
            "REDISMEM_SERVER_BURST": str(self.burst or ""),
        }
        return out

    def replace(self, **changes: Any) -> ServerSettings:
        return replace(self, **changes)
