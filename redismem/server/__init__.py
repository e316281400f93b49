"""The redismem service: an HTTP API (and MCP) over the memory.

Needs the extra ``redismem[server]`` (FastAPI, uvicorn, mcp,
prometheus-client). Importing this package imports none of them:
``create_app`` does, and raises ``MissingDependency`` naming the extra when
they are absent.

* ``settings.py``  ``ServerSettings``, read from the environment at run time
* ``apikeys.py``   API keys, roles, the keys file (hashed)
* ``auth.py``      the caller of a request (401/403/404) and its rate limit
* ``limits.py``    body size (413) and type (415); the rate limit (429)
* ``errors.py``    the one mapping of exceptions to HTTP responses
* ``namespaces.py`` one ``Memory`` per served namespace
* ``app.py``       ``create_app(settings)``: routes, probes, mounts
* ``routes/``      the API, one module per area
* ``commands.py``  ``redismem serve`` and ``redismem keys``
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from redismem.server.settings import ServerSettings

__all__ = ["create_app", "require_server_extra"]


def require_server_extra() -> None:
    """``MissingDependency`` naming ``redismem[server]`` unless FastAPI and
    uvicorn can be imported."""
    from redismem.errors import MissingDependency

    for package in ("fastapi", "uvicorn"):
        try:
            __import__(package)
        except ImportError as exc:
            raise MissingDependency(package, extra="server") from exc


def create_app(settings: ServerSettings) -> FastAPI:
    """``redismem.server.app.create_app``, after checking the extra is installed."""
    require_server_extra()
    from redismem.server.app import create_app as build

    return build(settings)
