"""LlamaIndex chat store over redismem sessions (``redismem[llamaindex]``).

``RedisMemChatStore(memory, user_id)`` is a
``llama_index.core.storage.chat_store.BaseChatStore``: a chat-store ``key``
is a redismem ``session_id`` of that user, so it works as the ``chat_store``
of ``ChatMemoryBuffer`` (``chat_store_key`` = the session), of chat engines
and agents built on it.

Mapping (LlamaIndex ``ChatMessage`` -> redismem ``Message``)::

    role system, user, assistant, tool  -> the same role
    role developer                      -> "system"     (the role is kept in metadata)
    role chatbot, model                 -> "assistant"  (likewise)
    role function                       -> "tool"       (likewise)
    one TextBlock                       -> content
    additional_kwargs["name"]           -> name          (when a str)
    additional_kwargs["tool_call_id"]   -> tool_call_id  (when a str)
    additional_kwargs["tool_calls"]     -> tool_calls, when every item is an
        OpenAI-style dict {"id", "type": "function", "function": {"name", "arguments"}}
    ToolCallBlock blocks (tool_call_id, tool_name, tool_kwargs)
                                        -> tool_calls, when they all have an id
                                           and additional_kwargs has none

Everything else goes into ``metadata["llama_index"]`` (a reserved key): the
original role, the other ``additional_kwargs``, and the ``blocks`` (as JSON)
when they are anything but one ``TextBlock`` (``content`` then holds their
text, for token counts and search). Tool calls become redismem tool calls so
that reads keep an assistant tool call and its results together.

Lossless or rejected: each message is converted back before anything is
written and must equal the original, else ``InvalidInput`` and nothing of
the call is written. So values that are not plain JSON data (bytes, pydantic
objects such as an SDK's tool-call objects, tuples, NaN) in
``additional_kwargs`` are rejected: pass them as dicts (LlamaIndex's own
stores turn them into dicts when they persist; this one says so instead).
Messages written by other means (``Memory.write``) read back with their tool
calls as OpenAI-style ``additional_kwargs``; their own metadata is not shown.

System and developer messages are stored, whatever the ``Memory``'s
``store_system_messages``: the adapter stores exactly what LlamaIndex gives
it, or raises; it never drops a message (``ChatSummaryMemoryBuffer`` keeps
its running summary as a system message). Reads return exactly what is
stored, a tool result whose call is not in the session too (as
``SimpleChatStore`` does after ``delete_message``).

Retention is LlamaIndex's: its own Redis chat store keeps a chat until it is
deleted, and so does this one, whatever the ``Memory``'s ``ttl`` (which
applies to ``Memory.write``). ``ttl`` (seconds) expires a chat ``ttl`` after
its last write instead; reads do not refresh it.

What each method costs, and what is atomic:

* ``add_message``: one ``Memory.write``, atomic.
* ``get_messages``: one read of the whole session.
* ``set_messages``: ``clear`` then one ``write``: each step is atomic, the
  pair is not (a reader in between sees the session empty; a concurrent
  write may land between them, and then stays before the new messages).
* ``delete_messages``: a read then ``clear``; returns what was read (a write
  landing in between is deleted too but not returned), None if the session
  was empty.
* ``delete_message(key, idx)`` and ``delete_last_message``: redismem has no
  per-message delete, so they read the session, clear it and write the rest
  back as one entry: O(n), not atomic (a concurrent write in between can be
  lost), and the rest gets new message ids, timestamps and this store's
  ``agent_name``/``tags``. ``ChatMemoryBuffer`` never calls them. They return
  None for an index out of range (negative indexes count from the end).
* ``get_keys``: the user's live sessions (``Memory.sessions``).

Sync methods run on a background event loop through a twin of the
``Memory`` (see ``redismem.adapters``), from any thread, inside a running
event loop too (a notebook cell; ``ChatMemoryBuffer.put`` there), which they
block while they run; ``ChatMemoryBuffer.aget`` calls them from a worker
thread. Call ``close()`` (or ``await aclose()``) when done.
"""

from __future__ import annotations

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
    from llama_index.core.base.llms import types as _types
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.storage.chat_store.base import BaseChatStore
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise MissingDependency("llama-index-core", "llamaindex") from exc

__all__ = ["METADATA_KEY", "RedisMemChatStore", "from_llamaindex", "to_llamaindex"]

#: ``ToolCallBlock`` came with llama-index-core 0.14.x (autumn 2025); older 0.14
#: releases have no such block to map.
_TOOL_CALL_BLOCK: type[Any] | None = getattr(_types, "ToolCallBlock", None)

#: The reserved ``Message.metadata`` key holding what redismem has no field for.
METADATA_KEY = "llama_index"

_ROLES: dict[str, str] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
}


