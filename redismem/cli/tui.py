"""``redismem browse``: a terminal browser (Textual) over one namespace.
Users → a user's sessions → a session's messages, its summary, the user's
memories, and search over the user's messages (recall): the data
``redismem users``, ``sessions``, ``inspect``, ``memories`` and ``search``
print, through the same functions.

Read-only: ``BrowseApp`` takes a ``Memory`` connected with
``refresh_ttl_on_read=False`` and refuses any other, so browsing never slides
a session's TTL. Each screen loads its data in a Textual worker when shown;
``ready`` is set once what it shows is loaded (or failed, with a one-line
notice), so a test can await it.

Only ``redismem browse`` imports this module: Textual is the ``browse`` extra.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import redis.exceptions as rexc
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static
from textual.worker import Worker

from redismem.cli.common import clip, one_line, preview
from redismem.cli.rows import HIT_COLUMNS, hit_row, user_activity
from redismem.cli.units import ago, until
from redismem.client import Memory
from redismem.errors import InvalidInput, RedisMemError
from redismem.models import Hit, Message

__all__ = [
    "BrowseApp",
    "MemoriesScreen",
    "MessagesScreen",
    "SearchScreen",
    "SessionsScreen",
    "SummaryScreen",
    "UsersScreen",
    "View",
]

#: The most recent messages of a session shown, hits of a search, memories listed.
LAST_MESSAGES = 200
SEARCH_LIMIT = 50
MEMORY_LIMIT = 200


class Rows(DataTable[str]):
    """A table with a row cursor."""

    def __init__(self, *columns: str) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True)
        self.add_columns(*columns)


class Table(Rows):
    """Rows that open something: the footer shows enter ("Open")."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Open")]


