"""``redismem serve`` over real HTTP (httpx) against the suite's Redis: the
long-term memories, the store and the users' routes (clear, export,
import); round trips, exactly-once writes, 409 on ``if_version``, the roles,
and a key of namespace A refused (403) by every one of these routes of
namespace B, with nothing of B read or changed."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import server_support
from server_support import RunningServer, new_id

pytestmark = pytest.mark.processes
http_server = server_support.http_server
served = server_support.served
server_factory = server_support.server_factory

FACT = {
    "kind": "fact",
    "text": "User lives in Lisbon",
    "subject": "user",
    "predicate": "lives_in",
    "object": "Lisbon",
}
MOVED = {**FACT, "text": "User lives in Porto", "object": "Porto"}


@pytest.fixture
def api(served: RunningServer) -> Iterator[httpx.Client]:
    """A client on namespace a with its admin key."""
    with served.client() as client:
        yield client


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    assert body["type"] == kind, body
    return body


def fill(client: httpx.Client, user: str) -> dict[str, str]:
    """A session, memories and store items for ``user``; the memory ids."""
    ok(
        client.post(
            f"/users/{user}/sessions/s1/messages",
            json={
                "messages": [{"role": "user", "content": "I live in Lisbon"}],
                "tags": {"t": "1"},
            },
        ),
        201,
    )
    lisbon = ok(client.post(f"/users/{user}/memories", json={"record": FACT}), 201)
    porto = ok(client.post(f"/users/{user}/memories", json={"record": MOVED}), 201)
    doc = {"kind": "document", "text": "how to cook ramen " * 100, "title": "Ramen"}
    ok(client.post(f"/users/{user}/memories", json={"record": doc}), 201)
    ok(
        client.post(
            "/store/items",
            json={
                "prefix": [user, "prefs"],
                "key": "food",
                "value": {"title": "ramen", "body": "sushi"},
                "index": ["title"],
            },
        )
    )
    ok(client.post("/store/items", json={"prefix": [user, "a/b"], "key": "x", "value": {"n": 1}}))
    ok(client.delete("/store/items", params={"prefix": [user, "a/b"], "key": "x"}), 204)
    return {"lisbon": lisbon["record"]["id"], "porto": porto["record"]["id"]}


def export(client: httpx.Client, user: str) -> dict[str, Any]:
    document: dict[str, Any] = ok(client.get(f"/users/{user}/export"))
    return document


def promised(document: dict[str, Any]) -> dict[str, Any]:
    """What an import restores (see redismem.portability)."""
    out = copy.deepcopy(document)
    for key in ("exported_at", "summaries"):
        out.pop(key)
    for session in out["sessions"]:
        session.pop("expires_at")
    for item in out["memories"] + out["store"]:
        item.pop("expires_at")
        for version in item["versions"]:
            version.pop("created_at")
            version.pop("updated_at")
    return out


# -- memories ----------------------------------------------------------------------------


def test_memories_add_search_get_update_delete_restore_history_purge(api: httpx.Client) -> None:
    user = new_id()
    base = f"/users/{user}/memories"
    first = ok(api.post(base, json={"record": FACT}, headers={"Idempotency-Key": "add-1"}), 201)
    assert first["outcome"] == "added" and first["record"]["status"] == "active"
    lisbon = first["record"]["id"]
    again = ok(api.post(base, json={"record": FACT}, headers={"Idempotency-Key": "add-1"}), 201)
    assert again["record"]["id"] == lisbon
    moved = ok(api.post(base, json={"record": MOVED, "source": {"origin": "chat"}}), 201)
    assert (moved["outcome"], moved["other"]) == ("superseded", lisbon)
    porto = moved["record"]["id"]
    assert moved["record"]["sources"][0]["origin"] == "chat"

    hits = ok(api.post(f"{base}/search", json={"query": "where do I live"}))["hits"]
    assert [h["record"]["id"] for h in hits] == [porto] and hits[0]["score"] > 0
    every = ok(api.post(f"{base}/search", json={"status": "any", "kinds": ["fact"]}))["hits"]
    assert {h["record"]["id"] for h in every} == {lisbon, porto}
    assert (
        ok(api.post(f"{base}/search", json={"status": ["superseded"]}))["hits"][0]["record"]["id"]
        == lisbon
    )
    assert ok(api.get(f"{base}/{lisbon}"))["memory"]["status"] == "superseded"
    assert ok(api.get(f"{base}/nope"))["memory"] is None

    changed = ok(
        api.patch(f"{base}/{porto}", json={"changes": {"tags": {"k": "v"}}, "reason": "r"})
    )
    assert changed["memory"]["tags"] == {"k": "v"}
    refused = error(
        api.patch(f"{base}/{porto}", json={"changes": {"colour": 1}}), 422, "InvalidInput"
    )
    assert "has no field" in refused["message"]
    error(api.patch(f"{base}/nope", json={"changes": {"text": "x"}}), 422, "InvalidInput")

    assert ok(api.delete(f"{base}/{porto}", params={"reason": "wrong"}))["changed"] is True
    assert ok(api.delete(f"{base}/{porto}"))["changed"] is False
    assert ok(api.post(f"{base}/{lisbon}/restore", json={"reason": "back"}))["changed"] is True
    assert ok(api.post(f"{base}/{lisbon}/restore"))["changed"] is False
    assert ok(api.get(f"{base}/{lisbon}"))["memory"]["status"] == "active"

    history = ok(api.get(f"{base}/{porto}/history"))["history"]
    assert [(c["change"], c["reason"]) for c in history] == [
        ("added", ""),
        ("updated", "r"),
        ("deleted", "wrong"),
    ]
    assert [c["version"] for c in history] == [1, 2, 3]

    assert ok(api.post(f"{base}/{porto}/purge"))["removed"] == 1
    assert ok(api.get(f"{base}/{porto}"))["memory"] is None
    assert ok(api.get(f"{base}/{porto}/history"))["history"] == []
    assert ok(api.delete(base))["removed"] == 1
    assert ok(api.post(f"{base}/search", json={"status": "any"}))["hits"] == []


def test_memories_refuse_what_is_not_a_record(api: httpx.Client) -> None:
    user = new_id()
    base = f"/users/{user}/memories"
    error(
        api.post(base, json={"record": {"kind": "fact", "text": "x"}}),
        422,
        "RequestValidationError",
    )
    error(api.post(base, json={"record": {**FACT, "text": "  "}}), 422, "RequestValidationError")
    error(api.post(base, json={"record": FACT, "extra": 1}), 422, "RequestValidationError")
    error(
        api.post(base, json={"record": FACT}, headers={"Idempotency-Key": "a b"}),
        422,
        "InvalidInput",
    )
    error(api.post(f"{base}/search", json={"status": "gone"}), 422, "RequestValidationError")
    assert ok(api.post(f"{base}/search", json={"status": "any"}))["hits"] == []


# -- the store ------------------------------------------------------------------------------


def test_store_put_get_history_search_namespaces_delete(api: httpx.Client) -> None:
    user = new_id()
    where = {"prefix": [user, "prefs/2024"], "key": "food"}
    body = {**where, "value": {"title": "ramen", "stars": 5}, "source": {"s": "s1"}}
    first = ok(api.post("/store/items", json=body, headers={"Idempotency-Key": "put-1"}))["item"]
    assert (first["namespace"], first["key"], first["version"]) == ([user, "prefs/2024"], "food", 1)
    again = ok(api.post("/store/items", json=body, headers={"Idempotency-Key": "put-1"}))["item"]
    assert again["version"] == 1  # the same put, once
    conflict = error(
        api.post("/store/items", json={**body, "if_version": 0}), 409, "VersionConflict"
    )
    assert "food" in conflict["message"]
    second = ok(
        api.post(
            "/store/items", json={**body, "value": {"title": "sushi", "stars": 3}, "if_version": 1}
        )
    )["item"]
    assert second["version"] == 2
    error(api.post("/store/items", json={**body, "if_version": 1}), 409, "VersionConflict")

    got = ok(api.get("/store/items", params=where))["item"]
    assert got["value"] == {"title": "sushi", "stars": 3} and got["source"] == {"s": "s1"}
    assert ok(api.get("/store/items", params={**where, "key": "none"}))["item"] is None

    ok(
        api.post(
            "/store/items",
            json={
                "prefix": [user, "notes"],
                "key": "n",
                "value": {"text": "ramen is good", "stars": 4},
                "ttl": 3600,
            },
        )
    )
    found = ok(api.post("/store/search", json={"prefix": [user], "query": "ramen"}))["items"]
    assert [(i["key"], i["score"] > 0) for i in found] == [("n", True)]
    found = ok(api.post("/store/search", json={"prefix": [user], "filter": {"stars": {"$gte": 3}}}))
    assert [i["key"] for i in found["items"]] == ["n", "food"]  # newest first
    listed = ok(api.get("/store/namespaces", params={"prefix": [user]}))["namespaces"]
    assert listed == [[user, "notes"], [user, "prefs/2024"]]
    assert ok(api.get("/store/namespaces", params={"prefix": [user], "suffix": ["notes"]}))[
        "namespaces"
    ] == [[user, "notes"]]
    assert ok(api.get("/store/namespaces", params={"prefix": [user], "max_depth": 1}))[
        "namespaces"
    ] == [[user]]

    assert (
        ok(api.delete("/store/items", params=where, headers={"Idempotency-Key": "d"}), 204) is None
    )
    assert ok(api.get("/store/items", params=where))["item"] is None
    versions = ok(api.get("/store/items/history", params=where))["versions"]
    assert [(v["version"], v["deleted"]) for v in versions] == [(1, False), (2, False), (3, True)]
    # put only if there is no live item: there is none now.
    assert ok(api.post("/store/items", json={**body, "if_version": 0}))["item"]["version"] == 4

    error(api.post("/store/items", json={**body, "prefix": []}), 422, "RequestValidationError")
    error(api.post("/store/items", json={**body, "value": [1]}), 422, "RequestValidationError")
    error(api.post("/store/items", json={**body, "index": ["a..b"]}), 422, "InvalidInput")
    error(api.get("/store/items", params={"key": "food"}), 422, "RequestValidationError")


# -- users: clear, export, import -------------------------------------------------------------


def test_export_clear_import_over_http(api: httpx.Client) -> None:
    user = new_id()
    ids = fill(api, user)
    document = export(api, user)
    assert document["format"] == "redismem.user/1" and document["user_id"] == user
    assert [s["session_id"] for s in document["sessions"]] == ["s1"]
    assert {i["key"] for i in document["store"]} == {"food", "x"}

    assert ok(api.delete(f"/users/{user}"))["removed"] > 0
    assert ok(api.get(f"/users/{user}/sessions"))["sessions"] == []
    assert ok(api.get(f"/users/{user}/memories/{ids['porto']}"))["memory"] is None
    empty = export(api, user)
    assert (empty["sessions"], empty["memories"], empty["store"]) == ([], [], [])

    report = ok(api.post(f"/users/{user}/import", json=document))
    assert (report["entries_written"], report["conflicts"]) == (1, [])
    assert promised(export(api, user)) == promised(document)
    again = ok(api.post(f"/users/{user}/import", json=document))
    assert (again["entries_written"], again["versions_written"]) == (0, 0)
    assert again["items_present"] == report["items_written"]
    # The memories work as before: the slot knows its current value.
    hits = ok(api.post(f"/users/{user}/memories/search", json={"query": "where do I live"}))
    assert [h["record"]["id"] for h in hits["hits"]] == [ids["porto"]]

    other = new_id()
    report = ok(api.post(f"/users/{other}/import", json=document))
    assert report["user_id"] == other
    moved = export(api, other)
    assert moved["user_id"] == other and len(moved["memories"]) == len(document["memories"])

    for broken, kind in [
        ({**document, "format": "redismem.user/9"}, "InvalidInput"),
        ({**document, "sessions": document["sessions"] * 2}, "InvalidInput"),
        ({**document, "extra": 1}, "RequestValidationError"),
        ({k: v for k, v in document.items() if k != "user_id"}, "RequestValidationError"),
    ]:
        fresh = new_id()
        error(api.post(f"/users/{fresh}/import", json=broken), 422, kind)
        assert export(api, fresh)["sessions"] == [] and export(api, fresh)["store"] == []
    for name in (user, other):
        ok(api.delete(f"/users/{name}"))


# -- roles and namespaces ---------------------------------------------------------------------


def routes(user: str, memory_id: str) -> list[tuple[str, str, dict[str, Any], str]]:
    """Every route of this module: method, path, request options, the role it needs."""
    item = {"prefix": [user, "prefs"], "key": "food"}
    base = f"/users/{user}/memories"
    return [
        ("POST", base, {"json": {"record": MOVED}}, "write"),
        ("POST", f"{base}/search", {"json": {"query": "lives"}}, "read"),
        ("GET", f"{base}/{memory_id}", {}, "read"),
        ("PATCH", f"{base}/{memory_id}", {"json": {"changes": {"text": "x lives"}}}, "write"),
        ("DELETE", f"{base}/{memory_id}", {}, "write"),
        ("POST", f"{base}/{memory_id}/restore", {}, "write"),
        ("GET", f"{base}/{memory_id}/history", {}, "read"),
        ("POST", f"{base}/{memory_id}/purge", {}, "admin"),
        ("DELETE", base, {}, "admin"),
        ("POST", "/store/items", {"json": {**item, "value": {"title": "x"}}}, "write"),
        ("GET", "/store/items", {"params": item}, "read"),
        ("DELETE", "/store/items", {"params": item}, "write"),
        ("GET", "/store/items/history", {"params": item}, "read"),
        ("POST", "/store/search", {"json": {"prefix": [user]}}, "read"),
        ("GET", "/store/namespaces", {"params": {"prefix": [user]}}, "read"),
        ("DELETE", f"/users/{user}", {}, "admin"),
        ("GET", f"/users/{user}/export", {}, "admin"),
        ("POST", f"/users/{user}/import", {"json": "DOCUMENT"}, "admin"),
    ]


def _send(
    server: RunningServer, namespace: str, key: str | None, route: tuple[Any, ...], doc: Any
) -> httpx.Response:
    method, path, options, _role = route
    options = {k: (doc if v == "DOCUMENT" else v) for k, v in options.items()}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(
        method, server.api(namespace) + path, headers=headers, timeout=30, **options
    )


def test_a_key_of_another_namespace_is_refused_and_reads_or_changes_nothing(
    served: RunningServer,
) -> None:
    user = new_id()
    with served.client(served.b) as b:
        ids = fill(b, user)
        before = export(b, user)
    for route in routes(user, ids["lisbon"]):
        for role in ("read", "write", "admin"):
            response = _send(served, served.b, served.key(served.a, role), route, before)
            error(response, 403, "Forbidden")
            assert user not in response.text
    with served.client(served.b) as b:
        after = export(b, user)
        ok(b.delete(f"/users/{user}"))
    assert {**after, "exported_at": None} == {**before, "exported_at": None}
    with served.client(served.a) as a:
        assert export(a, user)["sessions"] == [] and export(a, user)["store"] == []


def test_each_route_needs_its_role_and_a_key(served: RunningServer) -> None:
    user = new_id()
    with served.client() as admin:
        ids = fill(admin, user)
        document = export(admin, user)
    order = ("read", "write", "admin")
    for route in routes(user, ids["lisbon"]):
        needed = route[3]
        error(_send(served, served.a, None, route, document), 401, "Unauthorized")
        error(
            _send(served, served.a, "rmk_000000000000_nope", route, document), 401, "Unauthorized"
        )
        for role in order[: order.index(needed)]:
            error(
                _send(served, served.a, served.key(served.a, role), route, document),
                403,
                "Forbidden",
            )
    with served.client() as admin:
        assert promised(export(admin, user)) == promised(document)  # nothing changed
    for route in routes(user, ids["lisbon"]):
        response = _send(served, served.a, served.key(served.a, route[3]), route, document)
        assert response.status_code in (200, 201, 204), (route, response.text)
    with served.client() as admin:
        ok(admin.delete(f"/users/{user}"))


# -- Redis never reached ----------------------------------------------------------------


def test_every_write_route_names_its_write_id_in_a_503_when_redis_was_never_reached(
    redis_server_factory: Any, server_factory: Callable[..., RunningServer]
) -> None:
    """Redis down when the server starts: the first request of a namespace
    opens its connection, and fails doing so, before any write is made. The
    503 names the id to retry with (the one sent, else one the server
    drew), and the retries with it are applied once."""
    disposable = redis_server_factory(extra_args=("--appendonly", "yes"))
    disposable.stop()
    server = server_factory(redis_url=disposable.url)
    user = new_id()
    item = {"prefix": [user, "prefs"], "key": "seat", "value": {"row": 7}}
    where = {"prefix": [user, "prefs"], "key": "seat"}
    writes: dict[str, tuple[str, str, dict[str, Any]]] = {
        "add": ("POST", f"/users/{user}/memories", {"json": {"record": FACT}}),
        "put": ("POST", "/store/items", {"json": item}),
        "delete": ("DELETE", "/store/items", {"params": where}),
    }
    with server.client() as api:

        def send(name: str, write_id: str | None) -> httpx.Response:
            method, path, options = writes[name]
            headers = {"Idempotency-Key": write_id} if write_id else {}
            return api.request(method, path, headers=headers, **options)

        ids: dict[str, str] = {}
        for name in writes:
            for sent in (None, f"{name}-key-1"):
                away = send(name, sent)
                body = error(away, 503, "BackendUnavailable")
                assert away.headers["retry-after"] == "1"
                assert body["write_id"] and away.headers["idempotency-key"] == body["write_id"]
                assert body["write_id"] == (sent or body["write_id"])
                if sent is None:
                    ids[name] = body["write_id"]
        assert len(set(ids.values())) == 3
        disposable.restart()

        def retried(name: str) -> httpx.Response:
            deadline = time.monotonic() + 30
            while (response := send(name, ids[name])).status_code == 503:
                assert time.monotonic() < deadline, response.text
                time.sleep(0.2)
            return response

        added, again = ok(retried("add"), 201), ok(send("add", ids["add"]), 201)
        assert again["record"]["id"] == added["record"]["id"]
        put, again = ok(retried("put")), ok(send("put", ids["put"]))
        assert put["item"]["version"] == again["item"]["version"] == 1
        assert ok(retried("delete"), 204) is None
        assert ok(send("delete", ids["delete"]), 204) is None
        history = ok(api.get("/store/items/history", params=where))["versions"]
        assert len(history) == 2  # the put and one tombstone
        hits = ok(api.post(f"/users/{user}/memories/search", json={"status": "any"}))["hits"]
        assert [h["record"]["id"] for h in hits] == [added["record"]["id"]]
        ok(api.delete(f"/users/{user}/memories"))
