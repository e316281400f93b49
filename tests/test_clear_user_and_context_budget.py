"""``Memory`` behaviour the mutation run found unpinned (see
docs/mutation-testing.md): clearing sessions known only to the tag index,
and cutting the summary to a ``context`` budget. Through the public API."""

from __future__ import annotations

from typing import Any

import pytest

from redismem import KeyLayout, Memory, Message
from redismem.summarization.job import summarize_pass

SID = "s"


async def user_keys(raw: Any, layout: KeyLayout, user_id: str) -> list[bytes]:
    return [key async for key in raw.scan_iter(match=layout.user_pattern(user_id))]


async def test_clear_user_clears_sessions_known_only_to_the_tag_index(make_memory, raw, namespace):
    # Under an allkeys-* eviction policy Redis may evict a session's keys and
    # the user's session index while the tag index survives: clear_user must
    # still find the session through the tag index and leave nothing behind.
    mem = await make_memory()
    await mem.write([Message(role="user", content="a")], session_id="s1", tags={"k": "v"})
    await mem.write([Message(role="user", content="b")], session_id="s2", tags={"x": "yz"})
    await mem.write([Message(role="user", content="c")], session_id="s3")
    layout = KeyLayout(namespace)
    for sid in ("s1", "s2"):
        await raw.delete(*layout.session("default", sid).all_session_keys())
    await raw.delete(layout.sessions("default"), layout.pending("default"))
    assert await user_keys(raw, layout, "default") != []

    await mem.clear_user("default")
    assert await user_keys(raw, layout, "default") == []


async def test_clear_user_skips_index_members_it_did_not_write(make_memory, raw, namespace):
    mem = await make_memory()
    await mem.write([Message(role="user", content="a")], session_id="s1", tags={"k": "v"})
    layout = KeyLayout(namespace)
    tagidx = layout.tagidx("default")
    await raw.zadd(tagidx, {b"rjunk": 0, b"rx5:abc": 0, b"r": 0})
    await mem.clear_user("default")
    assert await mem.read(session_id="s1") == []
    assert await mem.sessions() == []


class Fixed:
    def __init__(self, text: str) -> None:
        self.text = text

    async def summarize(self, previous: str | None, messages: Any) -> str:
        return self.text


async def summarized(make_memory: Any, text: str) -> Memory:
    """A session holding only a summary of ``text`` (everything compacted)."""
    mem = await make_memory()
    await mem.write([Message(role="user", content=f"m{i}") for i in range(4)], session_id=SID)
    outcome = await summarize_pass(
        mem.backend, Fixed(text), user_id="default", session_id=SID, keep_recent=0, batch=1
    )
    assert outcome.status == "committed"
    assert await mem.read(session_id=SID) == []
    return mem


TEXT = " ".join(f"fact{i} is about topic {i % 7}." for i in range(120))


async def test_a_summary_cut_to_the_budget_keeps_as_much_as_fits(make_memory):
    mem = await summarized(make_memory, TEXT)
    whole = await mem.context(session_id=SID)
    [note] = whole.messages
    full_cost = note.token_count
    assert full_cost is not None and TEXT in note.content

    for over in (1, 5, 20):
        budget = full_cost - over
        [cut] = (await mem.context(session_id=SID, max_tokens=budget)).messages
        assert cut.token_count is not None and cut.token_count <= budget
        # Only about as much text as the overshoot is cut (4 characters a token).
        kept = TEXT[: len(TEXT) - 8 * over - 8]
        assert kept in cut.content
        assert TEXT not in cut.content


@pytest.mark.timeout(20)
async def test_a_budget_smaller_than_the_summarys_fence_leaves_it_out(make_memory):
    mem = await summarized(make_memory, TEXT)
    for budget in (1, 2, 5):
        context = await mem.context(session_id=SID, max_tokens=budget)
        assert context.messages == []
        assert context.summary is not None and context.summary.text == TEXT