class View(Screen[None]):
    """A screen showing what it loads from the app's Memory when shown."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.back", "Back"),
    ]

    def __init__(self, memory: Memory) -> None:
        super().__init__()
        self.memory = memory
        #: Set once what the screen shows is loaded (or failed).
        self.ready = asyncio.Event()
        #: The worker loading the data (a newer load cancels an older one).
        self.loader: Worker[None] | None = None
        self.status = Static("loading…", classes="status")

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        self.ready.clear()
        # The function, not a coroutine: a worker cancelled before it starts
        # (a newer load) leaves no coroutine unawaited.
        self.loader = self.run_worker(self._fill, exclusive=True)

    async def _fill(self) -> None:
        try:
            await self.load()
        except (RedisMemError, rexc.RedisError, OSError) as exc:
            message = one_line(exc, "browse")
            self.status.update(message)
            self.notify(message, severity="error", timeout=10)
        finally:
            self.ready.set()

    async def load(self) -> None:
        raise NotImplementedError

    def say(self, text: str) -> None:
        self.status.update(text)


class UsersScreen(View):
    """The users of the namespace, most recently active first."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "Search"),
        Binding("m", "memories", "Memories"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield self.status
        yield Table("user", "sessions", "last active")
        yield Footer()

    async def load(self) -> None:
        self.sub_title = f"namespace {self.memory.layout.namespace}: users"
        rows = await user_activity(self.memory)
        table = self.query_one(Rows)
        table.clear()
        for row in rows:
            table.add_row(row.user_id, str(row.sessions), ago(row.last_active), key=row.user_id)
        self.say(
            f"{len(rows)} user{'s' if len(rows) != 1 else ''}"
            if rows
            else f"no users in namespace {self.memory.layout.namespace!r}"
        )
        table.focus()

    def _user(self) -> str | None:
        table = self.query_one(Rows)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(SessionsScreen(self.memory, event.row_key.value))

    def action_search(self) -> None:
        user = self._user()
        if user is not None:
            self.app.push_screen(SearchScreen(self.memory, user))

    def action_memories(self) -> None:
        user = self._user()
        if user is not None:
            self.app.push_screen(MemoriesScreen(self.memory, user))


class SessionsScreen(View):
    """A user's live sessions."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "summary", "Summary"),
        Binding("m", "memories", "Memories"),
        Binding("slash", "search", "Search"),
    ]

    def __init__(self, memory: Memory, user_id: str) -> None:
        super().__init__(memory)
        self.user_id = user_id

    def compose(self) -> ComposeResult:
        yield Header()
        yield self.status
        yield Table("session", "messages", "tokens", "tags", "last access", "expires")
        yield Footer()

    async def load(self) -> None:
        self.sub_title = f"{self.user_id}: sessions"
        sessions = await self.memory.sessions(user_id=self.user_id)
        table = self.query_one(Rows)
        table.clear()
        for s in sessions:
            table.add_row(
                s.session_id,
                str(s.message_count),
                str(s.token_count),
                ", ".join(f"{k}={v}" for k, v in s.tags.items()) or "-",
                ago(s.accessed_at),
                until(s.expires_at),
                key=s.session_id,
            )
        self.say(
            f"{len(sessions)} live session{'s' if len(sessions) != 1 else ''} of {self.user_id}"
            if sessions
            else f"no live sessions for user {self.user_id!r}"
        )
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(MessagesScreen(self.memory, self.user_id, event.row_key.value))

    def action_summary(self) -> None:
        table = self.query_one(Rows)
        if table.row_count:
            session = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            if session is not None:
                self.app.push_screen(SummaryScreen(self.memory, self.user_id, session))

    def action_memories(self) -> None:
        self.app.push_screen(MemoriesScreen(self.memory, self.user_id))

    def action_search(self) -> None:
        self.app.push_screen(SearchScreen(self.memory, self.user_id))


class MessagesScreen(View):
    """One session: its counters and its last messages, the highlighted one in full."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "summary", "Summary"),
        Binding("m", "memories", "Memories"),
        Binding("slash", "search", "Search"),
    ]

    def __init__(self, memory: Memory, user_id: str, session_id: str) -> None:
        super().__init__(memory)
        self.user_id = user_id
        self.session_id = session_id
        self.messages: list[Message] = []
        self.detail = Static("", classes="detail")

    def compose(self) -> ComposeResult:
        yield Header()
        yield self.status
        yield Rows("when", "role", "name", "content")
        yield VerticalScroll(self.detail)
        yield Footer()

    async def load(self) -> None:
        self.sub_title = f"{self.user_id} / {self.session_id}: messages"
        found = [
            s
            for s in await self.memory.sessions(user_id=self.user_id)
            if s.session_id == self.session_id
        ]
        if not found:
            self.say(f"no live session {self.session_id!r} for user {self.user_id!r}")
            return
        info = found[0]
        self.messages = await self.memory.read(
            session_id=self.session_id, user_id=self.user_id, limit=LAST_MESSAGES, refresh_ttl=False
        )
        table = self.query_one(Rows)
        table.clear()
        for i, m in enumerate(self.messages):
            table.add_row(ago(m.created_at), m.role, m.name or "-", preview(m, 80), key=str(i))
        tags = ", ".join(f"{k}={v}" for k, v in info.tags.items())
        self.say(
            f"{info.message_count} messages stored ({info.token_count} tokens), "
            f"last {len(self.messages)} shown · last access {ago(info.accessed_at)} · "
            f"expires {until(info.expires_at)}" + (f" · tags {tags}" if tags else "")
        )
        table.focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            m = self.messages[int(event.row_key.value)]
            calls = "".join(f"\n[calls {c.name}]" for c in m.tool_calls or ())
            self.detail.update(f"{m.role} {m.id}\n{m.content}{calls}")

    def action_summary(self) -> None:
        self.app.push_screen(SummaryScreen(self.memory, self.user_id, self.session_id))

    def action_memories(self) -> None:
        self.app.push_screen(MemoriesScreen(self.memory, self.user_id))

    def action_search(self) -> None:
        self.app.push_screen(SearchScreen(self.memory, self.user_id))


class SummaryScreen(View):
    """A session's running summary."""

    def __init__(self, memory: Memory, user_id: str, session_id: str) -> None:
        super().__init__(memory)
        self.user_id = user_id
        self.session_id = session_id
        self.text = Static("", classes="detail")

    def compose(self) -> ComposeResult:
        yield Header()
        yield self.status
        yield VerticalScroll(self.text)
        yield Footer()

    async def load(self) -> None:
        self.sub_title = f"{self.user_id} / {self.session_id}: summary"
        summary = await self.memory.summary(session_id=self.session_id, user_id=self.user_id)
        if summary is None:
            self.say(f"no summary of {self.session_id!r} yet (a worker writes it)")
            return
        self.say(
            f"covers {summary.message_count} messages (until {summary.summarized_until}), "
            f"updated {ago(summary.updated_at)}"
        )
        self.text.update(summary.text)


