"""Request and response bodies shared by the routes.

The library's own models (``Message``, ``MemoryEntry``, ``Context``,
``Summary``, ``SessionInfo``, ``Hit``) are the API's too: a message read from
the API can be written back as it is (its store fields, ``id``,
``created_at`` and ``token_count``, are ignored on write, as in the library).
Requests refuse unknown fields (a typo is a 422, not a silent default).
Responses are JSON objects, never bare lists, so fields can be added.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import BaseModel, ConfigDict, Field

from redismem.errors import InvalidInput
from redismem.models import Hit, MemoryEntry, Message, Role, SessionInfo, Summary

__all__ = [
    "ERRORS",
    "AppendRequest",
    "Cleared",
    "EntryList",
    "ErrorBody",
    "ErrorDetail",
    "FlushDone",
    "FlushRequest",
    "HitList",
    "MessageList",
    "SearchRequest",
    "SessionList",
    "SummaryReply",
    "TagQuery",
    "json_response",
    "parse_tags",
]


class ErrorDetail(BaseModel):
    type: str = Field(description="the exception's class, e.g. InvalidInput")
    message: str
    write_id: str | None = Field(
        default=None, description="503 on a write: send it again with this Idempotency-Key"
    )


class ErrorBody(BaseModel):
    """Every error response (more fields may come with some types)."""

    error: ErrorDetail


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


#: The errors every route of the API may answer, for its ``responses=``.
ERRORS: dict[int | str, dict[str, Any]] = {
    401: _error("no valid API key"),
    403: _error("the key is for another namespace, or its role is too low"),
    404: _error("the namespace is not served here"),
    422: _error("invalid input (the library's message)"),
    429: _error("rate limit of the key reached (see Retry-After)"),
    503: _error("Redis unavailable (see Retry-After; a write names its write_id)"),
}


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AppendRequest(_Request):
    """One write: its messages land together, as one entry, or not at all."""

    messages: list[Message] = Field(min_length=1, description="the messages, oldest first")
    tags: dict[str, str] = Field(default_factory=dict, description="the entry's tags")
    agent_name: str | None = Field(default=None, description="the agent that wrote them")
    created_at: datetime | None = Field(
        default=None,
        description="when they were said (with a time zone), for history written later; "
        "default: now, by the server's clock",
    )


class SearchRequest(_Request):
    """Every filter of ``Memory.search``."""

    query: str | None = Field(default=None, description="keywords; none: the newest matches")
    session_id: str | None = None
    tags: dict[str, str] = Field(default_factory=dict, description="entries carrying them all")
    roles: list[Role] | None = None
    agent_name: str | None = None
    since: datetime | None = Field(default=None, description="written at or after (aware)")
    until: datetime | None = Field(default=None, description="written at or before (aware)")
    limit: int = Field(default=10, ge=1, le=1000)
    min_score: float | None = None


class FlushRequest(_Request):
    """Wait for the workers' background work due for every write made before."""

    user_id: str | None = Field(default=None, description="one user's work; none: everyone's")
    timeout: float = Field(default=30.0, gt=0, le=300, description="seconds to wait at most")


class MessageList(BaseModel):
    messages: list[Message]


class EntryList(BaseModel):
    entries: list[MemoryEntry]


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class SummaryReply(BaseModel):
    summary: Summary | None


class HitList(BaseModel):
    hits: list[Hit]


class FlushDone(BaseModel):
    done: bool = Field(description="false: the timeout passed first")


class Cleared(BaseModel):
    removed: int = Field(description="keys deleted")


#: ``?tag=key:value``, repeatable: entries (or sessions) carrying every pair.
TagQuery = Annotated[
    list[str],
    Query(
        description="key:value (split at the first colon), repeatable; all must match",
        examples=["topic:billing"],
    ),
]


def parse_tags(pairs: Sequence[str]) -> dict[str, str] | None:
    """``["k:v", ...]`` as a dict; None for none. ``InvalidInput`` (422) for
    a pair without a colon or a key given twice."""
    if not pairs:
        return None
    tags: dict[str, str] = {}
    for pair in pairs:
        key, colon, value = pair.partition(":")
        if not colon or not key:
            raise InvalidInput(f"tag must be key:value, got {pair!r}")
        if key in tags:
            raise InvalidInput(f"tag {key!r} is given twice")
        tags[key] = value
    return tags


def json_response(body: BaseModel, status_code: int = 200) -> Response:
    """``body`` as JSON, serialized once by pydantic (the route's
    ``response_model`` documents it; FastAPI does not validate it again)."""
    return Response(
        body.model_dump_json().encode(), status_code=status_code, media_type="application/json"
    )
