"""Who is calling: the API key of a request, checked against the path's
namespace and the role the route needs.

A key comes as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.
Without a valid one: 401. A valid key of another namespace, or whose role is
below the route's: 403 (a key is never told whether another namespace
exists). A namespace the server does not serve: 404. Each accepted request
then takes a token of its key's rate limit (429).

Routes take what they need as a parameter::

    async def read(mem: Reader, ...)        # the namespace's Memory, role read
    async def append(write: WriteOnce, ...) # role write, and the write's id
    async def purge(mem: Admin, ...)        # role admin

A route that writes exactly once takes ``WriteOnce``: its write id is the
request's ``Idempotency-Key``, else one the server draws (the library's
``new_write_id``), kept in the request's state before Redis is touched, so
that every 503 of the route names it (``errors.WRITE_ID``).

Other front ends (MCP) call ``Gate.authenticate(headers)`` and
``Gate.authorize(principal, namespace, role)`` directly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPBearer

from redismem.checks import check_write_id
from redismem.client import Memory
from redismem.server.apikeys import ROLES, KeyRing, Role, allows
from redismem.server.errors import WRITE_ID, Forbidden, Unauthorized
from redismem.server.limits import RateLimiter
from redismem.server.namespaces import Namespaces

__all__ = [
    "Admin",
    "Gate",
    "Principal",
    "Reader",
    "WriteOnce",
    "Writer",
    "Writing",
    "document_keys",
    "gate_of",
    "memory_for",
    "principal_for",
]


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller: its key's id, namespace and role. ``namespace`` None: any
    namespace (``--insecure-no-auth``, where ``key_id`` is None too)."""

    key_id: str | None
    namespace: str | None
    role: Role
    name: str = ""


ANONYMOUS = Principal(key_id=None, namespace=None, role="admin", name="insecure-no-auth")


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries, if any."""
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return None
    key = headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


class Gate:
    """Authentication (the keys), authorization (namespace, role) and the
    rate limit, for every front end of one server."""

    def __init__(self, keys: KeyRing | None, limiter: RateLimiter, namespaces: Namespaces) -> None:
        self.keys = keys  # None: --insecure-no-auth
        self.limiter = limiter
        self.namespaces = namespaces

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The caller, or ``Unauthorized``; takes a token of its rate limit."""
        if self.keys is None:
            self.limiter.take("")
            return ANONYMOUS
        key = presented_key(headers)
        if key is None:
            raise Unauthorized(
                "an API key is needed: send Authorization: Bearer <key> (or X-API-Key)"
            )
        record = self.keys.lookup(key)
        if record is None:
            raise Unauthorized("the API key is not valid")
        self.limiter.take(record.id)
        return Principal(
            key_id=record.id, namespace=record.namespace, role=record.role, name=record.name
        )

    def authorize(self, principal: Principal, namespace: str, role: Role) -> None:
        """``Forbidden`` unless ``principal`` may act as ``role`` on
        ``namespace``; ``NotServed`` when the server does not serve it."""
        if principal.namespace is not None and principal.namespace != namespace:
            raise Forbidden(f"this API key is for another namespace than {namespace!r}")
        self.namespaces.check(namespace)
        if not allows(principal.role, role):
            raise Forbidden(f"this API key's role is {principal.role}; this needs {role}")


def gate_of(request: Request) -> Gate:
    gate: Gate = request.app.state.gate
    return gate


def _check(request: Request, namespace: str, role: Role) -> Principal:
    gate = gate_of(request)
    principal = gate.authenticate(request.headers)
    gate.authorize(principal, namespace, role)
    return principal


#: How the OpenAPI document says a key is sent. The gate reads the headers
#: itself, for every front end alike, so the routes do not take these as
#: parameters (a ``Security`` parameter per scheme made FastAPI solve two
#: sub-dependencies on every request, a third of the app's CPU per append):
#: ``document_keys`` adds them to the document of every gated route.
_BEARER = HTTPBearer(auto_error=False, description="an API key, rmk_<id>_<secret>")
_API_KEY = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="the same key, in this header instead"
)
_SCHEMES = (_BEARER, _API_KEY)
#: The dependencies that check a key (``principal_for``, ``memory_for``,
#: ``write_once``): a route taking one of them is documented as needing a key.
_GATED: set[Callable[..., Any]] = set()


def document_keys(openapi: dict[str, Any], routes: Iterable[Any]) -> None:
    """Say in ``openapi`` (the app's document, changed in place) how a key
    is sent: the schemes in ``components.securitySchemes``, and either of
    them as the ``security`` of every operation of ``routes`` whose route
    takes a gate dependency, where FastAPI would put it (after
    ``operationId``)."""
    schemes = {
        scheme.scheme_name: jsonable_encoder(scheme.model, by_alias=True, exclude_none=True)
        for scheme in _SCHEMES
    }
    security: list[dict[str, list[str]]] = [{name: []} for name in schemes]
    paths = openapi.get("paths", {})
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        if not any(d.call in _GATED for d in route.dependant.dependencies):
            continue
        for method in route.methods or ():
            operation = paths.get(route.path_format, {}).get(method.lower())
            if operation is None or "security" in operation:
                continue
            placed: dict[str, Any] = {}
            for name, value in operation.items():
                placed[name] = value
                if name == "operationId":
                    placed["security"] = security
            placed.setdefault("security", security)
            operation.clear()
            operation.update(placed)
    openapi.setdefault("components", {})["securitySchemes"] = schemes


def principal_for(role: Role) -> Callable[..., Awaitable[Principal]]:
    """A dependency giving the caller, allowed ``role`` on the path's namespace."""

    async def dependency(request: Request, namespace: str) -> Principal:
        return _check(request, namespace, role)

    dependency.__name__ = f"{role}_principal"
    _GATED.add(dependency)
    return dependency


def memory_for(role: Role) -> Callable[..., Awaitable[Memory]]:
    """A dependency giving the path's namespace's ``Memory``, for a caller
    allowed ``role`` there."""

    async def dependency(request: Request, namespace: str) -> Memory:
        _check(request, namespace, role)
        return await gate_of(request).namespaces.get(namespace)

    dependency.__name__ = f"{role}_memory"
    _GATED.add(dependency)
    return dependency


@dataclass(frozen=True, slots=True)
class Writing:
    """What a route writing exactly once gets: the namespace's ``Memory``
    and the write's id."""

    memory: Memory
    write_id: str


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="the write's id (1-128 printable ASCII characters, no spaces): a request "
        "sent again with it is applied once. Without it the server draws one; a 503 names "
        "the id to retry with (write_id, and this header)",
    ),
]


async def write_once(
    request: Request, namespace: str, idempotency_key: IdempotencyKey = None
) -> Writing:
    """The dependency of ``WriteOnce``: the caller may write, then the write
    id (422 for a malformed key) is kept in the request's state, then the
    namespace's ``Memory`` (whose first connection may fail: a 503 naming
    that id)."""
    _check(request, namespace, "write")
    write_id = check_write_id(idempotency_key)
    setattr(request.state, WRITE_ID, write_id)
    memory = await gate_of(request).namespaces.get(namespace)
    return Writing(memory, write_id)


_GATED.add(write_once)


_READ, _WRITE, _ADMIN = (memory_for(role) for role in ROLES)
#: The path namespace's ``Memory``, for a key with at least this role.
Reader = Annotated[Memory, Depends(_READ)]
Writer = Annotated[Memory, Depends(_WRITE)]
Admin = Annotated[Memory, Depends(_ADMIN)]
#: The path namespace's ``Memory`` and the write's id, role write.
WriteOnce = Annotated[Writing, Depends(write_once)]