class MemoriesScreen(View):
    """A user's active memories, newest first; the highlighted one in full."""

    def __init__(self, memory: Memory, user_id: str) -> None:
        super().__init__(memory)
        self.user_id = user_id
        self.texts: list[str] = []
        self.detail = Static("", classes="detail")

    def compose(self) -> ComposeResult:
        yield Header()
        yield self.status
        yield Rows("kind", "text", "sources", "updated")
        yield VerticalScroll(self.detail)
        yield Footer()

    async def load(self) -> None:
        self.sub_title = f"{self.user_id}: memories"
        hits = await self.memory.memories.search(user_id=self.user_id, limit=MEMORY_LIMIT)
        table = self.query_one(Rows)
        table.clear()
        self.texts = [h.record.text for h in hits]
        for i, h in enumerate(hits):
            r = h.record
            updated = ago(r.updated_at) if r.updated_at else "-"
            table.add_row(r.kind, clip(r.text, 70), str(len(r.sources)), updated, key=str(i))
        self.say(
            f"{len(hits)} active memor{'ies' if len(hits) != 1 else 'y'} of {self.user_id}"
            if hits
            else f"no active memories for user {self.user_id!r}"
        )
        table.focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.detail.update(self.texts[int(event.row_key.value)])


class SearchScreen(View):
    """Search over a user's messages, every session and agent (recall); with
    no query yet, the newest indexed messages. Enter on a hit opens its session."""

    def __init__(self, memory: Memory, user_id: str) -> None:
        super().__init__(memory)
        self.user_id = user_id
        self.hits: list[Hit] = []
        #: The query whose hits are shown (None before the first load).
        self.shown_query: str | None = None
        self._query = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder=f"search {self.user_id}'s messages, then enter")
        yield self.status
        yield Table(*HIT_COLUMNS)
        yield Footer()

    def on_mount(self) -> None:  # after View's (Textual calls each class's handler)
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._query = event.value.strip()
        self.reload()

    async def load(self) -> None:
        query = self._query
        self.sub_title = f"{self.user_id}: search"
        self.hits = await self.memory.search(query, user_id=self.user_id, limit=SEARCH_LIMIT)
        table = self.query_one(Rows)
        table.clear()
        for i, h in enumerate(self.hits):
            table.add_row(*hit_row(h), key=str(i))
        what = f"for {query!r}" if query else "(newest indexed messages)"
        self.say(
            f"{len(self.hits)} hit{'s' if len(self.hits) != 1 else ''} {what}"
            if self.hits
            else f"no hits {what} (search covers what the workers indexed)"
        )
        self.shown_query = query
        if self.hits and query:
            table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            hit = self.hits[int(event.row_key.value)]
            self.app.push_screen(MessagesScreen(self.memory, self.user_id, hit.session_id))


class BrowseApp(App[None]):
    """``redismem browse``: start at the users (or at ``user``'s sessions)."""

    TITLE = "redismem browse"
    CSS = """
    .status { height: auto; padding: 0 1; color: $text-muted; }
    Table { height: 1fr; }
    VerticalScroll { height: auto; max-height: 40%; border-top: solid $primary; }
    .detail { padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def __init__(self, memory: Memory, *, user: str | None = None, **options: Any) -> None:
        if memory.config.refresh_ttl_on_read:
            raise InvalidInput(
                "redismem browse is read-only: connect its Memory with refresh_ttl_on_read=False"
            )
        super().__init__(**options)
        self.memory = memory
        self.start_user = user

    def get_default_screen(self) -> Screen[Any]:
        return UsersScreen(self.memory)

    def on_mount(self) -> None:
        self.sub_title = f"namespace {self.memory.layout.namespace}"
        if self.start_user:
            self.push_screen(SessionsScreen(self.memory, self.start_user))
