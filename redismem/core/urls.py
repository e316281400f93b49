"""What a Redis URL names: one server, a cluster, a Sentinel-managed master,
or the embedded backend.

=======================================================  ==========================
``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]``            one server (``rediss://``: TLS)
``unix:///PATH[?db=N]``                                   one server on a Unix socket
``redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]``  a Redis Cluster (seed nodes)
``redis://HOST:PORT[,...]?cluster=1``                     the same
``redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,...]/SERVICE[/DB]``  the master Sentinel names
``memory://[NAME]``                                       the embedded in-process backend
``local://PATH``                                          a server of one's own, data under PATH
=======================================================  ==========================

The credentials of a Sentinel URL are the master's; sentinels that need
their own take ``?sentinel_password=...`` (and ``sentinel_username``).
``rediss+cluster://`` and ``rediss+sentinel://`` use TLS.

``local://PATH`` takes PATH as written (relative to the working directory,
``~`` expanded; ``local:///abs/path`` is absolute); ``redismem.core.local``
starts its server when a client opens it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from redismem.errors import InvalidInput

__all__ = ["KINDS", "RedisTarget", "describe_url", "parse_url"]

#: What a URL can name.
KINDS = ("server", "cluster", "sentinel", "embedded", "local")
_DEFAULT_PORT = 6379
_SENTINEL_PORT = 26379


def describe_url(url: str) -> str:
    """The URL with any password masked, for logs and errors."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password:
        netloc = parts.netloc.replace(f":{password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """A parsed URL (see the module docstring)."""

    kind: str
    url: str
    #: Seed nodes of a cluster, the sentinels of a Sentinel URL, else the one server.
    nodes: tuple[tuple[str, int], ...] = ()
    service: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    options: dict[str, str] = field(default_factory=dict)
    #: The directory of a ``local://`` URL, as written.
    path: str | None = None

    @property
    def is_cluster(self) -> bool:
        return self.kind == "cluster"


def _fail(url: str, why: str) -> InvalidInput:
    return InvalidInput(f"cannot use Redis URL {describe_url(url)!r}: {why}")


def _nodes(url: str, netloc: str, default_port: int) -> tuple[tuple[str, int], ...]:
    hosts = netloc.rsplit("@", 1)[-1]
    nodes = []
    for part in hosts.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon:
            host, port = part.strip(), str(default_port)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _fail(url, f"{part!r} is not HOST:PORT")
        nodes.append((host, int(port)))
    return tuple(nodes)


def _credentials(url: str, netloc: str) -> tuple[str | None, str | None]:
    if "@" not in netloc:
        return None, None
    userinfo = netloc.rsplit("@", 1)[0]
    user, colon, password = userinfo.partition(":")
    if not colon:
        return None, unquote(user) or None  # redis://PASSWORD@HOST
    return unquote(user) or None, unquote(password)


def parse_url(url: str) -> RedisTarget:
    """The ``RedisTarget`` of ``url``; ``InvalidInput`` when it names none."""
    if not isinstance(url, str) or not url:
        raise InvalidInput(f"a Redis URL must be a non-empty str, not {url!r}")
    scheme = url.partition("://")[0]
    scheme = scheme.lower()
    if scheme == "memory":
        return RedisTarget("embedded", url)
    if scheme == "local":
        directory = url[len("local://") :]
        if not directory or any(c in directory for c in "?#\0"):
            raise _fail(url, "name a directory: local://PATH (e.g. local://.redismem)")
        return RedisTarget("local", url, path=directory)
    base, plus, mode = scheme.partition("+")
    if base not in ("redis", "rediss", "unix") or (plus and mode not in ("cluster", "sentinel")):
        raise _fail(
            url, "use redis://, rediss://, unix://, redis+cluster://, redis+sentinel:// or local://"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _fail(url, str(exc)) from exc
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    username, password = _credentials(url, parts.netloc)
    tls = base == "rediss"
    if not mode and options.get("cluster", "").lower() in ("1", "true", "yes"):
        mode = "cluster"
    if base == "unix":
        if mode:
            raise _fail(url, "a Unix socket names one server")
        return RedisTarget("server", url, options=options)
    if mode == "sentinel":
        path = [p for p in parts.path.split("/") if p]
        if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
            raise _fail(url, "name the master: redis+sentinel://HOST:PORT[,...]/SERVICE[/DB]")
        nodes = _nodes(url, parts.netloc, _SENTINEL_PORT)
        db = int(path[1]) if len(path) == 2 else 0
        return RedisTarget(
            "sentinel", url, nodes, unquote(path[0]), db, username, password, tls, options
        )
    nodes = _nodes(url, parts.netloc, _DEFAULT_PORT)
    if mode == "cluster":
        if parts.path.strip("/") not in ("", "0"):
            raise _fail(url, "a cluster has only db 0")
        return RedisTarget("cluster", url, nodes, None, 0, username, password, tls, options)
    if len(nodes) > 1:
        raise _fail(url, "several hosts: use redis+cluster:// or redis+sentinel://")
    return RedisTarget("server", url, nodes, options=options, tls=tls)
