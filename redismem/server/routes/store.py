"""The long-term store (``Memory.store``): namespaced, versioned, searchable
JSON items; put, get, delete, history, search, list namespaces.

An item is addressed by ``prefix`` (the store's namespace: a list of labels,
the first one the tenant, usually a user id) and ``key``, in the JSON body or
as query parameters (``?prefix=alice&prefix=prefs&key=food``), never as path
segments: a label may hold ``/``. A put is exactly once with an
``Idempotency-Key`` (its write id); ``if_version`` makes it conditional
(409 when the item moved on). An item that is not there reads as
``{"item": null}``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from redismem.longterm.store import MAX_TTL, Item, ItemVersion, SearchItem
from redismem.server.auth import Reader, WriteOnce
from redismem.server.schemas import ERRORS, json_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}/store", tags=["store"])

ITEMS = "/items"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


Labels = Annotated[
    list[str],
    Field(min_length=1, description="the item's namespace, its first label the tenant (user)"),
]


class StorePutRequest(_Request):
    prefix: Labels
    key: str
    value: dict[str, Any] = Field(description="a JSON object")
    index: list[str] | Literal[False] | None = Field(
        default=None,
        description='the field paths whose text is searchable ("a.b", "a[*].b", "$"); '
        "null: every string; false: none",
    )
    ttl: float | None = Field(
        default=None, gt=0, le=MAX_TTL, description="seconds until it expires (null: never)"
    )
    source: dict[str, Any] | None = Field(default=None, description="its provenance")
    if_version: int | None = Field(
        default=None,
        ge=0,
        description="put only if the live version is this one (0: only if there is none); "
        "else 409 and nothing is written",
    )


class ItemReply(BaseModel):
    item: Item | None


class StoreSearchRequest(_Request):
    prefix: list[str] = Field(
        description="items whose namespace starts with these labels ([]: every tenant's)"
    )
    query: str | None = Field(default=None, description="keywords; none: newest first")
    filter: dict[str, Any] | None = Field(
        default=None,
        description='value fields by dotted path, exactly or with {"$gte": 4} and the like '
        "($eq $ne $gt $gte $lt $lte $in)",
    )
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class StoreSearchReply(BaseModel):
    items: list[SearchItem]


class ItemHistory(BaseModel):
    versions: list[ItemVersion] = Field(
        description="every version, oldest first: puts and delete tombstones"
    )


class StoreNamespaceList(BaseModel):
    namespaces: list[list[str]]


PrefixQuery = Annotated[
    list[str],
    Query(description="the item's namespace, one label per parameter, in order"),
]
KeyQuery = Annotated[str, Query(description="the item's key")]


@router.post(
    ITEMS,
    response_model=ItemReply,
    summary="Put an item as a new version (exactly once with Idempotency-Key; "
    "409 on if_version); role write",
    responses={**ERRORS, 409: ERRORS[422] | {"description": "if_version did not hold"}},
)
async def put(write: WriteOnce, body: StorePutRequest) -> Response:
    item = await write.memory.store.put(
        tuple(body.prefix),
        body.key,
        body.value,
        index=body.index,
        ttl=body.ttl,
        source=body.source,
        write_id=write.write_id,
        if_version=body.if_version,
    )
    return json_response(ItemReply(item=item))


@router.get(
    ITEMS,
    response_model=ItemReply,
    summary="An item's current version (null: never put, deleted or expired); role read",
    responses=ERRORS,
)
async def get(mem: Reader, prefix: PrefixQuery, key: KeyQuery) -> Response:
    found = await mem.store.get(tuple(prefix), key)
    return json_response(ItemReply(item=found))


@router.delete(
    ITEMS,
    status_code=204,
    summary="Delete an item (its history keeps it, and a tombstone); role write",
    responses=ERRORS,
)
async def delete(write: WriteOnce, prefix: PrefixQuery, key: KeyQuery) -> Response:
    await write.memory.store.delete(tuple(prefix), key, write_id=write.write_id)
    return Response(status_code=204)


@router.get(
    f"{ITEMS}/history",
    response_model=ItemHistory,
    summary="Every version of an item, oldest first; role read",
    responses=ERRORS,
)
async def history(mem: Reader, prefix: PrefixQuery, key: KeyQuery) -> Response:
    versions = await mem.store.history(tuple(prefix), key)
    return json_response(ItemHistory(versions=versions))


@router.post(
    "/search",
    response_model=StoreSearchReply,
    summary="Items under a prefix matching a filter, by keyword relevance or newest first; "
    "role read",
    responses=ERRORS,
)
async def search(mem: Reader, body: StoreSearchRequest) -> Response:
    found = await mem.store.search(
        tuple(body.prefix),
        query=body.query,
        filter=body.filter,
        limit=body.limit,
        offset=body.offset,
    )
    return json_response(StoreSearchReply(items=found))


@router.get(
    "/namespaces",
    response_model=StoreNamespaceList,
    summary="The namespaces holding live items, sorted; role read",
    responses=ERRORS,
)
async def namespaces(
    mem: Reader,
    prefix: Annotated[
        list[str] | None, Query(description='labels from the start ("*": any one label)')
    ] = None,
    suffix: Annotated[
        list[str] | None, Query(description='labels from the end ("*": any one label)')
    ] = None,
    max_depth: Annotated[
        int | None, Query(ge=1, description="cut longer namespaces to their first labels")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    found = await mem.store.list_namespaces(
        prefix=None if prefix is None else tuple(prefix),
        suffix=None if suffix is None else tuple(suffix),
        max_depth=max_depth,
        limit=limit,
        offset=offset,
    )
    return json_response(StoreNamespaceList(namespaces=[list(n) for n in found]))
