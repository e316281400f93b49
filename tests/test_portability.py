"""``export_user`` / ``import_user`` (``redismem.portability``): a user's
sessions, memories and store items as one JSON document and back, on a real
Redis and on the embedded backend. The round trip compares exactly what the
module docstring promises, and checks what it says is not restored."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_cli_worker import cli_env, run_cli
from test_store import forget_indexes

from redismem import (
    Document,
    Fact,
    Goal,
    ImportReport,
    InvalidInput,
    Memory,
    export_user,
    import_user,
)
from redismem.portability import USER_FORMAT, UserDocument
from redismem.summarization.job import summarize_pass
from redismem.summarization.summarizers import TruncationSummarizer

U = "alice"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


async def fill(mem: Memory, uid: str = U) -> dict[str, str]:
    """A user with a bit of everything; returns the ids the tests look at."""
    await mem.write(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "I live in Lisbon"},
        ],
        session_id="s1",
        user_id=uid,
        tags={"topic": "home"},
        agent_name="planner",
        created_at=T0,
    )
    await mem.write(
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "Lisbon"}}],
            },
            {"role": "tool", "content": "sunny", "tool_call_id": "c1", "metadata": {"n": [1, 2.5]}},
        ],
        session_id="s1",
        user_id=uid,
        created_at=T0 + timedelta(seconds=5),
    )
    await mem.write(
        [{"role": "user", "content": "ramen tonight?", "name": "al"}],
        session_id="s2",
        user_id=uid,
        tags={"topic": "food", "day": "mon"},
        created_at=T0 + timedelta(minutes=3),
    )
    lisbon = await mem.memories.add(
        Fact(text="User lives in Lisbon", subject="user", predicate="lives_in", object="Lisbon"),
        user_id=uid,
    )
    porto = await mem.memories.add(
        Fact(text="User lives in Porto", subject="user", predicate="lives_in", object="Porto"),
        user_id=uid,
    )
    goal = await mem.memories.add(Goal(text="Run a marathon", tags={"area": "sport"}), user_id=uid)
    await mem.memories.update(
        goal.record.id, user_id=uid, text="Run a marathon in May", reason="dated"
    )
    await mem.memories.delete(goal.record.id, user_id=uid, reason="gave up")
    await mem.memories.restore(lisbon.record.id, user_id=uid, reason="moved back")
    doc = await mem.memories.add(
        Document(text="how to cook ramen noodles " * 60, title="Ramen"), user_id=uid
    )
    store = mem.store
    await store.put(
        (uid, "prefs"), "food", {"title": "ramen", "body": "secret sushi"}, index=["title"]
    )
    await store.put((uid, "prefs"), "drink", {"text": "green tea"}, index=False, ttl=3600)
    await store.put(
        (uid, "notes", "a/b"),
        "n1",
        {"sections": [{"body": "alpha words"}, {"body": "beta"}], "x.y": "dotted key"},
        index=["sections[*].body"],
        source={"session": "s1"},
    )
    await store.put((uid, "prefs"), "gone", {"text": "first"})
    await store.delete((uid, "prefs"), "gone", source={"why": "asked"})
    await store.put((uid, "prefs"), "back", {"text": "one"})
    await store.delete((uid, "prefs"), "back")
    await store.put((uid, "prefs"), "back", {"text": "two"})
    return {
        "lisbon": lisbon.record.id,
        "porto": porto.record.id,
        "goal": goal.record.id,
        "doc": doc.record.id,
    }


def promised(document: dict[str, Any]) -> dict[str, Any]:
    """What the import restores: the document without the times the server
    sets, the summaries, and the deadlines (compared apart, with a tolerance)."""
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


def deadlines(document: dict[str, Any]) -> dict[str, datetime | None]:
    found = {}
    for session in document["sessions"]:
        found[f"session {session['session_id']}"] = session["expires_at"]
    for item in document["memories"] + document["store"]:
        found[f"item {item['namespace']} {item['key']}"] = item["expires_at"]
    return {
        k: None if v is None else datetime.fromisoformat(v.replace("Z", "+00:00"))
        for k, v in found.items()
    }


def assert_same_deadlines(before: dict[str, Any], after: dict[str, Any]) -> None:
    """The deadlines of ``before`` in ``after``: an item's within a clock's
    tick, a session's no sooner and at most 1/32 of its time left later
    (the slack of the sessions' sliding TTL)."""
    exported = datetime.fromisoformat(before["exported_at"])
    old, new = deadlines(before), deadlines(after)
    assert old.keys() == new.keys()
    for key, deadline in old.items():
        if deadline is None:
            assert new[key] is None, key
            continue
        got = new[key]
        assert got is not None, key
        slack = (deadline - exported) / 32 if key.startswith("session") else timedelta(0)
        assert -timedelta(seconds=2) < got - deadline < slack + timedelta(seconds=2), key


async def search_keys(mem: Memory, uid: str, query: str | None) -> list[tuple[Any, str]]:
    found = await mem.store.search((uid,), query=query, limit=100)
    return [(item.namespace[1:], item.key) for item in found]


# -- the round trip ---------------------------------------------------------------------


async def test_export_clear_import_gives_the_same_user(make_memory):
    mem = await make_memory(store_system_messages=True, ttl=86_400)
    ids = await fill(mem)
    await mem.write([{"role": "user", "content": "not alice"}], session_id="s1", user_id="bob")
    await mem.store.put(("bob", "prefs"), "food", {"title": "ramen"})
    queries = [None, "ramen", "sushi", "tea", "alpha", "beta", "dotted", "noodles"]
    searched = {q: await search_keys(mem, U, q) for q in queries}
    memory_hits = [h.record.id for h in await mem.memories.search("lives", user_id=U, status="any")]
    records = {i: await mem.memories.get(i, user_id=U) for i in ids.values()}
    histories = {i: await mem.memories.history(i, user_id=U) for i in ids.values()}

    document = await export_user(mem, U)
    assert json.loads(json.dumps(document)) == document  # plain JSON
    assert document["format"] == USER_FORMAT
    assert document["namespace"] == mem.layout.namespace and document["user_id"] == U
    assert "bob" not in json.dumps(document)
    assert [s["session_id"] for s in document["sessions"]] == ["s1", "s2"]
    assert {i["namespace"][1] for i in document["memories"]} == {
        "memories",
        "memories-chunks",
        "memories-keys",
    }
    by_key = {i["key"]: i for i in document["store"]}
    assert by_key["food"]["index"] == ["title"]
    assert by_key["drink"]["index"] is False
    assert by_key["n1"]["index"] == ["sections[*].body"]  # as given to put
    assert by_key["n1"]["namespace"] == [U, "notes", "a/b"]
    assert [(v["version"], v["deleted"]) for v in by_key["back"]["versions"]] == [
        (1, False),
        (2, True),
        (3, False),
    ]
    assert by_key["gone"]["versions"][-1]["deleted"] is True
    assert by_key["gone"]["versions"][-1]["source"] == {"why": "asked"}
    assert by_key["drink"]["expires_at"] is not None and by_key["food"]["expires_at"] is None

    await mem.clear_user(U)
    empty = await export_user(mem, U)
    assert (empty["sessions"], empty["summaries"], empty["memories"], empty["store"]) == (
        [],
        {},
        [],
        [],
    )
    started = datetime.now(UTC) - timedelta(milliseconds=5)
    report = await import_user(mem, document)
    assert isinstance(report, ImportReport)
    assert (report.entries_written, report.sessions_written, report.conflicts) == (3, 2, [])
    items = len(document["memories"]) + len(document["store"])
    assert report.items_written == items and report.items_present == 0
    versions = sum(len(i["versions"]) for i in document["memories"] + document["store"])
    assert report.versions_written == versions

    again = await export_user(mem, U)
    assert promised(again) == promised(document)
    assert_same_deadlines(document, again)
    # What it does not restore: the server's times of the items are the import's.
    for item in again["memories"] + again["store"]:
        for version in item["versions"]:
            assert datetime.fromisoformat(version["updated_at"]) >= started
    # The search index and the newest-first order are as they were.
    assert {q: await search_keys(mem, U, q) for q in queries} == searched
    assert [h.record.id for h in await mem.memories.search("lives", user_id=U, status="any")] == (
        memory_hits
    )
    for memory_id, record in records.items():
        got = await mem.memories.get(memory_id, user_id=U)
        assert record is not None and got is not None
        assert got.model_dump(exclude={"updated_at"}) == record.model_dump(exclude={"updated_at"})
        assert got.created_at == record.created_at
        history = await mem.memories.history(memory_id, user_id=U)
        assert [(c.version, c.change, c.reason) for c in history] == [
            (c.version, c.change, c.reason) for c in histories[memory_id]
        ]
        assert [c.record.model_dump(exclude={"updated_at"}) for c in history if c.record] == [
            c.record.model_dump(exclude={"updated_at"}) for c in histories[memory_id] if c.record
        ]
    # The slot still knows its current value: a new one supersedes it.
    newer = await mem.memories.add(
        Fact(text="User lives in Faro", subject="user", predicate="lives_in", object="Faro"),
        user_id=U,
    )
    assert (newer.outcome, newer.other) == ("superseded", ids["lisbon"])
    # A duplicate is found as one.
    same = await mem.memories.add(Document(text="how to cook ramen noodles " * 60), user_id=U)
    assert same.outcome == "duplicate" and same.record.id == ids["doc"]
    # The other user was left alone.
    assert [m.content for m in await mem.read(session_id="s1", user_id="bob")] == ["not alice"]
    assert (await mem.store.get(("bob", "prefs"), "food")) is not None
    await mem.clear_user("bob")
    await mem.clear_user(U)


async def test_sessions_come_back_with_their_entries_and_times(make_memory):
    mem = await make_memory(store_system_messages=True)
    await fill(mem)
    before = {s.session_id: s for s in await mem.sessions(user_id=U)}
    entries = {sid: await mem.entries(session_id=sid, user_id=U) for sid in before}
    document = await export_user(mem, U)
    await mem.clear_user(U)
    await import_user(mem, document)
    after = {s.session_id: s for s in await mem.sessions(user_id=U)}
    assert after.keys() == before.keys()
    for sid, info in before.items():
        assert after[sid].created_at == info.created_at
        assert after[sid].tags == info.tags
        assert after[sid].message_count == info.message_count
        got = await mem.entries(session_id=sid, user_id=U)
        assert [e.id for e in got] == [e.id for e in entries[sid]]
        assert [e.metadata.model_dump(exclude={"accessed_at"}) for e in got] == [
            e.metadata.model_dump(exclude={"accessed_at"}) for e in entries[sid]
        ]
        assert [[m.model_dump() for m in e.messages] for e in got] == [
            [m.model_dump() for m in e.messages] for e in entries[sid]
        ]
    assert (await mem.read(session_id="s1", user_id=U))[0].role == "system"
    await mem.clear_user(U)


async def test_import_into_another_user_and_another_namespace(
    make_memory, memory_factory, backend_url, namespace
):
    mem = await make_memory(store_system_messages=True)
    ids = await fill(mem)
    document = await export_user(mem, U)

    report = await import_user(mem, document, user_id="carol")
    assert report.user_id == "carol" and report.conflicts == []
    copied = await export_user(mem, "carol")
    renamed = json.loads(json.dumps(promised(document)).replace('"alice"', '"carol"'))
    assert promised(copied) == renamed
    assert (await mem.memories.get(ids["porto"], user_id="carol")) is not None
    assert await search_keys(mem, "carol", "ramen") == await search_keys(mem, U, "ramen")

    other = await memory_factory(backend_url, namespace=f"{namespace}-other")
    await import_user(other, document)
    moved = await export_user(other, U)
    assert moved["namespace"] == f"{namespace}-other"
    assert promised(moved) == {**promised(document), "namespace": f"{namespace}-other"}
    for user in (U, "carol"):
        await mem.clear_user(user)
    await other.clear_user(U)


# -- idempotent ---------------------------------------------------------------------------


async def test_importing_twice_stores_everything_once(make_memory):
    mem = await make_memory()
    await fill(mem)
    document = await export_user(mem, U)
    await mem.clear_user(U)
    first = await import_user(mem, document)
    exported = await export_user(mem, U)
    second = await import_user(mem, document)
    assert (second.entries_written, second.items_written, second.versions_written) == (0, 0, 0)
    assert second.entries_present == first.entries_written
    assert second.items_present == first.items_written
    assert second.conflicts == []
    assert promised(await export_user(mem, U)) == promised(exported)
    # Over the data as it was (never cleared): nothing is written either.
    third = await import_user(mem, exported)
    assert (third.entries_written, third.versions_written, third.conflicts) == (0, 0, [])
    await mem.clear_user(U)


async def test_an_import_cut_short_resumes_where_it_stopped(make_memory):
    mem = await make_memory()
    await fill(mem)
    document = await export_user(mem, U)
    await mem.clear_user(U)
    part = copy.deepcopy(document)
    part["sessions"][0]["entries"] = part["sessions"][0]["entries"][:1]
    part["sessions"] = part["sessions"][:1]
    back = next(i for i in part["store"] if i["key"] == "back")
    back["versions"] = back["versions"][:2]  # a put, then its tombstone
    part["store"] = [i for i in part["store"] if i["key"] != "food"]
    await import_user(mem, part)
    report = await import_user(mem, document)
    assert report.entries_written == 2 and report.entries_present == 1
    assert report.conflicts == []
    assert promised(await export_user(mem, U)) == promised(document)
    await mem.clear_user(U)


async def test_an_item_with_another_history_is_left_as_it_is(make_memory):
    mem = await make_memory()
    await mem.store.put((U, "prefs"), "food", {"title": "ramen"})
    document = await export_user(mem, U)
    await mem.clear_user(U)
    await mem.store.put((U, "prefs"), "food", {"title": "pizza"})
    report = await import_user(mem, document)
    assert report.items_written == 0
    assert report.conflicts == [f"item 'food' of {(U, 'prefs')!r}: it has another history"]
    item = await mem.store.get((U, "prefs"), "food")
    assert item is not None and item.value == {"title": "pizza"}
    await mem.clear_user(U)


async def test_what_expired_since_the_export_is_not_imported(make_memory):
    mem = await make_memory()
    await mem.write([{"role": "user", "content": "hi"}], session_id="s1", user_id=U)
    await mem.store.put((U, "prefs"), "food", {"title": "ramen"}, ttl=3600)
    await mem.store.put((U, "prefs"), "drink", {"title": "tea"})
    document = await export_user(mem, U)
    await mem.clear_user(U)
    past = "2000-01-01T00:00:00Z"
    document["sessions"][0]["expires_at"] = past
    next(i for i in document["store"] if i["key"] == "food")["expires_at"] = past
    report = await import_user(mem, document)
    assert (report.expired, report.items_written, report.entries_written) == (2, 1, 0)
    assert await mem.sessions(user_id=U) == []
    assert await mem.store.get((U, "prefs"), "food") is None
    await mem.clear_user(U)


# -- what is not restored: summaries ------------------------------------------------------------


async def test_summaries_are_exported_and_left_to_the_workers(make_memory):
    mem = await make_memory(keep_recent=2, index=False)
    mem._enqueue_summary = _no_enqueue  # type: ignore[method-assign]
    for n in range(6):
        await mem.write(
            [{"role": "user", "content": f"message {n}"}],
            session_id="s1",
            user_id=U,
            created_at=T0 + timedelta(seconds=n),
        )
    await summarize_pass(
        mem.backend,
        TruncationSummarizer(),
        user_id=U,
        session_id="s1",
        keep_recent=2,
        batch=2,
        compact=True,
    )
    summary = await mem.summary(session_id="s1", user_id=U)
    assert summary is not None
    document = await export_user(mem, U)
    assert document["summaries"] == {"s1": summary.model_dump(mode="json")}
    kept = [e["messages"][0]["content"] for e in document["sessions"][0]["entries"]]
    assert kept == ["message 4", "message 5"]
    await mem.clear_user(U)
    await import_user(mem, document)
    assert await mem.summary(session_id="s1", user_id=U) is None
    read = await mem.read(session_id="s1", user_id=U)
    assert [m.content for m in read] == ["message 4", "message 5"]
    assert [m.id for m in read] == ["000000000001", "000000000002"]  # numbered anew
    assert [m.created_at for m in read] == [T0 + timedelta(seconds=4), T0 + timedelta(seconds=5)]
    await mem.clear_user(U)


async def _no_enqueue(*args: Any) -> None:
    return None


# -- malformed documents: refused before anything is written ----------------------------------


def _breakages() -> list[tuple[str, Any]]:
    def edit(path: str, value: Any) -> Any:
        def apply(document: dict[str, Any]) -> None:
            *parents, last = path.split("/")
            node: Any = document
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if value is _DELETE:
                del node[last]
            elif isinstance(node, list):
                node[int(last)] = value
            else:
                node[last] = value

        return apply

    return [
        ("another format", edit("format", "redismem.user/2")),
        ("no format", edit("format", _DELETE)),
        ("no user", edit("user_id", _DELETE)),
        ("empty user", edit("user_id", "")),
        ("an unknown field", edit("extra", 1)),
        ("sessions not a list", edit("sessions", {})),
        ("a naive time", edit("sessions/0/created_at", "2024-01-01T00:00:00")),
        ("a bad role", edit("sessions/0/entries/0/messages/0/role", "robot")),
        ("a tag not a str", edit("sessions/0/entries/0/tags", {"k": 1})),
        ("an empty session id", edit("sessions/0/session_id", "")),
        ("a value not an object", edit("store/0/versions/0/value", [1])),
        ("a bad index path", edit("store/0/index", ["a..b"])),
        ("no versions", edit("store/0/versions", [])),
        ("version 0", edit("store/0/versions/0/version", 0)),
        ("another user's item", edit("store/0/namespace", ["mallory", "prefs"])),
        ("a memory in the store", edit("store/0/namespace", [U, "memories"])),
        ("a tombstone with a value", edit("store/0/versions/0/deleted", True)),
        ("deep nesting", edit("store/0/versions/0/value", _deep(40))),
    ]


_DELETE = object()


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(levels):
        node = {"a": node}
    return node


@pytest.mark.parametrize(("name", "breakage"), _breakages(), ids=[n for n, _ in _breakages()])
async def test_a_malformed_document_is_refused_before_anything_is_written(
    make_memory, name, breakage
):
    mem = await make_memory()
    await mem.write([{"role": "user", "content": "hi"}], session_id="s1", user_id=U)
    await mem.store.put((U, "prefs"), "food", {"title": "ramen"})
    document = await export_user(mem, U)
    await mem.clear_user(U)
    breakage(document)
    with pytest.raises(InvalidInput):
        await import_user(mem, document)
    assert await mem.sessions(user_id=U) == []
    assert await mem.store.search((U,)) == []


async def test_duplicates_and_non_objects_are_refused(make_memory):
    mem = await make_memory()
    await mem.store.put((U, "prefs"), "food", {"title": "ramen"})
    await mem.write([{"role": "user", "content": "hi"}], session_id="s1", user_id=U)
    document = await export_user(mem, U)
    await mem.clear_user(U)
    for broken in (
        {**document, "store": document["store"] * 2},
        {**document, "sessions": document["sessions"] * 2},
    ):
        with pytest.raises(InvalidInput, match="twice"):
            await import_user(mem, broken)
    for not_a_document in ([], "x", None):
        with pytest.raises(InvalidInput):
            await import_user(mem, not_a_document)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="unknown document format"):
        await import_user(mem, {"format": "langgraph/1"})
    with pytest.raises(InvalidInput):
        await import_user(mem, document, user_id="")
    assert await mem.store.search((U,)) == []
    # A document model is accepted as well as its JSON.
    report = await import_user(mem, UserDocument.model_validate(document))
    assert report.items_written == 1 and report.entries_written == 1
    await mem.clear_user(U)


