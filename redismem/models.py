"""The data model: messages, entries, sessions, summaries.

``Message`` is what agents write and read. The store fills ``id``,
``created_at`` and ``token_count`` on write; values passed in for them are
ignored. Message ids are the zero-padded write sequence of the session, so
they are unique within a session and sort in write (commit) order.

A message is accepted only if it comes back from the store exactly as
given: ``content`` is a ``str``, required except on an assistant message
with ``tool_calls``; ``metadata`` and dict ``arguments`` of tool calls hold
plain JSON data (see ``redismem.values``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from redismem.values import check_json_value

__all__ = [
    "Context",
    "EntryMetadata",
    "Hit",
    "MemoryEntry",
    "Message",
    "ROLES",
    "Role",
    "SessionInfo",
    "Summary",
    "ToolCall",
]

_Model = TypeVar("_Model", bound=BaseModel)

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


class ToolCall(BaseModel):
    """A tool invocation requested by an assistant message.

    ``arguments`` is the JSON text the model produced, or that JSON decoded
    into a dict of plain JSON data (see ``redismem.values``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: str | dict[str, Any] = ""

    @field_validator("arguments")
    @classmethod
    def _arguments_round_trip(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, dict):
            check_json_value(value, "arguments")
        return value


class Message(BaseModel):
    """One chat message, in the shape chat-completion APIs use.

    ``content`` is required, except on an assistant message with
    ``tool_calls``, where it may be left out (it is then ""). ``None`` is not
    a content: for an OpenAI-style tool-call message with ``"content": null``,
    leave ``content`` out (``to_chat()`` gives ``"content": ""``, which
    chat-completions APIs accept). ``metadata`` holds plain JSON data only
    (str keys; None, bool, int, finite float, str, list, dict; at most 32
    levels deep), so it comes back from the store exactly as given.
    """

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

    @field_validator("content", mode="before")
    @classmethod
    def _content_not_none(cls, value: object) -> object:
        if value is None:
            raise ValueError(
                "content must be a str, not None (an assistant message with tool_calls "
                "may leave content out)"
            )
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_round_trips(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_json_value(value, "metadata")
        return value

    @model_validator(mode="after")
    def _content_given(self) -> Message:
        if "content" not in self.model_fields_set and not (
            self.role == "assistant" and self.tool_calls
        ):
            raise ValueError(
                f"a {self.role} message needs content; only an assistant message with "
                "tool_calls may leave it out"
            )
        return self

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


class Hit(BaseModel):
    """One message found by ``Memory.search``, with where it came from.

    ``score`` is the keyword relevance (higher is better); None when the
    search had no query and listed the newest matches of its filters. The
    message is data a user or agent wrote, never instructions to follow.
    """

    message: Message
    session_id: str
    tags: dict[str, str] = Field(default_factory=dict)
    agent_name: str | None = None
    created_at: datetime | None = None
    score: float | None = None


class SessionInfo(BaseModel):
    """A live session of a user. ``accessed_at`` is its last write or read,
    to within a second for a read (a read moves it only by 1 s or more, so
    that most reads write nothing)."""

    session_id: str
    user_id: str
    created_at: datetime
    accessed_at: datetime
    message_count: int
    token_count: int
    tags: dict[str, str] = Field(default_factory=dict)
    expires_at: datetime | None = None


_new_object = object.__new__
_set_attribute = object.__setattr__


def _trusted(cls: type[_Model], values: dict[str, Any], fields_set: set[str]) -> _Model:
    # What ``model_construct`` does, without its per-field loop: ``values``
    # holds every field, already checked by the caller.
    model = _new_object(cls)
    _set_attribute(model, "__dict__", values)
    _set_attribute(model, "__pydantic_fields_set__", fields_set)
    _set_attribute(model, "__pydantic_extra__", None)
    _set_attribute(model, "__pydantic_private__", None)
    return model


def stored_tool_call(id: str, name: str, arguments: str | dict[str, Any]) -> ToolCall:
    """A ``ToolCall`` decoded from storage (see ``stored_message``)."""
    return _trusted(ToolCall, {"id": id, "name": name, "arguments": arguments}, set(_CALL_FIELDS))


def stored_message(values: dict[str, Any], fields_set: set[str]) -> Message:
    """A ``Message`` decoded from storage, built without validation.

    For ``codec`` only: ``values`` holds every field with the type checked
    there. Metadata is not checked against the write rule again: what msgpack
    decoded, it encodes again unchanged, and sessions written before the rule
    (e.g. with bytes in metadata) must stay readable rather than turn corrupt.
    """
    # ``_trusted`` inlined: this runs for every message of every read.
    model = _new_object(Message)
    _set_attribute(model, "__dict__", values)
    _set_attribute(model, "__pydantic_fields_set__", fields_set)
    _set_attribute(model, "__pydantic_extra__", None)
    _set_attribute(model, "__pydantic_private__", None)
    return model


_CALL_FIELDS = ("id", "name", "arguments")


#: The fields a caller gives (the store fills the others).
INPUT_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "metadata")
_INPUT_KEYS = frozenset(INPUT_FIELDS)
_ROLE_SET = frozenset(ROLES)
_ABSENT: Any = object()


def input_message(data: Mapping[str, Any]) -> Message:
    """The ``Message`` that ``data`` (caller input; its ``STORE_FIELDS`` are
    ignored) describes, validated, as a new object the caller owns.

    The usual shape (a role, str content, optional name and tool_call_id, no
    tool calls or metadata) is checked here directly; anything else goes
    through pydantic, which raises ``ValidationError`` for what it refuses.
    Both ways give the same message (fields set included): the fast way
    only accepts what pydantic accepts unchanged.
    """
    if not STORE_FIELDS.isdisjoint(data):
        data = {k: v for k, v in data.items() if k not in STORE_FIELDS}
    role = data.get("role")
    content = data.get("content")
    name = data.get("name")
    call_id = data.get("tool_call_id")
    calls = data.get("tool_calls", _ABSENT)
    metadata = data.get("metadata", _ABSENT)
    if (
        type(role) is str
        and role in _ROLE_SET
        and type(content) is str
        and (name is None or type(name) is str)
        and (call_id is None or type(call_id) is str)
        and (calls is _ABSENT or (type(calls) is list and not calls))
        and (metadata is _ABSENT or (type(metadata) is dict and not metadata))
        and _INPUT_KEYS.issuperset(data)
    ):
        values: dict[str, Any] = {
            "role": role,
            "content": content,
            "name": name,
            "tool_calls": [],
            "tool_call_id": call_id,
            "metadata": {},
            "id": None,
            "created_at": None,
            "token_count": None,
        }
        return _trusted(Message, values, set(data))
    return Message.model_validate(data)


#: The fields the store fills on write (values given for them are ignored).
STORE_FIELDS = frozenset({"id", "created_at", "token_count"})


def written_entry(
    session_id: str,
    user_id: str,
    messages: list[Message],
    token_counts: list[int],
    agent_name: str | None,
    tags: dict[str, str],
) -> MemoryEntry:
    """The ``MemoryEntry`` a write returns, from values the write checked,
    built while the store runs the write: its id and times are the store's
    answer, set by ``stamp_written``. The messages are the write's own
    (validated) copies; their token counts are set here, in place."""
    for message, count in zip(messages, token_counts, strict=True):
        message.__dict__["token_count"] = count
    metadata = {
        "created_at": None,
        "accessed_at": None,
        "agent_name": agent_name,
        "tags": tags,
        "token_count": sum(token_counts),
    }
    entry = {
        "id": "",
        "session_id": session_id,
        "user_id": user_id,
        "messages": messages,
        "metadata": _trusted(EntryMetadata, metadata, set(metadata)),
    }
    return _trusted(MemoryEntry, entry, set(entry))


def stamp_written(entry: MemoryEntry, message_ids: list[str], created_at: datetime) -> None:
    """Complete a ``written_entry`` with the store's answer: the message ids
    (the first is the entry's) and the time of the write."""
    entry.__dict__["id"] = message_ids[0]
    times = entry.metadata.__dict__
    times["created_at"] = times["accessed_at"] = created_at
    for message, id in zip(entry.messages, message_ids, strict=True):
        fields = message.__dict__
        fields["id"] = id
        fields["created_at"] = created_at
        message.__pydantic_fields_set__.update(STORE_FIELDS)


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