def _openai_calls(value: object) -> list[ToolCall] | None:
    """``value`` as tool calls if it is a non-empty list of plain
    OpenAI-style tool-call dicts (and nothing more), else None."""
    if not isinstance(value, list) or not value:
        return None
    calls = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"id", "type", "function"}:
            return None
        function = item["function"]
        if (
            item["type"] != "function"
            or not isinstance(item["id"], str)
            or not isinstance(function, dict)
            or set(function) != {"name", "arguments"}
            or not isinstance(function["name"], str)
            or not isinstance(function["arguments"], str | dict)
        ):
            return None
        calls.append(
            ToolCall(id=item["id"], name=function["name"], arguments=function["arguments"])
        )
    return calls


def _block_calls(blocks: Sequence[Any]) -> list[ToolCall] | None:
    calls = []
    for block in blocks:
        if _TOOL_CALL_BLOCK is not None and isinstance(block, _TOOL_CALL_BLOCK):
            if block.tool_call_id is None:
                return None
            calls.append(
                ToolCall(id=block.tool_call_id, name=block.tool_name, arguments=block.tool_kwargs)
            )
    return calls or None


def _encode(message: ChatMessage) -> Message:
    role_value = MessageRole(message.role).value
    role = _ROLES.get(role_value)
    if role is None:  # pragma: no cover - every MessageRole is mapped
        raise InvalidInput(f"cannot store a message with role {role_value!r}")
    extra: dict[str, Any] = {}
    if role_value != role:
        extra["role"] = role_value
    kwargs = dict(message.additional_kwargs)
    fields: dict[str, Any] = {"role": role}
    for name in ("name", "tool_call_id"):
        if isinstance(kwargs.get(name), str):
            fields[name] = kwargs.pop(name)
    calls = _openai_calls(kwargs.get("tool_calls"))
    if calls is not None:
        del kwargs["tool_calls"]
    elif "tool_calls" not in kwargs:
        calls = _block_calls(message.blocks)
        if calls is not None:
            extra["tool_calls"] = "blocks"
    if calls:
        fields["tool_calls"] = calls
    if kwargs:
        extra["additional_kwargs"] = kwargs
    blocks = message.blocks
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        fields["content"] = blocks[0].text
    else:
        extra["blocks"] = [block.model_dump(mode="json") for block in blocks]
        fields["content"] = message.content or ""
    if extra:
        fields["metadata"] = {METADATA_KEY: extra}
    return Message.model_validate(fields)


