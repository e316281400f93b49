"""Sessions: append messages, read them (last N, within a token budget, by
tags), context, summary, entries, a user's sessions, clear."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["sessions"])
