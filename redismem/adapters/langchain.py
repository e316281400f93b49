"""LangChain chat message history over a redismem session (``redismem[langchain]``).

``RedisMemChatMessageHistory(memory, session_id, user_id)`` is a
``langchain_core.chat_history.BaseChatMessageHistory``: usable wherever
LangChain takes one (e.g. ``RunnableWithMessageHistory``), async and sync.

Mapping (LangChain -> redismem ``Message``)::

    HumanMessage   -> role "user"
    AIMessage      -> role "assistant"; tool_calls [{"name", "args", "id"}]
                      -> ToolCall(id, name, arguments=args) (args stay a dict)
    ToolMessage    -> role "tool", tool_call_id
    SystemMessage  -> role "system" (stored, whatever the Memory's
                      store_system_messages: the adapter never drops a message)
    name           -> name
    str content    -> content

Everything else a message carries goes into ``metadata["langchain"]`` (a
reserved key: a dict holding only what differs from the defaults): ``id``
(LangChain's message id), ``additional_kwargs``, ``response_metadata``,
``content`` when it is a list of content blocks (``Message.content`` then
holds the blocks' text, for token counts and search), and
``invalid_tool_calls``, ``usage_metadata``, ``artifact``, ``status``.

Lossless or rejected: each message is converted back before anything is
written and must equal the original, else ``InvalidInput`` (nothing of the
call is written). So values that are not plain JSON data (bytes, objects,
tuples, NaN) in ``additional_kwargs``, ``response_metadata``, content blocks,
tool-call args or a tool ``artifact`` are rejected, never dropped or
converted; so are tool calls without an id, extra fields, and message classes
other than the four above (``ChatMessage``, ``FunctionMessage``,
``RemoveMessage``). Chunks (``AIMessageChunk``...) are the one conversion:
they are stored as their message class (``message_chunk_to_message``), as
``RunnableWithMessageHistory`` would hand them over after streaming.

Messages written to the session by other means (``Memory.write``) read back
as the closest LangChain message: a tool call whose arguments are JSON text
of an object gets them as ``args``, other text becomes an
``invalid_tool_calls`` entry; their own metadata is not shown.

Reads: without ``limit``/``max_tokens``, exactly the stored messages (a
tool result whose call is not in the session too). ``limit`` and
``max_tokens`` (constructor) keep the most recent messages, as
``Memory.read`` does: such a window never starts with a tool result (its call
may have been cut off). A session with summarization on shows its stored
(recent) messages; the summary is ``Memory.context``'s.

Retention is LangChain's: its own Redis history keeps a chat until it is
cleared, and so does this one, whatever the ``Memory``'s ``ttl`` (which
applies to ``Memory.write``). ``ttl`` (seconds, constructor) expires the
chat ``ttl`` after its last write instead; reads do not refresh it.

Writes: ``add_messages`` / ``aadd_messages`` store all the messages of one
call as one redismem entry, atomically (one ``Memory.write``; an empty list
writes nothing).

Sync methods (``messages``, ``add_messages``, ``clear``) run on a background
event loop through a twin of the ``Memory`` (see ``redismem.adapters``), from
any thread, inside a running event loop too (a notebook cell), which they
block while they run. Call ``close()`` (or ``await aclose()``) when done
with them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from redismem.adapters import _retention
from redismem.adapters._sync import aclose_twin, close_twin, run_sync
from redismem.errors import InvalidInput, MissingDependency
from redismem.models import Message, ToolCall
from redismem.surface import check_memory

if TYPE_CHECKING:
    from redismem.surface import SessionMemory

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        BaseMessageChunk,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_chunk_to_message,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise MissingDependency("langchain-core", "langchain") from exc

__all__ = ["METADATA_KEY", "RedisMemChatMessageHistory", "from_langchain", "to_langchain"]

#: The reserved ``Message.metadata`` key holding what redismem has no field for.
METADATA_KEY = "langchain"

_ROLES: dict[type[BaseMessage], str] = {
    HumanMessage: "user",
    AIMessage: "assistant",
    ToolMessage: "tool",
    SystemMessage: "system",
}


def _encode(message: BaseMessage) -> Message:
    role = _ROLES.get(type(message))
    if role is None:
        raise InvalidInput(
            f"cannot store a {type(message).__name__}: only HumanMessage, AIMessage, "
            "ToolMessage and SystemMessage (or their chunks) are supported"
        )
    extra: dict[str, Any] = {}
    if message.id is not None:
        extra["id"] = message.id
    if message.additional_kwargs:
        extra["additional_kwargs"] = message.additional_kwargs
    if message.response_metadata:
        extra["response_metadata"] = message.response_metadata
    if isinstance(message.content, str):
        content = message.content
    else:
        extra["content"] = message.content
        content = str(message.text)
    fields: dict[str, Any] = {"role": role, "content": content, "name": message.name}
    if isinstance(message, AIMessage):
        calls = []
        for i, call in enumerate(message.tool_calls):
            call_id = call.get("id")
            if call_id is None:
                raise InvalidInput(
                    f"tool_calls[{i}] ({call.get('name')!r}) has no id: a tool call needs "
                    "one to be paired with its ToolMessage"
                )
            calls.append(ToolCall(id=call_id, name=call["name"], arguments=call["args"]))
        fields["tool_calls"] = calls
        if message.invalid_tool_calls:
            extra["invalid_tool_calls"] = message.invalid_tool_calls
        if message.usage_metadata is not None:
            extra["usage_metadata"] = message.usage_metadata
    elif isinstance(message, ToolMessage):
        fields["tool_call_id"] = message.tool_call_id
        if message.artifact is not None:
            extra["artifact"] = message.artifact
        if message.status != "success":
            extra["status"] = message.status
    if extra:
        fields["metadata"] = {METADATA_KEY: extra}
    return Message.model_validate(fields)


def _decode(message: Message) -> BaseMessage:
    found = message.metadata.get(METADATA_KEY)
    extra: dict[str, Any] = found if isinstance(found, dict) else {}
    common: dict[str, Any] = {
        "content": extra.get("content", message.content),
        "name": message.name,
        "id": extra.get("id"),
        "additional_kwargs": extra.get("additional_kwargs", {}),
        "response_metadata": extra.get("response_metadata", {}),
    }
    if message.role == "user":
        return HumanMessage(**common)
    if message.role == "system":
        return SystemMessage(**common)
    if message.role == "tool":
        return ToolMessage(
            **common,
            tool_call_id=message.tool_call_id or "",
            artifact=extra.get("artifact"),
            status=extra.get("status", "success"),
        )
    tool_calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = list(extra.get("invalid_tool_calls", []))
    for call in message.tool_calls:
        args = call.arguments
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args) if args else {}
        if isinstance(args, dict):
            tool_calls.append({"name": call.name, "args": args, "id": call.id, "type": "tool_call"})
        else:
            invalid.append(
                {
                    "name": call.name,
                    "args": call.arguments,
                    "id": call.id,
                    "error": None,
                    "type": "invalid_tool_call",
                }
            )
    return AIMessage(
        **common,
        tool_calls=tool_calls,
        invalid_tool_calls=invalid,
        usage_metadata=extra.get("usage_metadata"),
    )


def from_langchain(message: BaseMessage, index: int = 0) -> Message:
    """The redismem ``Message`` storing ``message``; ``InvalidInput`` unless
    it converts back to an equal message (``index`` names it in errors)."""
    if not isinstance(message, BaseMessage):
        raise InvalidInput(
            f"messages[{index}] must be a LangChain BaseMessage, not {type(message).__name__}"
        )
    if isinstance(message, BaseMessageChunk):
        message = message_chunk_to_message(message)
    try:
        stored = _encode(message)
    except ValidationError as exc:
        raise InvalidInput(f"messages[{index}] cannot be stored: {exc}") from exc
    except InvalidInput as exc:
        raise InvalidInput(f"messages[{index}]: {exc}") from exc
    try:
        back = _decode(stored)
    except (ValidationError, TypeError, ValueError) as exc:
        raise InvalidInput(f"messages[{index}] would not come back as written: {exc}") from exc
    if back != message:
        raise InvalidInput(
            f"messages[{index}] would not come back as written (a field redismem cannot "
            f"store exactly, or an extra field): {message!r}"
        )
    return stored


def to_langchain(message: Message) -> BaseMessage:
    """The LangChain message for a stored redismem ``Message``."""
    return _decode(message)


class RedisMemChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history over one redismem session (see the module doc).

    ``limit`` / ``max_tokens`` bound what reads return (the most recent
    messages); ``agent_name`` and ``tags`` are recorded with every write;
    ``ttl``: seconds the chat is kept after its last write (None: until
    cleared, as LangChain's own histories keep it).
    """

    def __init__(
        self,
        memory: SessionMemory,
        session_id: str,
        user_id: str = "default",
        *,
        agent_name: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int | None = None,
        max_tokens: int | None = None,
        ttl: float | None = None,
    ) -> None:
        super().__init__()
        self.memory = check_memory(memory)
        self._ttl_ms = _retention.ttl_ms(ttl)
        self.ttl = ttl
        self.session_id = session_id
        self.user_id = user_id
        self.agent_name = agent_name
        self.tags = tags
        self.limit = limit
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return (
            f"RedisMemChatMessageHistory(session_id={self.session_id!r}, "
            f"user_id={self.user_id!r}, memory={self.memory!r})"
        )

    # -- the work, on a given Memory (the caller's, or the sync twin) --------

    async def _read(self, memory: SessionMemory) -> list[BaseMessage]:
        stored = await _retention.read(
            memory,
            session_id=self.session_id,
            user_id=self.user_id,
            limit=self.limit,
            max_tokens=self.max_tokens,
        )
        return [_decode(m) for m in stored]

    async def _write(self, memory: SessionMemory, messages: list[Message]) -> None:
        await _retention.write(
            memory,
            messages,
            session_id=self.session_id,
            user_id=self.user_id,
            tags=self.tags,
            agent_name=self.agent_name,
            ttl=self._ttl_ms,
        )

    async def _clear(self, memory: SessionMemory) -> None:
        await memory.clear(session_id=self.session_id, user_id=self.user_id)

    def _convert(self, messages: Sequence[BaseMessage]) -> list[Message]:
        if isinstance(messages, BaseMessage | str) or not isinstance(messages, Sequence):
            raise InvalidInput("messages must be a sequence of LangChain messages")
        return [from_langchain(m, i) for i, m in enumerate(messages)]

    # -- async ---------------------------------------------------------------

    async def aget_messages(self) -> list[BaseMessage]:
        """The session's messages, oldest first (within ``limit``/``max_tokens``)."""
        return await self._read(self.memory)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` as one entry, atomically (nothing for an empty list)."""
        converted = self._convert(messages)
        if converted:
            await self._write(self.memory, converted)

    async def aclear(self) -> None:
        """Delete the session."""
        await self._clear(self.memory)

    # -- sync (background loop; see the module doc) --------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first (sync; see the module doc)."""
        return run_sync(self.memory, self._read, "messages", "aget_messages()")

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` as one entry, atomically (sync; see the module doc)."""
        converted = self._convert(messages)
        if converted:
            run_sync(
                self.memory,
                lambda memory: self._write(memory, converted),
                "add_messages()",
                "aadd_messages()",
            )

    def clear(self) -> None:
        """Delete the session (sync; see the module doc)."""
        run_sync(self.memory, self._clear, "clear()", "aclear()")

    def close(self) -> None:
        """Close the background connection the sync methods use (shared by
        every adapter over the same ``Memory``; the next sync call reopens it).
        The ``Memory`` passed in stays open: close it yourself."""
        close_twin(self.memory)

    async def aclose(self) -> None:
        """``close()`` for async code (awaits the closing)."""
        await aclose_twin(self.memory)
