"""``redismem browse``, the terminal browser, driven headless by Textual's
pilot against the suite's real Redis: users → sessions → messages, the
summary and memories views, a search hit, back and quit, and browsing slides
no TTL. Without Textual, the real console script says which extra to install.

Each screen sets ``ready`` once its data is loaded: the tests await that
(and the screen changes), never a fixed delay.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from helpers import redismem_command
from test_cli_worker import cli_env, run_cli
from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from redismem import InvalidInput, Memory
from redismem.cli import build_parser
from redismem.cli.browse import BROWSE_EXTRA_MISSING
from redismem.cli.common import connect
from redismem.cli.tui import (
    BrowseApp,
    MemoriesScreen,
    MessagesScreen,
    SearchScreen,
    SessionsScreen,
    SummaryScreen,
    UsersScreen,
    View,
)

# The fixture runs a worker process (a few seconds on a loaded machine).
pytestmark = pytest.mark.timeout(300)

USER = "alice"
#: Shorter than the browsing Memory's default TTL: a read that slid the TTL
#: would move every expiry of the session (the slide happens once less than
#: the TTL is left).
WRITE_TTL = 600


async def _expiries(url: str, namespace: str) -> dict[bytes, int]:
    """Every key of the namespace's memory (not its queue's: worker health
    records expire) with its absolute expiry in ms (-1: none)."""
    raw = aioredis.Redis.from_url(url)
    try:
        keys = [k async for k in raw.scan_iter(match=f"{namespace}*", count=1000)]
        return {k: int(await raw.execute_command("PEXPIRETIME", k)) for k in keys}
    finally:
        await raw.aclose()


async def _write(url: str, namespace: str, queue: str) -> None:
    memory = await Memory.connect(
        url,
        namespace=namespace,
        queue_name=queue,
        ttl=WRITE_TTL,
        keep_recent=2,
        summarize_batch=2,
        summarize_delay=0,
    )
    async with memory:
        await memory.write(
            [
                {"role": "user", "content": "Book me a flight to Lisbon in May"},
                {"role": "assistant", "content": "Looking at flights to Lisbon for May"},
                {"role": "user", "content": "A window seat, please"},
                {"role": "assistant", "content": "Window seat noted"},
                {"role": "user", "content": "And a hotel near the river"},
                {"role": "assistant", "content": "Three hotels by the Tagus"},
            ],
            session_id="trip-1",
            user_id=USER,
            agent_name="planner",
            tags={"topic": "travel"},
        )
        await memory.write(
            [{"role": "user", "content": "I drink green tea every morning"}],
            session_id="chat-2",
            user_id=USER,
            agent_name="concierge",
        )
        await memory.memories.add("I like green tea", user_id=USER)


@pytest.fixture
def written(redis_url: str, namespace: str, clean_env: None) -> str:
    """Two sessions of alice, one summarized, both indexed by a real worker
    (``redismem worker --burst``, gone before the test browses), and a memory."""
    env = cli_env(redis_url, namespace, REDISMEM_SUMMARIZER="truncate")
    asyncio.run(_write(redis_url, namespace, env["REDISMEM_QUEUE_NAME"]))
    burst = run_cli("worker", "--burst", env=env, timeout=120)
    assert burst.returncode == 0, burst.stderr
    return namespace


async def _browser(redis_url: str, namespace: str) -> Memory:
    """The Memory ``redismem browse`` connects, from its own arguments."""
    args = build_parser().parse_args(["browse", "--url", redis_url, "--namespace", namespace])
    return await connect(args, refresh_ttl_on_read=False)


async def _until(pilot: Pilot[Any], done: Callable[[], bool]) -> None:
    """Let the app run until ``done()`` holds (the test's timeout bounds it)."""
    while not done():
        await pilot.pause()


async def _shown(pilot: Pilot[Any], kind: type[View]) -> Any:
    """The app's screen once it is a ``kind`` with its data loaded."""
    await _until(pilot, lambda: isinstance(pilot.app.screen, kind))
    screen = pilot.app.screen
    await screen.ready.wait()
    await pilot.wait_for_scheduled_animations()
    return screen


def _cells(screen: View) -> list[list[str]]:
    table = screen.query_one(DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def _status(screen: View) -> str:
    return str(screen.status.render())


async def test_browse_users_sessions_messages_summary_memories_search_back_quit(
    redis_url: str, written: str
) -> None:
    namespace = written
    memory = await _browser(redis_url, namespace)
    try:
        before = await _expiries(redis_url, namespace)
        sessions_before = await memory.sessions(user_id=USER)
        app = BrowseApp(memory)
        async with app.run_test(size=(140, 40)) as pilot:
            users = await _shown(pilot, UsersScreen)
            assert [row[:2] for row in _cells(users)] == [[USER, "2"]]
            assert "1 user" in _status(users)

            await pilot.press("enter")
            sessions = await _shown(pilot, SessionsScreen)
            listed = {row[0]: row for row in _cells(sessions)}
            assert set(listed) == {"trip-1", "chat-2"}
            assert listed["trip-1"][3] == "topic=travel"
            assert listed["trip-1"][5].startswith("in ")  # expires

            # Down to trip-1, whichever row it is, then in.
            while _cells(sessions)[sessions.query_one(DataTable).cursor_row][0] != "trip-1":
                await pilot.press("down")
            await pilot.press("enter")
            messages = await _shown(pilot, MessagesScreen)
            contents = [row[3] for row in _cells(messages)]
            # The summarized messages are compacted away; the recent ones stay.
            assert contents[-1] == "Three hotels by the Tagus"
            assert "Book me a flight to Lisbon in May" not in contents
            assert "topic=travel" in _status(messages)
            assert contents[0] in str(messages.detail.render())  # the highlighted one, in full

            await pilot.press("s")
            summary = await _shown(pilot, SummaryScreen)
            assert "Lisbon" in str(summary.text.render())
            assert "covers" in _status(summary)
            await pilot.press("escape")
            assert await _shown(pilot, MessagesScreen) is messages

            await pilot.press("m")
            memories = await _shown(pilot, MemoriesScreen)
            assert any("green tea" in row[1] for row in _cells(memories))
            await pilot.press("backspace")
            await _shown(pilot, MessagesScreen)

            await pilot.press("slash")
            search = await _shown(pilot, SearchScreen)
            assert search.focused is search.query_one(Input)
            await pilot.press(*"lisbon", "enter")
            await _until(pilot, lambda: search.shown_query == "lisbon")
            await search.ready.wait()
            hits = _cells(search)
            assert hits and all(row[1] == "trip-1" for row in hits)
            assert any("Lisbon" in row[5] for row in hits)  # summarized, still found
            await pilot.press("enter")  # the first hit's session
            found = await _shown(pilot, MessagesScreen)
            assert found is not messages and found.session_id == "trip-1"

            for _ in range(3):  # messages (from search), search, messages
                await pilot.press("escape")
            assert await _shown(pilot, SessionsScreen) is sessions
            await pilot.press("escape")
            assert await _shown(pilot, UsersScreen) is users
            await pilot.press("escape")  # at the top: stays
            assert pilot.app.screen is users
            await pilot.press("q")
            await _until(pilot, lambda: not app.is_running)
        assert app.return_code == 0
        # Read-only: no expiry moved, no session touched.
        assert await _expiries(redis_url, namespace) == before
        assert await memory.sessions(user_id=USER) == sessions_before
    finally:
        await memory.aclose()


async def test_starting_at_a_user_and_searching_from_the_users(
    redis_url: str, written: str
) -> None:
    namespace = written
    memory = await _browser(redis_url, namespace)
    try:
        app = BrowseApp(memory, user=USER)
        async with app.run_test(size=(140, 40)) as pilot:
            sessions = await _shown(pilot, SessionsScreen)
            assert sessions.user_id == USER and len(_cells(sessions)) == 2
            await pilot.press("backspace")
            users = await _shown(pilot, UsersScreen)
            await pilot.press("slash")
            search = await _shown(pilot, SearchScreen)
            # Before a query: the newest indexed messages of the user.
            assert search.shown_query == "" and _cells(search)
            await pilot.press(*"nothing-like-this", "enter")
            await _until(pilot, lambda: search.shown_query == "nothing-like-this")
            assert _cells(search) == [] and "no hits" in _status(search)
            await pilot.press("escape")
            assert await _shown(pilot, UsersScreen) is users
            await pilot.press("m")
            memories = await _shown(pilot, MemoriesScreen)
            assert "1 active memory" in _status(memories)
            await pilot.press("q")
            await _until(pilot, lambda: not app.is_running)
    finally:
        await memory.aclose()


async def test_a_memory_that_would_slide_ttls_is_refused(
    redis_url: str, namespace: str, clean_env: None
) -> None:
    memory = await Memory.connect(redis_url, namespace=namespace)
    try:
        with pytest.raises(InvalidInput, match="read-only"):
            BrowseApp(memory)
    finally:
        await memory.aclose()


@pytest.mark.processes
def test_without_textual_the_console_script_names_the_extra(tmp_path: Path) -> None:
    """The real console script with ``textual`` unimportable (a sitecustomize
    that blocks it): one line naming the extra, exit 2, before connecting."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['textual'] = None\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(blocker), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [*redismem_command(), "browse", "--url", "redis://127.0.0.1:1/0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result
    assert result.stderr == BROWSE_EXTRA_MISSING + "\n"
    assert result.stdout == ""
