"""``mem.memories`` in the shapes mem0 users know: ``add("I like tea",
user_id=...)``, chat messages, ``get_all`` / ``delete_all``, ``search(query,
user_id=...)``; the old positional ``user_id`` still works but warns; an
invalid record is one line of ``InvalidInput`` naming the field.

Every test runs on a real Redis and on the embedded backend."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from redismem import Document, Fact, InvalidInput, SyncMemory


async def test_plain_text_becomes_a_memory_about_it(make_memory: Any) -> None:
    mem = await make_memory()
    added = await mem.memories.add("I like tea", user_id="u")
    assert [(a.event, a.memory) for a in added] == [("ADD", "User likes tea.")]
    [fact] = [a.record for a in added]
    assert isinstance(fact, Fact) and (fact.subject, fact.object) == ("user", "tea")
    hits = await mem.memories.search("tea", user_id="u")
    assert [h.record.id for h in hits] == [added[0].id]
    again = await mem.memories.add("I like tea", user_id="u")
    assert [a.event for a in again] == ["NONE"]  # known already: one record


async def test_text_the_rules_find_nothing_in_is_kept_as_a_note(make_memory: Any) -> None:
    mem = await make_memory()
    [note] = await mem.memories.add("The launch review moved to room 4B", user_id="u")
    assert isinstance(note.record, Document) and note.memory == "The launch review moved to room 4B"
    [raw] = await mem.memories.add("I like tea", user_id="u", infer=False)
    assert isinstance(raw.record, Document) and raw.memory == "I like tea"
    assert [h.record.id for h in await mem.memories.search("4B", user_id="u")] == [note.id]


async def test_chat_messages_are_extracted_like_mem0(make_memory: Any) -> None:
    mem = await make_memory()
    messages = [
        {"role": "user", "content": "Hi, my name is Ana and I live in Oslo."},
        {"role": "assistant", "content": "Nice to meet you, Ana! I live in the cloud."},
        {"role": "user", "content": "What's the weather like?"},
    ]
    added = await mem.memories.add(messages, user_id="u", write_id="chat-1")
    assert sorted(a.memory for a in added) == ["User lives in Oslo.", "User's name is Ana."]
    resent = await mem.memories.add(messages, user_id="u", write_id="chat-1")
    assert sorted(a.id for a in resent) == sorted(a.id for a in added)  # nothing twice
    assert await mem.memories.add([{"role": "user", "content": "hm"}], user_id="u") == []
    [one] = await mem.memories.add({"role": "user", "content": "I love jazz"}, user_id="u")
    assert one.memory == "User likes jazz."


async def test_records_still_go_in_as_before(make_memory: Any) -> None:
    mem = await make_memory()
    fact = {
        "kind": "fact",
        "text": "u likes tea",
        "subject": "user",
        "predicate": "likes",
        "object": "tea",
    }
    result = await mem.memories.add(fact, user_id="u")
    assert result.outcome == "added" and result.event == "ADD" and result.id == result.record.id
    got = await mem.memories.get(result.id, user_id="u")
    assert got is not None and (got.id, got.text) == (result.id, "u likes tea")


async def test_get_all_and_delete_all(make_memory: Any) -> None:
    mem = await make_memory()
    for text in ("I like tea", "I like chess", "I live in Oslo"):
        await mem.memories.add(text, user_id="u")
    await mem.memories.add("I like rain", user_id="other")
    every = await mem.memories.get_all(user_id="u")
    assert sorted(r.text for r in every) == [
        "User likes chess.",
        "User likes tea.",
        "User lives in Oslo.",
    ]
    assert len(await mem.memories.get_all(user_id="u", limit=2)) == 2
    assert len(await mem.memories.get_all(user_id="u", kinds="document")) == 0
    assert await mem.memories.delete_all(user_id="u", reason="asked") == 3
    assert await mem.memories.get_all(user_id="u") == []
    assert len(await mem.memories.get_all(user_id="u", status="deleted")) == 3  # kept, as delete
    assert [r.text for r in await mem.memories.get_all(user_id="other")] == ["User likes rain."]
    assert await mem.memories.delete_all(user_id="u") == 0


async def test_the_positional_user_id_still_works_and_warns(make_memory: Any) -> None:
    mem = await make_memory()
    with pytest.warns(DeprecationWarning, match=r"memories\.add\(user_id, \.\.\.\) is deprecated"):
        added = await mem.memories.add("u", {"kind": "goal", "text": "learn Norwegian"})
    with pytest.warns(DeprecationWarning, match="memories.search"):
        hits = await mem.memories.search("u", "norwegian")
    assert [h.record.id for h in hits] == [added.record.id]
    with pytest.warns(DeprecationWarning, match="memories.get"):
        got = await mem.memories.get("u", added.record.id)
    assert got is not None and got.id == added.record.id
    with pytest.warns(DeprecationWarning, match="memories.delete"):
        assert await mem.memories.delete("u", added.record.id) is True
    with pytest.warns(DeprecationWarning, match="memories.purge"):
        assert await mem.memories.purge("u") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the keyword forms never warn
        assert await mem.memories.search("norwegian", user_id="u") == []
        assert await mem.memories.search(query="x", user_id="u") == []
        assert await mem.memories.profile(user_id="u") == []


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"kind": "fact", "text": "x"},
            "a fact record is missing the fields 'subject', 'predicate', 'object'",
        ),
        (
            {"kind": "fact", "text": "x", "subject": "u", "predicate": "p"},
            "a fact record is missing the field 'object'",
        ),
        ({"subject": "u", "predicate": "p", "object": "o", "text": "x"}, "needs a 'kind'"),
        ({"kind": "nope", "text": "x"}, "unknown kind 'nope'"),
        (
            {"kind": "goal", "text": "x", "colour": "red"},
            "a goal record has no field 'colour'",
        ),
        (
            {
                "kind": "fact",
                "text": "x",
                "subject": "u",
                "predicate": "p",
                "object": "o",
                "confidence": 3,
            },
            "a fact record: field 'confidence': input should be less than or equal to 1",
        ),
        ([{"role": "wizard", "content": "hi"}], "messages[0]: field 'role'"),
    ],
)
async def test_an_invalid_record_is_one_line_naming_the_field(
    make_memory: Any, record: Any, message: str
) -> None:
    mem = await make_memory()
    with pytest.raises(InvalidInput) as raised:
        await mem.memories.add(record, user_id="u")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert raised.value.__cause__ is None  # not pydantic's report
    assert await mem.memories.get_all(user_id="u", status="any") == []


async def test_metadata_is_kept_as_the_records_tags_and_filters_them(make_memory: Any) -> None:
    mem = await make_memory()
    [tea] = await mem.memories.add("I like tea", user_id="u", metadata={"app": "chat"})
    assert tea.record.tags == {"app": "chat"}
    [note] = await mem.memories.add(
        "The launch review moved to room 4B", user_id="u", metadata={"app": "calendar", "k": ""}
    )
    chat = [{"role": "user", "content": "I live in Oslo and I love jazz."}]
    added = await mem.memories.add(chat, user_id="u", metadata={"app": "chat", "turn": "7"})
    assert sorted(a.memory for a in added) == ["User likes jazz.", "User lives in Oslo."]
    assert all(a.record.tags == {"app": "chat", "turn": "7"} for a in added)
    fact = {"kind": "goal", "text": "learn Norwegian", "tags": {"src": "import"}}
    goal = await mem.memories.add(fact, user_id="u", metadata={"app": "crm"})
    assert goal.record.tags == {"src": "import", "app": "crm"}

    stored = await mem.memories.get(note.id, user_id="u")
    assert stored is not None and stored.tags == {"app": "calendar", "k": ""}
    in_chat = await mem.memories.get_all(user_id="u", tags={"app": "chat"})
    assert sorted(r.text for r in in_chat) == [
        "User likes jazz.",
        "User likes tea.",
        "User lives in Oslo.",
    ]
    assert [r.id for r in await mem.memories.get_all(user_id="u", tags={"turn": "7"})] == [
        r.id for r in in_chat if r.id != tea.id
    ]
    hits = await mem.memories.search("room", user_id="u", tags={"app": "calendar"})
    assert [h.record.id for h in hits] == [note.id]
    assert await mem.memories.search("room", user_id="u", tags={"app": "chat"}) == []


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"n": 3}, "metadata values must be str, got 3 for 'n'"),
        ({"ok": "yes", "when": None}, "metadata values must be str, got None for 'when'"),
        (["app"], "metadata must be a dict[str, str], not list"),
        ({"": "x"}, "metadata keys must be non-empty str, got ''"),
        ({1: "x"}, "metadata keys must be non-empty str, got 1"),
    ],
)
@pytest.mark.parametrize(
    "record",
    [
        "I like tea",
        [{"role": "user", "content": "I live in Oslo."}],
        {"kind": "goal", "text": "learn Norwegian", "tags": {"src": "import"}},
    ],
    ids=["text", "messages", "record"],
)
async def test_metadata_not_of_strings_is_one_line_and_nothing_is_stored(
    make_memory: Any, record: Any, metadata: Any, message: str
) -> None:
    mem = await make_memory()
    with pytest.raises(InvalidInput) as raised:
        await mem.memories.add(record, user_id="u", metadata=metadata)
    assert str(raised.value) == message and raised.value.__cause__ is None
    assert await mem.memories.get_all(user_id="u", status="any") == []


async def test_metadata_never_overrides_a_tag_of_the_record(make_memory: Any) -> None:
    mem = await make_memory()
    goal = {"kind": "goal", "text": "learn Norwegian", "tags": {"src": "import"}}
    with pytest.raises(InvalidInput) as raised:
        await mem.memories.add(goal, user_id="u", metadata={"src": "other"})
    assert str(raised.value) == (
        "metadata 'src' is 'other' but the record's tag 'src' is 'import': drop one"
    )
    assert await mem.memories.get_all(user_id="u", status="any") == []
    same = await mem.memories.add(goal, user_id="u", metadata={"src": "import"})
    assert same.record.tags == {"src": "import"}


def test_the_sync_client_has_the_same_shapes(namespace: str) -> None:
    mem = SyncMemory.connect(f"memory://shapes-{namespace}", namespace=namespace)
    try:
        [added] = mem.memories.add("I like tea", user_id="u")
        assert added.memory == "User likes tea."
        [noted] = mem.memories.add("I like chess", user_id="u", metadata={"app": "sync"})
        assert [r.id for r in mem.memories.get_all(user_id="u", tags={"app": "sync"})] == [noted.id]
        mem.memories.delete(noted.id, user_id="u")
        assert [r.id for r in mem.memories.get_all(user_id="u")] == [added.id]
        assert [h.record.id for h in mem.memories.search("tea", user_id="u")] == [added.id]
        assert mem.memories.delete_all(user_id="u") == 1
    finally:
        mem.close()
