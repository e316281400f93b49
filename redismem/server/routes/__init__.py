"""The HTTP API under ``/v1/namespaces/{namespace}``, one module per area.

``ROUTERS`` lists the routers ``create_app`` includes; a new area appends its
router here. Each route names the role it needs through its ``Memory``
parameter (``auth.Reader``, ``auth.Writer``, ``auth.Admin``).
"""

from __future__ import annotations

from fastapi import APIRouter

from redismem.server.routes import memories, recall, sessions, store, users

__all__ = ["PREFIX", "ROUTERS"]

#: Where every route of the API lies.
PREFIX = "/v1/namespaces/{namespace}"

ROUTERS: list[APIRouter] = [sessions.router, recall.router]
ROUTERS += [memories.router, store.router, users.router]