# -- items stored before puts kept their index ----------------------------------------------


async def test_an_item_stored_before_puts_kept_their_index_exports_its_index(make_memory, raw):
    mem = await make_memory()
    await mem.store.put((U, "prefs"), "food", {"title": "ramen", "body": "sushi"}, index=["title"])
    await forget_indexes(raw, mem, (U, "prefs"), "food")
    document = await export_user(mem, U)
    [item] = document["store"]
    assert item["index"] == ["title"]  # found from the terms the store holds
    await import_user(mem, document, user_id="carol")
    assert await search_keys(mem, "carol", "ramen") == [(("prefs",), "food")]
    assert await search_keys(mem, "carol", "sushi") == []
    assert (await export_user(mem, "carol"))["store"][0]["index"] == ["title"]
    for user in (U, "carol"):
        await mem.clear_user(user)


# -- the CLI: redismem export / redismem import -------------------------------------------------


@pytest.mark.processes
async def test_the_cli_exports_and_imports_a_user(memory_factory, redis_url, namespace, tmp_path):
    mem = await memory_factory(redis_url, store_system_messages=True)
    await fill(mem)
    env = cli_env(redis_url, namespace)
    out = tmp_path / "alice.json"
    result = run_cli("export", "--user", U, "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr
    assert str(out) in result.stderr and result.stdout == ""
    document = json.loads(out.read_text(encoding="utf-8"))
    assert promised(document) == promised(await export_user(mem, U))

    result = run_cli("import", str(out), "--user", "dave", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["user_id"], report["entries_written"], report["conflicts"]) == ("dave", 3, [])
    again = json.loads(run_cli("import", str(out), "--user", "dave", env=env).stdout)
    assert (again["entries_written"], again["versions_written"]) == (0, 0)
    printed = run_cli("export", "--user", "dave", env=env)
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["user_id"] == "dave"

    broken = tmp_path / "broken.json"
    for text, code, needle in [
        ("{", 2, "is not JSON"),
        ('{"format": "x"}', 2, "unknown document format"),
    ]:
        broken.write_text(text, encoding="utf-8")
        result = run_cli("import", str(broken), env=env)
        assert result.returncode == code
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("redismem: ") and needle in line and "(hint: " in line, line
    for user in (U, "dave"):
        await mem.clear_user(user)
