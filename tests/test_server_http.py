"""``redismem serve`` over real HTTP (httpx) against the suite's Redis: the
probes, every sessions and recall route, round trips, idempotent appends and
the request limits (413, 415, 400, 422). One server process for the module;
each test its own users and sessions."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import server_support
from server_support import RunningServer, new_id
from worker_support import WorkerPool, worker_env

from redismem.server.openapi import document

pytestmark = pytest.mark.processes
http_server = server_support.http_server
served = server_support.served
server_factory = server_support.server_factory

TOOL_TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "what is the weather in Paris?", "name": "ann"},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "call-1", "name": "weather", "arguments": {"city": "Paris", "days": [1, 2]}},
            {"id": "call-2", "name": "clock", "arguments": '{"tz": "CET"}'},
        ],
        "metadata": {"model": "m-1", "cost": 0.25, "flags": [True, None], "deep": {"a": {"b": 1}}},
    },
    {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call-1"},
    {"role": "tool", "content": "14:05", "tool_call_id": "call-2"},
    {"role": "assistant", "content": "Sunny, 21C, at 14:05 — ünïcödé ✓ 🌞"},
]


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.fixture
def api(served: RunningServer) -> Iterator[httpx.Client]:
    """A client on namespace a with its admin key."""
    with served.client() as client:
        yield client


def append(
    client: httpx.Client, user: str, session: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    return client.post(f"/users/{user}/sessions/{session}/messages", json=body, headers=headers)


def stored(client: httpx.Client, user: str, session: str) -> list[dict[str, Any]]:
    response = client.get(f"/users/{user}/sessions/{session}/messages")
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def input_fields(message: dict[str, Any]) -> dict[str, Any]:
    """What a caller gives of a message read back (the store fills the rest)."""
    return {k: v for k, v in message.items() if k not in ("id", "created_at", "token_count")}


# -- probes ----------------------------------------------------------------------


def test_healthz_answers_without_a_key_or_redis_call(served: RunningServer) -> None:
    response = httpx.get(f"{served.base_url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_503_without_a_worker_then_200_once_one_runs(
    served: RunningServer, workers: WorkerPool
) -> None:
    response = httpx.get(f"{served.base_url}/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["redis"] == "ok"
    assert body["checks"]["queue"] == "ok"
    assert "no healthy worker" in body["checks"]["workers"]
    assert body["error"]["type"] == "NotReady"
    assert response.headers["retry-after"] == "1"
    # Workers optional (a readiness probe: writes wait in the queue): ready,
    # with the same checks reported.
    optional = httpx.get(f"{served.base_url}/readyz", params={"workers": "optional"})
    assert optional.status_code == 200, optional.text
    assert optional.json() == {"status": "ready", "checks": body["checks"]}
    required = httpx.get(f"{served.base_url}/readyz", params={"workers": "required"})
    assert required.status_code == 503 and required.json() == body
    wrong = httpx.get(f"{served.base_url}/readyz", params={"workers": "maybe"})
    assert wrong.status_code == 422, wrong.text

    workers.start(worker_env(served.redis_url, ",".join(served.namespaces), served.queue_name))
    deadline = time.monotonic() + 30
    while (response := httpx.get(f"{served.base_url}/readyz")).status_code != 200:
        assert time.monotonic() < deadline, f"{response.text}\n{workers.logs()}"
        time.sleep(0.2)
    assert response.json() == {
        "status": "ready",
        "checks": {"redis": "ok", "queue": "ok", "workers": "1 of 1 healthy"},
    }


def test_readyz_is_503_without_redis_even_with_workers_optional(
    redis_server_factory: Any, server_factory: Callable[..., RunningServer]
) -> None:
    disposable = redis_server_factory()
    disposable.stop()
    server = server_factory(redis_url=disposable.url)
    for params in ({}, {"workers": "optional"}):
        response = httpx.get(f"{server.base_url}/readyz", params=params, timeout=30)
        assert response.status_code == 503, (params, response.text)
        body = response.json()
        assert body["status"] == "unready" and body["error"]["type"] == "NotReady"
        assert body["checks"]["redis"].startswith("unreachable")
        assert body["checks"]["queue"].startswith("unreachable")
        assert response.headers["retry-after"] == "1"


def test_readyz_looks_at_redis_at_most_once_a_second(served: RunningServer) -> None:
    time.sleep(1.1)  # not an answer cached by the test before
    started = time.monotonic()
    answers = [httpx.get(f"{served.base_url}/readyz").json() for _ in range(20)]
    if time.monotonic() - started < 0.9:  # all within one cache period
        assert all(a == answers[0] for a in answers)


def test_the_served_openapi_document_is_the_committed_one(served: RunningServer) -> None:
    response = httpx.get(f"{served.base_url}/openapi.json")
    assert response.status_code == 200
    assert response.json() == document()


# -- sessions ----------------------------------------------------------------------


def test_append_and_read_round_trip_every_field(api: httpx.Client) -> None:
    user, session = new_id(), new_id("s")
    said = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    body = {
        "messages": TOOL_TURN,
        "tags": {"topic": "weather", "lang": "en"},
        "agent_name": "planner",
        "created_at": said.isoformat(),
    }
    response = append(api, user, session, body)
    assert response.status_code == 201, response.text
    entry = response.json()
    assert entry["session_id"] == session and entry["user_id"] == user
    assert entry["metadata"]["tags"] == {"topic": "weather", "lang": "en"}
    assert entry["metadata"]["agent_name"] == "planner"
    assert datetime.fromisoformat(entry["metadata"]["created_at"]) == said
    assert entry["id"] == entry["messages"][0]["id"]

    read = stored(api, user, session)
    assert read == entry["messages"]
    expected = [
        {"name": None, "tool_calls": [], "tool_call_id": None, "metadata": {}, "content": ""} | m
        for m in TOOL_TURN
    ]
    assert [input_fields(m) for m in read] == expected
    assert all(datetime.fromisoformat(m["created_at"]) == said for m in read)
    assert all(m["token_count"] > 0 for m in read)

    # What was read can be written back as it is (store fields ignored).
    again = append(api, user, new_id("s"), {"messages": read})
    assert again.status_code == 201, again.text
    assert [input_fields(m) for m in again.json()["messages"]] == expected


def test_read_by_limit_budget_and_tags_and_orphans(api: httpx.Client) -> None:
    user, session = new_id(), new_id("s")
    base = f"/users/{user}/sessions/{session}/messages"
    assert append(api, user, session, {"messages": TOOL_TURN, "tags": {"k": "a:b"}}).is_success
    plain = [{"role": "user", "content": f"plain {i}"} for i in range(3)]
    assert append(api, user, session, {"messages": plain, "tags": {"k": "other"}}).is_success

    assert [m["content"] for m in api.get(base, params={"limit": 2}).json()["messages"]] == [
        "plain 1",
        "plain 2",
    ]
    tagged = api.get(base, params={"tag": "k:a:b"}).json()["messages"]  # split at the first ":"
    assert [m["content"] for m in tagged] == [m.get("content", "") for m in TOOL_TURN]
    both = api.get(base, params=[("tag", "k:other"), ("limit", "1")]).json()["messages"]
    assert [m["content"] for m in both] == ["plain 2"]
    budget = api.get(base, params={"max_tokens": 1}).json()["messages"]
    assert budget == []
    # The last three of the first entry start with a tool result: dropped
    # unless keep_orphans.
    orphaned = api.get(base, params={"tag": "k:a:b", "limit": 3}).json()["messages"]
    assert [m["role"] for m in orphaned] == ["assistant"]
    kept = api.get(base, params={"tag": "k:a:b", "limit": 3, "keep_orphans": "true"})
    assert [m["role"] for m in kept.json()["messages"]] == ["tool", "tool", "assistant"]


def test_context_summary_entries_sessions_and_clear(api: httpx.Client) -> None:
    user, first, second = new_id(), new_id("s"), new_id("s")
    assert append(api, user, first, {"messages": TOOL_TURN, "tags": {"t": "1"}}).is_success
    assert append(api, user, second, {"messages": [{"role": "user", "content": "hi"}]}).is_success

    context = api.get(f"/users/{user}/sessions/{first}/context").json()
    assert context["summary"] is None
    assert [input_fields(m)["role"] for m in context["messages"]] == [m["role"] for m in TOOL_TURN]
    assert context["token_count"] == sum(m["token_count"] for m in context["messages"])
    small = api.get(f"/users/{user}/sessions/{first}/context", params={"max_tokens": 10}).json()
    assert small["token_count"] <= 10

    assert api.get(f"/users/{user}/sessions/{first}/summary").json() == {"summary": None}

    entries = api.get(f"/users/{user}/sessions/{first}/entries").json()["entries"]
    assert len(entries) == 1 and entries[0]["metadata"]["tags"] == {"t": "1"}
    assert api.get(f"/users/{user}/sessions/{first}/entries", params={"tag": "t:2"}).json() == {
        "entries": []
    }

    listed = api.get(f"/users/{user}/sessions").json()["sessions"]
    assert {s["session_id"] for s in listed} == {first, second}
    assert {s["session_id"]: s["message_count"] for s in listed} == {first: 5, second: 1}
    tagged = api.get(f"/users/{user}/sessions", params={"tag": "t:1"}).json()["sessions"]
    assert [s["session_id"] for s in tagged] == [first]

    cleared = api.delete(f"/users/{user}/sessions/{first}")
    assert cleared.status_code == 200 and cleared.json()["removed"] > 0
    assert stored(api, user, first) == []
    assert [s["session_id"] for s in api.get(f"/users/{user}/sessions").json()["sessions"]] == [
        second
    ]


def test_an_append_retried_with_its_idempotency_key_is_stored_once(api: httpx.Client) -> None:
    user, session = new_id(), new_id("s")
    body = {"messages": [{"role": "user", "content": "once"}]}
    first = append(api, user, session, body, **{"Idempotency-Key": "retry-me-1"})
    again = append(api, user, session, body, **{"Idempotency-Key": "retry-me-1"})
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    other = append(api, user, session, body, **{"Idempotency-Key": "retry-me-2"})
    assert other.json()["id"] != first.json()["id"]
    assert [m["content"] for m in stored(api, user, session)] == ["once", "once"]


def test_a_bad_idempotency_key_is_the_librarys_422(api: httpx.Client) -> None:
    user, session = new_id(), new_id("s")
    body = {"messages": [{"role": "user", "content": "x"}]}
    response = append(api, user, session, body, **{"Idempotency-Key": "has space"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "InvalidInput"
    assert error["message"].startswith("write_id must be 1-128 printable ASCII characters")
    assert stored(api, user, session) == []


# -- recall --------------------------------------------------------------------------


def test_search_with_every_filter_after_flush(
    served: RunningServer, api: httpx.Client, workers: WorkerPool
) -> None:
    workers.start(worker_env(served.redis_url, ",".join(served.namespaces), served.queue_name))
    user, s1, s2 = new_id(), new_id("s"), new_id("s")
    before = datetime.now(UTC) - timedelta(seconds=5)
    assert append(api, user, s1, {"messages": TOOL_TURN, "tags": {"topic": "weather"}}).is_success
    assert append(
        api,
        user,
        s2,
        {"messages": [{"role": "user", "content": "the weather in Rome?"}], "agent_name": "bot"},
    ).is_success
    flushed = api.post("/flush", json={"user_id": user, "timeout": 30})
    assert flushed.status_code == 200 and flushed.json() == {"done": True}, workers.logs()

    def search(**body: Any) -> list[dict[str, Any]]:
        response = api.post(f"/users/{user}/search", json=body)
        assert response.status_code == 200, response.text
        hits: list[dict[str, Any]] = response.json()["hits"]
        return hits

    found = search(query="weather")
    assert {h["session_id"] for h in found} == {s1, s2}
    assert all(h["score"] > 0 for h in found)
    assert [h["session_id"] for h in search(query="weather", session_id=s2)] == [s2]
    assert {h["session_id"] for h in search(query="weather", tags={"topic": "weather"})} == {s1}
    assert [h["agent_name"] for h in search(query="weather", agent_name="bot")] == ["bot"]
    assert {h["message"]["role"] for h in search(query="weather", roles=["user"])} == {"user"}
    assert len(search(query="weather", limit=1)) == 1
    assert search(query="weather", since=datetime.now(UTC).isoformat(), until=None) == []
    assert len(search(query="weather", since=before.isoformat())) == len(found)
    assert search(query="weather", min_score=1e9) == []
    newest = search()
    assert newest and all(h["score"] is None for h in newest)
    sunny = search(query="sunny")
    assert sunny[0]["message"]["content"] == "sunny, 21C"
    assert sunny[0]["tags"] == {"topic": "weather"}


def test_flush_of_everyone_with_or_without_a_body(api: httpx.Client) -> None:
    # Nothing is due in these namespaces (each test's keys are deleted after
    # it): nothing to wait for.
    for response in (api.post("/flush"), api.post("/flush", json={"timeout": 1})):
        assert response.status_code == 200, response.text
        assert response.json() == {"done": True}
    user = new_id()
    assert append(api, user, new_id("s"), {"messages": [{"role": "user", "content": "x"}]})
    # No worker: the write's indexing stays due.
    response = api.post("/flush", json={"user_id": user, "timeout": 0.2})
    assert response.json() == {"done": False}
    too_long = api.post("/flush", json={"timeout": 301})
    assert too_long.status_code == 422


def test_search_refuses_unknown_fields_and_naive_times(api: httpx.Client) -> None:
    user = new_id()
    typo = api.post(f"/users/{user}/search", json={"qurey": "x"})
    assert typo.status_code == 422 and typo.json()["error"]["type"] == "RequestValidationError"
    naive = api.post(f"/users/{user}/search", json={"since": "2024-01-01T00:00:00"})
    assert naive.status_code == 422
    assert naive.json()["error"]["type"] == "InvalidInput"


# -- limits and malformed requests ---------------------------------------------------


def test_a_body_over_the_limit_is_413_and_changes_nothing(api: httpx.Client) -> None:
    user, session = new_id(), new_id("s")
    big = {"messages": [{"role": "user", "content": "x" * (2 * 1024 * 1024)}]}
    declared = append(api, user, session, big)
    assert declared.status_code == 413
    assert declared.json()["error"]["type"] == "PayloadTooLarge"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies as it streams
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(11 * 1024):
            yield b"y" * 1024
        yield b'"}]}'

    streamed = api.post(
        f"/users/{user}/sessions/{session}/messages",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert streamed.status_code == 413
    assert streamed.json()["error"]["type"] == "PayloadTooLarge"
    assert stored(api, user, session) == []


def test_a_body_that_is_not_json_is_415_and_changes_nothing(api: httpx.Client) -> None:
    user, session = new_id(), new_id("s")
    url = f"/users/{user}/sessions/{session}/messages"
    body = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
    for headers in (
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/x-www-form-urlencoded"},
        {},
    ):
        response = api.post(url, content=body, headers=headers)
        assert response.status_code == 415, (headers, response.text)
        assert response.json()["error"]["type"] == "UnsupportedMediaType"
    assert (
        api.post(
            url, content=body, headers={"Content-Type": "application/json; charset=utf-8"}
        ).status_code
        == 201
    )
    assert len(stored(api, user, session)) == 1


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response read off ``sock``: status, headers (lower-case
    names), body (the server's answers all have a Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, f"the connection closed before an answer: {data[:300]!r}"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        more = sock.recv(65536)
        assert more, "the connection closed in the middle of the answer"
        body += more
    return int(status_line.split()[1]), headers, body[:length]


def chunked_request(served: RunningServer, path: str, content_type: str) -> bytes:
    """The head of a POST to ``path`` (under namespace a) with a chunked body."""
    return (
        f"POST {served.api().removeprefix(served.base_url)}{path} HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Bearer {served.key()}\r\n"
        f"Content-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()


def chunk_encoded(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        piece = body[start : start + size]
        yield b"%x\r\n%s\r\n" % (len(piece), piece)
    yield b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("content_type", "status", "kind"),
    [("text/plain", 415, "UnsupportedMediaType"), ("application/json", 400, "BadRequest")],
    ids=["wrong-type", "invalid-utf8"],
)
def test_a_refused_1mb_body_is_read_before_its_answer_and_the_connection_kept(
    served: RunningServer, content_type: str, status: int, kind: str
) -> None:
    """As a reverse proxy does: the whole body sent, then the answer read.
    A server answering before it has read the body, and closing, makes the
    sender see a reset (nginx then answers 502). The body, under the limit,
    is read to its end; the answer keeps the connection for the next
    request."""
    user, session = new_id(), new_id("s")
    path = f"/users/{user}/sessions/{session}/messages"
    body = b'{"messages": [{"role": "user", "content": "\xff' + b"y" * 1_000_000 + b'"}]}'
    assert len(body) < 1024 * 1024
    head = chunked_request(served, path, content_type)
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
            sock.sendall(head)
            for i, piece in enumerate(chunk_encoded(body)):
                sock.sendall(piece)  # a reset here is what the proxy saw
                if i == 0:
                    time.sleep(0.05)  # the rest comes later, as a proxy streams it
            answer, headers, text = read_response(sock)
            assert (answer, json.loads(text)["error"]["type"]) == (status, kind), text[:300]
            assert headers.get("connection", "").lower() != "close", headers
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            again, _, text = read_response(sock)
            assert (again, json.loads(text)) == (200, {"status": "ok"})
    with served.client() as client:
        assert stored(client, user, session) == []


def test_a_body_over_the_limit_is_answered_413_in_full_before_the_connection_closes(
    served: RunningServer,
) -> None:
    """A body over the limit is not read to its end: the 413 goes out whole,
    then the server closes (what a client still sending makes of that close
    is its own affair; nginx, in deploy/, refuses such bodies itself)."""
    user, session = new_id(), new_id("s")
    path = f"/users/{user}/sessions/{session}/messages"
    body = b'{"messages": [{"role": "user", "content": "' + b"y" * 2_000_000 + b'"}]}'
    head = chunked_request(served, path, "application/json")
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:

            def send() -> None:
                try:
                    sock.sendall(head)
                    for piece in chunk_encoded(body):
                        sock.sendall(piece)
                except OSError:
                    pass  # the server closed: expected once it has answered

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            answer, headers, text = read_response(sock)
            assert answer == 413 and json.loads(text)["error"]["type"] == "PayloadTooLarge"
            assert headers["connection"].lower() == "close"
            sender.join(timeout=30)
    with served.client() as client:
        assert stored(client, user, session) == []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "x"}',
        b'{"messages": [{"role": "user", "content": "\xff\xfe bad utf-8"}]}',
        b"[" * 100_000 + b"]" * 100_000,
        b"",
    ],
    ids=["truncated", "invalid-utf8", "deep-nesting", "empty"],
)
def test_malformed_json_is_400_or_422_and_changes_nothing(api: httpx.Client, raw: bytes) -> None:
    user, session = new_id(), new_id("s")
    response = api.post(
        f"/users/{user}/sessions/{session}/messages",
        content=raw,
        headers={"Content-Type": "application/json"},
    )
    if raw:
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "BadRequest"
    else:  # no body at all: the body is missing
        assert response.status_code == 422, response.text
    assert stored(api, user, session) == []


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"messages": [{"role": "robot", "content": "x"}]},
        {"messages": [{"role": "user"}]},
        {"messages": [{"role": "user", "content": None}]},
        {"messages": [{"role": "user", "content": "x"}], "tags": {"k": 1}},
        {"messages": [{"role": "user", "content": "x"}], "created_at": "yesterday"},
        {"messages": [{"role": "user", "content": "x"}], "extra": 1},
        {"messages": [{"role": "user", "content": "x", "metadata": {"n": float("inf")}}]},
        {"messages": [{"role": "user", "content": "lone \ud800 surrogate"}]},
        {"messages": [{"role": "user", "content": "x", "metadata": nested(40)}]},
        {"messages": [{"role": "user", "content": "x"}], "tags": {"k": "\udc00"}},
    ],
    ids=[
        "no-messages",
        "empty",
        "bad-role",
        "no-content",
        "null-content",
        "bad-tag",
        "bad-time",
        "unknown-field",
        "infinite-metadata",
        "surrogate-content",
        "metadata-too-deep",
        "surrogate-tag",
    ],
)
def test_invalid_bodies_are_422_with_the_error_body_and_change_nothing(
    api: httpx.Client, body: dict[str, Any]
) -> None:
    user, session = new_id(), new_id("s")
    response = api.post(
        f"/users/{user}/sessions/{session}/messages",
        content=json.dumps(body, allow_nan=True),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] in ("RequestValidationError", "InvalidInput")
    assert error["message"]
    assert stored(api, user, session) == []


def test_library_refusals_are_422_with_the_librarys_message(api: httpx.Client) -> None:
    user = new_id()
    bad_tag = api.get(f"/users/{user}/sessions", params={"tag": "nocolon"})
    assert bad_tag.status_code == 422
    assert bad_tag.json()["error"] == {
        "type": "InvalidInput",
        "message": "tag must be key:value, got 'nocolon'",
    }
    naive = append(
        api,
        user,
        new_id("s"),
        {"messages": [{"role": "user", "content": "x"}], "created_at": "2024-01-01T00:00:00"},
    )
    assert naive.status_code == 422 and naive.json()["error"]["type"] == "InvalidInput"


def test_unknown_routes_and_methods_have_the_error_body(served: RunningServer) -> None:
    missing = httpx.get(f"{served.base_url}/v2/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFound"
    wrong = httpx.put(f"{served.base_url}/healthz")
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "MethodNotAllowed"


# -- processes ---------------------------------------------------------------------


def test_sigterm_lets_the_requests_in_flight_finish(
    server_factory: Callable[..., RunningServer],
) -> None:
    server = server_factory(extra_args=["--shutdown-timeout", "20"])
    user = new_id()
    with server.client() as client:
        assert append(client, user, new_id("s"), {"messages": [{"role": "user", "content": "x"}]})
        # No worker: this flush waits its whole timeout, in flight at SIGTERM.
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.post, "/flush", json={"user_id": user, "timeout": 3})
            time.sleep(1)
            server.process.send_signal(signal.SIGTERM)
            response = pending.result(timeout=30)
    assert response.status_code == 200, response.text
    assert response.json() == {"done": False}
    server.process.wait(timeout=20)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.base_url}/healthz")
    assert "Traceback" not in server.log(), server.log()


def test_several_processes_serve_with_the_same_settings(
    server_factory: Callable[..., RunningServer],
) -> None:
    server = server_factory(extra_args=["--workers", "2", "--max-body-bytes", "2000"])
    user, session = new_id(), new_id("s")
    with server.client(role="write") as client:
        for i in range(20):  # new connections: both processes answer some
            response = httpx.post(
                f"{server.api()}/users/{user}/sessions/{session}/messages",
                json={"messages": [{"role": "user", "content": f"m{i}"}]},
                headers=server.headers(role="write"),
            )
            assert response.status_code == 201, response.text
        assert len(stored(client, user, session)) == 20
        big = append(client, user, session, {"messages": [{"role": "user", "content": "x" * 3000}]})
        assert big.status_code == 413
    assert httpx.get(f"{server.api()}/users/{user}/sessions").status_code == 401
    assert server.stop() is not None


# -- Redis away -------------------------------------------------------------------


def test_an_append_while_redis_is_away_is_503_with_its_write_id_then_stored_once(
    redis_server_factory: Any, server_factory: Any, tmp_path: Path
) -> None:
    disposable = redis_server_factory(extra_args=("--appendonly", "yes"))
    server = server_factory(redis_url=disposable.url)
    user, session = new_id(), new_id("s")
    with server.client() as client:
        assert append(client, user, session, {"messages": [{"role": "user", "content": "a"}]})
        disposable.stop()
        body = {"messages": [{"role": "user", "content": "while away"}]}
        away = append(client, user, session, body)
        assert away.status_code == 503, away.text
        error = away.json()["error"]
        assert error["type"] == "BackendUnavailable"
        assert away.headers["retry-after"] == "1"
        assert away.headers["idempotency-key"] == error["write_id"]
        disposable.restart()
        deadline = time.monotonic() + 30
        while (
            retry := append(client, user, session, body, **{"Idempotency-Key": error["write_id"]})
        ).status_code != 201:
            assert retry.status_code == 503 and time.monotonic() < deadline, retry.text
            time.sleep(0.2)
        again = append(client, user, session, body, **{"Idempotency-Key": error["write_id"]})
        assert again.json()["id"] == retry.json()["id"]
        assert [m["content"] for m in stored(client, user, session)] == ["a", "while away"]


def test_an_append_to_a_redis_never_reached_is_503_with_its_write_id_then_stored_once(
    redis_server_factory: Any, server_factory: Any
) -> None:
    # Redis is down when the server starts: the first requests open the
    # connection, and fail doing so, before the library ever sees the write.
    disposable = redis_server_factory(extra_args=("--appendonly", "yes"))
    disposable.stop()
    server = server_factory(redis_url=disposable.url)
    user, session = new_id(), new_id("s")
    body = {"messages": [{"role": "user", "content": "before redis"}]}
    with server.client() as client:
        drawn = append(client, user, session, body)
        named = append(client, user, session, body, **{"Idempotency-Key": "my-key-1"})
        ids = []
        for away, sent in ((drawn, None), (named, "my-key-1")):
            assert away.status_code == 503, away.text
            assert away.headers["retry-after"] == "1"
            error = away.json()["error"]
            assert error["type"] == "BackendUnavailable"
            assert error["write_id"] and away.headers["idempotency-key"] == error["write_id"]
            if sent is not None:
                assert error["write_id"] == sent
            ids.append(error["write_id"])
        assert len(set(ids)) == 2
        disposable.restart()
        entries = []
        for write_id in ids:
            deadline = time.monotonic() + 30
            while (
                retry := append(client, user, session, body, **{"Idempotency-Key": write_id})
            ).status_code != 201:
                assert retry.status_code == 503 and time.monotonic() < deadline, retry.text
                time.sleep(0.2)
            again = append(client, user, session, body, **{"Idempotency-Key": write_id})
            assert again.status_code == 201 and again.json()["id"] == retry.json()["id"]
            entries.append(retry.json()["id"])
        assert len(set(entries)) == 2
        assert [m["content"] for m in stored(client, user, session)] == ["before redis"] * 2
