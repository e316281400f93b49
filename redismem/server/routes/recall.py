"""Recall: search a user's messages with every filter ``Memory.search`` has;
flush (wait for the workers' indexing)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["recall"])
