"""Sessions: append messages, read them (last N, within a token budget, by
tags), context, summary, entries, a user's sessions, clear.

Appends are exactly once: an ``Idempotency-Key`` header is the write's id, so
a client that retries a request (after a timeout, a 503) with the same key
stores it once and gets the first answer again. Without the header the
server draws an id; a 503 names it (``write_id`` in the body, and the
``Idempotency-Key`` response header) for the retry.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from redismem.models import Context, MemoryEntry
from redismem.server.auth import Reader, WriteOnce, Writer
from redismem.server.schemas import (
    ERRORS,
    AppendRequest,
    Cleared,
    EntryList,
    MessageList,
    SessionList,
    SummaryReply,
    TagQuery,
    json_response,
    parse_tags,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["sessions"])

SESSION = "/users/{user_id}/sessions/{session_id}"


@router.post(
    f"{SESSION}/messages",
    status_code=201,
    response_model=MemoryEntry,
    summary="Append messages (one entry; exactly once with Idempotency-Key); role write",
    responses=ERRORS,
)
async def append(write: WriteOnce, user_id: str, session_id: str, body: AppendRequest) -> Response:
    entry = await write.memory.write(
        body.messages,
        session_id=session_id,
        user_id=user_id,
        tags=body.tags,
        agent_name=body.agent_name,
        write_id=write.write_id,
        created_at=body.created_at,
    )
    return json_response(entry, 201)


@router.get(
    f"{SESSION}/messages",
    response_model=MessageList,
    summary="The session's messages, oldest first; role read",
    responses=ERRORS,
)
async def read(
    mem: Reader,
    user_id: str,
    session_id: str,
    tag: TagQuery = [],  # noqa: B006 - FastAPI copies query defaults
    limit: Annotated[int | None, Query(ge=0, description="the most recent N")] = None,
    max_tokens: Annotated[
        int | None, Query(ge=0, description="the most recent that fit this budget")
    ] = None,
    keep_orphans: Annotated[
        bool, Query(description="keep a leading tool result whose call was cut off")
    ] = False,
) -> Response:
    messages = await mem.read(
        session_id=session_id,
        user_id=user_id,
        limit=limit,
        tags=parse_tags(tag),
        max_tokens=max_tokens,
        keep_orphans=keep_orphans,
    )
    return json_response(MessageList(messages=messages))


@router.get(
    f"{SESSION}/context",
    response_model=Context,
    summary="The summary (as a system message), then the recent messages; role read",
    responses=ERRORS,
)
async def context(
    mem: Reader,
    user_id: str,
    session_id: str,
    max_tokens: Annotated[int | None, Query(ge=0, description="the token budget")] = None,
) -> Response:
    found = await mem.context(session_id=session_id, user_id=user_id, max_tokens=max_tokens)
    return json_response(found)


@router.get(
    f"{SESSION}/summary",
    response_model=SummaryReply,
    summary="The session's running summary (null before the first one); role read",
    responses=ERRORS,
)
async def summary(mem: Reader, user_id: str, session_id: str) -> Response:
    found = await mem.summary(session_id=session_id, user_id=user_id)
    return json_response(SummaryReply(summary=found))


@router.get(
    f"{SESSION}/entries",
    response_model=EntryList,
    summary="The session's entries (one per write), oldest first; role read",
    responses=ERRORS,
)
async def entries(
    mem: Reader,
    user_id: str,
    session_id: str,
    tag: TagQuery = [],  # noqa: B006 - FastAPI copies query defaults
) -> Response:
    found = await mem.entries(session_id=session_id, user_id=user_id, tags=parse_tags(tag))
    return json_response(EntryList(entries=found))


@router.get(
    "/users/{user_id}/sessions",
    response_model=SessionList,
    summary="A user's live sessions, soonest to expire first; role read",
    responses=ERRORS,
)
async def sessions(
    mem: Reader,
    user_id: str,
    tag: TagQuery = [],  # noqa: B006 - FastAPI copies query defaults
) -> Response:
    found = await mem.sessions(user_id=user_id, tags=parse_tags(tag))
    return json_response(SessionList(sessions=found))


@router.delete(
    SESSION,
    response_model=Cleared,
    summary="Delete the session and its indexed copies; role write",
    responses=ERRORS,
)
async def clear(mem: Writer, user_id: str, session_id: str) -> Response:
    removed = await mem.clear(session_id=session_id, user_id=user_id)
    return json_response(Cleared(removed=removed))
