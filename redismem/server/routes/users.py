"""Everything of one user (role admin): delete it (``clear_user``), export
it as one JSON document, import such a document (``redismem.portability``).

The import is idempotent (a document imported again writes nothing more)
and checks the whole document before writing anything (422). Its body is
bounded by the server's body limit (``--max-body-bytes``): a user bigger
than that is imported with ``redismem import`` instead.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Response

from redismem.portability import ImportReport, UserDocument, export_user, import_user
from redismem.server.auth import Admin
from redismem.server.schemas import ERRORS, Cleared, json_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["users"])

USER = "/users/{user_id}"


@router.delete(
    USER,
    response_model=Cleared,
    summary="Delete everything of the user: sessions, summaries, search index, memories, "
    "store items, queued jobs (final); role admin",
    responses=ERRORS,
)
async def clear_user(mem: Admin, user_id: str) -> Response:
    return json_response(Cleared(removed=await mem.clear_user(user_id)))


@router.get(
    f"{USER}/export",
    response_model=UserDocument,
    summary="Everything of the user as one JSON document (format redismem.user/1); role admin",
    responses=ERRORS,
)
async def export(mem: Admin, user_id: str) -> Response:
    document = await export_user(mem, user_id)
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return Response(text.encode(), media_type="application/json")


@router.post(
    f"{USER}/import",
    response_model=ImportReport,
    summary="Write a document the export made, into this user (again: nothing twice); role admin",
    description="Sessions, memories and store items come back as the module "
    "redismem.portability says; summaries are the workers' to make again.",
    responses=ERRORS,
)
async def load(mem: Admin, user_id: str, body: UserDocument) -> Response:
    return json_response(await import_user(mem, body, user_id=user_id))
