"""The data model: messages, entries, sessions, summaries.

``Message`` is what agents write and read. The store fills ``id``,
``created_at`` and ``token_count`` on write; values passed in for them are
ignored. Message ids are the zero-padded write sequence of the session, so
they are unique within a session and sort in write (commit) order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "Context",
    "EntryMetadata",
    "MemoryEntry",
    "Message",
    "ROLES",
    "Role",
    "SessionInfo",
    "Summary",
    "ToolCall",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


class ToolCall(BaseModel):
    """A tool invocation requested by an assistant message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: str | dict[str, Any] = ""


class Message(BaseModel):
    """One chat message, in the shape chat-completion APIs use."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str = ""
    name: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    # Filled by the store on write.
    id: str | None = None
    created_at: datetime | None = None
    token_count: int | None = None

    def to_chat(self) -> dict[str, Any]:
        """The message as a chat-completions ``messages`` item (store fields left out)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class EntryMetadata(BaseModel):
    """What the store records about one write."""

    created_at: datetime
    accessed_at: datetime | None = None
    agent_name: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    token_count: int = 0


class MemoryEntry(BaseModel):
    """One write: the messages it stored and their metadata.

    ``messages`` holds the entry's messages still stored; older ones may have
    been trimmed by ``max_messages`` or folded into the summary.
    """

    id: str
    session_id: str
    user_id: str
    messages: list[Message]
    metadata: EntryMetadata


class SessionInfo(BaseModel):
    """A live session of a user."""

    session_id: str
    user_id: str
    created_at: datetime
    accessed_at: datetime
    message_count: int
    token_count: int
    tags: dict[str, str] = Field(default_factory=dict)
    expires_at: datetime | None = None


MESSAGE_LIST: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


class Summary(BaseModel):
    """The running summary of a session's older messages.

    ``message_count`` is how many messages it covers in total;
    ``summarized_until`` is the id of the last message it covers.
    """

    text: str
    message_count: int
    summarized_until: str
    updated_at: datetime


class Context(BaseModel):
    """What an agent puts in its prompt: the summary (as a system message)
    first, then the recent messages, within the token budget."""

    messages: list[Message]
    summary: Summary | None = None
    token_count: int = 0