def _decode(message: Message) -> ChatMessage:
    found = message.metadata.get(METADATA_KEY)
    extra: dict[str, Any] = found if isinstance(found, dict) else {}
    kwargs: dict[str, Any] = dict(extra.get("additional_kwargs", {}))
    if message.name is not None:
        kwargs["name"] = message.name
    if message.tool_call_id is not None:
        kwargs["tool_call_id"] = message.tool_call_id
    if message.tool_calls and extra.get("tool_calls") != "blocks":
        kwargs["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    blocks: list[Any] = extra["blocks"] if "blocks" in extra else [TextBlock(text=message.content)]
    return ChatMessage(
        role=MessageRole(extra.get("role", message.role)),
        blocks=blocks,
        additional_kwargs=kwargs,
    )


def from_llamaindex(message: ChatMessage, index: int = 0) -> Message:
    """The redismem ``Message`` storing ``message``; ``InvalidInput`` unless
    it converts back to an equal message (``index`` names it in errors)."""
    if not isinstance(message, ChatMessage):
        raise InvalidInput(
            f"messages[{index}] must be a LlamaIndex ChatMessage, not {type(message).__name__}"
        )
    try:
        stored = _encode(message)
        back = _decode(stored)
    except InvalidInput as exc:
        raise InvalidInput(f"messages[{index}]: {exc}") from exc
    except (ValidationError, TypeError, ValueError) as exc:
        raise InvalidInput(f"messages[{index}] cannot be stored exactly: {exc}") from exc
    except Exception as exc:  # e.g. pydantic's serializer on bytes in a block
        raise InvalidInput(f"messages[{index}] cannot be stored exactly: {exc!r}") from exc
    if back != message:
        raise InvalidInput(
            f"messages[{index}] would not come back as written (a value that is not plain "
            f"JSON data, or a field redismem cannot store exactly): {message!r}"
        )
    return stored


def to_llamaindex(message: Message) -> ChatMessage:
    """The LlamaIndex ``ChatMessage`` for a stored redismem ``Message``."""
    return _decode(message)


class RedisMemChatStore(BaseChatStore):
    """A LlamaIndex chat store: ``key`` -> a session of ``user_id`` (see the module doc).

    ``agent_name`` and ``tags`` are recorded with every write; ``ttl``:
    seconds a chat is kept after its last write (None: until deleted, as
    LlamaIndex's own stores keep it).
    """

    user_id: str = "default"
    agent_name: str | None = None
    tags: dict[str, str] | None = None
    ttl: float | None = None

    _memory: SessionMemory = PrivateAttr()
    _ttl_ms: int = PrivateAttr(default=0)

    def __init__(self, memory: SessionMemory, user_id: str = "default", **data: Any) -> None:
        ttl = _retention.ttl_ms(data.get("ttl"))
        super().__init__(**{**data, "user_id": user_id})
        self._memory = check_memory(memory)
        self._ttl_ms = ttl

    @classmethod
    def class_name(cls) -> str:
        return "RedisMemChatStore"

    @property
    def memory(self) -> SessionMemory:
        return self._memory

    # -- the work, on a given Memory (the caller's, or the sync twin) --------

    async def _read(self, memory: SessionMemory, key: str) -> list[Message]:
        return await _retention.read(memory, session_id=key, user_id=self.user_id)

    async def _write(self, memory: SessionMemory, key: str, messages: list[Message]) -> None:
        await _retention.write(
            memory,
            messages,
            session_id=key,
            user_id=self.user_id,
            tags=self.tags,
            agent_name=self.agent_name,
            ttl=self._ttl_ms,
        )

    async def _set(self, memory: SessionMemory, key: str, messages: list[Message]) -> None:
        await memory.clear(session_id=key, user_id=self.user_id)
        if messages:
            await self._write(memory, key, messages)

    async def _get(self, memory: SessionMemory, key: str) -> list[ChatMessage]:
        return [_decode(m) for m in await self._read(memory, key)]

    async def _add(self, memory: SessionMemory, key: str, message: Message) -> None:
        await self._write(memory, key, [message])

    async def _delete_all(self, memory: SessionMemory, key: str) -> list[ChatMessage] | None:
        stored = await self._read(memory, key)
        if not stored:
            return None
        await memory.clear(session_id=key, user_id=self.user_id)
        return [_decode(m) for m in stored]

    async def _delete_at(self, memory: SessionMemory, key: str, idx: int) -> ChatMessage | None:
        stored = await self._read(memory, key)
        if not -len(stored) <= idx < len(stored):
            return None
        removed = stored.pop(idx)
        await self._set(memory, key, stored)
        return _decode(removed)

    async def _keys(self, memory: SessionMemory) -> list[str]:
        return [s.session_id for s in await memory.sessions(user_id=self.user_id)]

    @staticmethod
    def _convert(messages: Sequence[ChatMessage]) -> list[Message]:
        if isinstance(messages, ChatMessage | str) or not isinstance(messages, Sequence):
            raise InvalidInput("messages must be a list of LlamaIndex ChatMessage objects")
        return [from_llamaindex(m, i) for i, m in enumerate(messages)]

    @staticmethod
    def _check_index(idx: object) -> int:
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise InvalidInput(f"idx must be an int, not {type(idx).__name__}")
        return idx

    # -- sync (background loop; see the module doc) --------------------------

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace the session's messages (clear, then one write; see the module doc)."""
        converted = self._convert(messages)
        run_sync(
            self._memory,
            lambda m: self._set(m, key, converted),
            "set_messages()",
            "aset_messages()",
        )

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The session's messages, oldest first."""
        return run_sync(
            self._memory, lambda m: self._get(m, key), "get_messages()", "aget_messages()"
        )

    def add_message(self, key: str, message: ChatMessage) -> None:
        """Append one message (one atomic write)."""
        converted = from_llamaindex(message)
        run_sync(
            self._memory,
            lambda m: self._add(m, key, converted),
            "add_message()",
            "async_add_message()",
        )

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Delete the session; returns its messages, or None if it had none."""
        return run_sync(
            self._memory,
            lambda m: self._delete_all(m, key),
            "delete_messages()",
            "adelete_messages()",
        )

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete message ``idx`` (O(n), not atomic: see the module doc)."""
        idx = self._check_index(idx)
        return run_sync(
            self._memory,
            lambda m: self._delete_at(m, key, idx),
            "delete_message()",
            "adelete_message()",
        )

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Delete the last message (O(n), not atomic: see the module doc)."""
        return run_sync(
            self._memory,
            lambda m: self._delete_at(m, key, -1),
            "delete_last_message()",
            "adelete_last_message()",
        )

    def get_keys(self) -> list[str]:
        """The user's live session ids."""
        return run_sync(self._memory, self._keys, "get_keys()", "aget_keys()")

    def close(self) -> None:
        """Close the background connection the sync methods use (shared by
        every adapter over the same ``Memory``; the next sync call reopens it).
        The ``Memory`` passed in stays open: close it yourself."""
        close_twin(self._memory)

    async def aclose(self) -> None:
        """``close()`` for async code (awaits the closing)."""
        await aclose_twin(self._memory)

    # -- async: on the Memory passed in ----------------------------------------

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await self._set(self._memory, key, self._convert(messages))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        return await self._get(self._memory, key)

    async def async_add_message(self, key: str, message: ChatMessage) -> None:
        await self._add(self._memory, key, from_llamaindex(message))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        return await self._delete_all(self._memory, key)

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        return await self._delete_at(self._memory, key, self._check_index(idx))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return await self._delete_at(self._memory, key, -1)

    async def aget_keys(self) -> list[str]:
        return await self._keys(self._memory)
