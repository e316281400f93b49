"""``build_context``: the prompt of one turn, from memory, within a token budget.

The read side of the memory loop: the current request, the session's recent
history and running summary, and what the application remembers about the
user (a profile, retrieved notes), assembled into chat messages that never
exceed ``max_tokens``.

Budget
    Every message is counted with the memory's tokenizer (``message_tokens``).
    The request is always included, last; if it alone exceeds ``max_tokens``
    that is ``InvalidInput``. The *history share*, ``floor(max_tokens *
    history_ratio)``, holds the request, the recent history and the summary:
    the summary takes up to half of what the request leaves, or more when the
    history needs less, and the newest whole tool groups of the history fill
    the rest (as ``Memory.context`` does). The profile and the notes get
    everything else, including what the history left unused: profile lines
    first, then notes in the order given (put the most relevant first); an
    item that does not fit is dropped and later, smaller ones may still fit.
    ``dropped_notes`` and ``dropped_profile_lines`` count what was left out.
    With ``user_profile=True`` the user's active facts about themselves
    (``mem.memories.profile``) join the profile lines, after the given ones.
    With ``memories=N``, up to N active memories most relevant to the request
    (``mem.memories.search``, best first, profile facts not repeated) come
    after the notes, each with its kind and when it was learned
    (``memories_included`` counts those included). With ``recall=N``, up to
    N messages of the user's *other* sessions that match the request
    (``Memory.search``, best first) come after those, on the same terms
    (``recalled_messages`` counts those included); the session's own
    messages are left out, being in the history or its summary.

Remembered text is data, not instructions
    The summary, profile, notes and recalled messages go in one system message, first: a header
    saying that what follows is data retrieved from memory and must not be
    obeyed, then the data between a begin line and an end line that carry a
    marker derived from the data (see ``redismem.context.quoting``). Every
    line of the data starts with ``"| "`` (text is split on every kind of
    line break), so no remembered text can produce the end line or anything else outside the fence,
    whatever it contains: fence lines, triple backticks, ``</memory>``,
    "ignore previous instructions". Notes keep their provenance (``source``,
    ``updated_at``) visible next to their text.

Messages
    The memory message (when anything remembered fits), then the history
    (oldest first, never starting with a tool result whose call was cut, tool
    groups whole), then the request. Put your own system prompt before them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from redismem.checks import check_bool, check_fraction, check_int
from redismem.context.quoting import SUMMARY_LABEL, fence, new_marker, quote
from redismem.context.tokens import fit_text, message_tokens
from redismem.context.toolgroups import drop_orphan_tool_results
from redismem.errors import InvalidInput
from redismem.models import STORE_FIELDS, Message

if TYPE_CHECKING:
    from redismem.surface import SessionMemory

__all__ = ["BuiltContext", "build_context"]


class BuiltContext(BaseModel):
    """Messages ready for a chat API, and how the budget was spent.

    ``token_count`` = ``request_tokens`` + ``history_tokens`` +
    ``memory_tokens``: history counts the history messages and the summary's
    lines, memory the rest of the memory message (header, fence, profile,
    notes).
    """

    messages: list[Message]
    token_count: int
    request_tokens: int
    history_tokens: int
    memory_tokens: int
    history_messages: int
    summary_included: bool
    dropped_notes: int
    dropped_profile_lines: int
    #: Messages of other sessions included (``recall``).
    recalled_messages: int = 0
    #: Long-term memories included (``memories``).
    memories_included: int = 0

    def to_chat(self) -> list[dict[str, Any]]:
        """``messages`` as chat-completions dicts."""
        return [m.to_chat() for m in self.messages]


# -- inputs ------------------------------------------------------------------------


def _request_message(request: object) -> Message:
    if isinstance(request, str):
        return Message(role="user", content=request)
    if isinstance(request, Message):
        data: object = request.model_dump(exclude=set(STORE_FIELDS))
    elif isinstance(request, Mapping):
        data = {k: v for k, v in request.items() if k not in STORE_FIELDS}
    else:
        raise InvalidInput(
            f"request must be a str, a Message or a dict, not {type(request).__name__}"
        )
    try:
        message = Message.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"request is invalid: {exc}") from exc
    if message.role != "user":
        raise InvalidInput(f"request must be a user message, not {message.role!r}")
    return message


def _render_value(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return json.dumps(value, ensure_ascii=False, default=str)


def _profile_items(profile: object) -> list[str]:
    if profile is None:
        return []
    if isinstance(profile, str):
        return [line for line in profile.splitlines() if line.strip()]
    if not isinstance(profile, Mapping):
        raise InvalidInput(f"profile must be a dict or a str, not {type(profile).__name__}")
    items = []
    for key, value in profile.items():
        if not isinstance(key, str) or not key:
            raise InvalidInput(f"profile keys must be non-empty str, got {key!r}")
        items.append(f"{key}: {_render_value(value)}")
    return items


def _note_items(notes: object) -> list[str]:
    if notes is None:
        return []
    if isinstance(notes, str | Mapping) or not isinstance(notes, Sequence):
        raise InvalidInput("notes must be a list of str or of dicts with 'text'")
    items = []
    for i, note in enumerate(notes):
        if isinstance(note, str):
            items.append(f"- {note}")
            continue
        if not isinstance(note, Mapping):
            raise InvalidInput(f"notes[{i}] must be a str or a dict, not {type(note).__name__}")
        text = note.get("text")
        if not isinstance(text, str):
            raise InvalidInput(f"notes[{i}] needs a str 'text'")
        provenance = []
        source = note.get("source")
        if source is not None:
            if not isinstance(source, str):
                raise InvalidInput(f"notes[{i}]['source'] must be a str")
            provenance.append(f"source: {source}")
        updated = note.get("updated_at")
        if updated is not None:
            if not isinstance(updated, str | datetime):
                raise InvalidInput(f"notes[{i}]['updated_at'] must be a str or a datetime")
            provenance.append(f"updated: {_render_value(updated)}")
        label = f"[{'; '.join(provenance)}] " if provenance else ""
        items.append(f"- {label}{text}")
    return items


# -- the memory message ------------------------------------------------------------


class _MemoryBlock:
    """Renders the memory message, with one fence marker for all renderings
    (so fitting the budget measures the final text)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.marker = new_marker(texts)

    def render(
        self,
        summary: str,
        profile: Sequence[str],
        notes: Sequence[str],
        recalled: Sequence[str] = (),
        remembered: Sequence[str] = (),
    ) -> Message | None:
        if not (summary or profile or notes or recalled or remembered):
            return None
        sections = [
            (SUMMARY_LABEL, [summary] if summary else []),
            ("user profile", profile),
            ("notes", notes),
            ("long-term memories", remembered),
            ("recalled from other conversations", recalled),
        ]
        content = fence(sections, self.marker)
        return Message(role="system", content=content, metadata={"redismem": "memory"})


# -- building ----------------------------------------------------------------------


async def build_context(
    memory: SessionMemory,
    *,
    session_id: str,
    user_id: str = "default",
    request: str | Message | Mapping[str, Any],
    max_tokens: int,
    history_ratio: float = 0.7,
    profile: Mapping[str, Any] | str | None = None,
    notes: Sequence[str | Mapping[str, Any]] | None = None,
    recall: int = 0,
    user_profile: bool = False,
    memories: int = 0,
) -> BuiltContext:
    """The messages for one turn (see the module docstring for the rules)."""
    budget = check_int("max_tokens", max_tokens, minimum=1)
    recall_count = check_int("recall", recall, minimum=0)
    memory_count = check_int("memories", memories, minimum=0)
    check_bool("user_profile", user_profile)
    ratio = check_fraction("history_ratio", history_ratio)
    tokenizer = memory.config.tokenizer

    def cost(message: Message) -> int:
        return message_tokens(message, tokenizer)

    asked = _request_message(request)
    request_cost = cost(asked)
    if request_cost > budget:
        raise InvalidInput(f"the request alone needs {request_cost} tokens; max_tokens is {budget}")
    profile_items = _profile_items(profile)
    note_items = _note_items(notes)

    # History share: the store splits it between the summary and the newest messages.
    room = max(0, int(budget * ratio) - request_cost)
    context = await memory.context(session_id=session_id, user_id=user_id, max_tokens=room)
    history = list(context.messages)
    summary_text = ""
    if history and history[0].id is None and history[0].metadata.get("redismem") == "summary":
        history.pop(0)  # rendered again below, in the one memory message
        summary_text = context.summary.text if context.summary else ""
    history = drop_orphan_tool_results(history)
    history_cost = sum(cost(m) for m in history)
    # Stored counts chose the history; a tokenizer changed since may count more.
    while history and request_cost + history_cost > budget:
        history = drop_orphan_tool_results(history[1:])
        history_cost = sum(cost(m) for m in history)

    fact_lines, memory_items = await _remembered(memory, user_id, asked, user_profile, memory_count)
    profile_items += fact_lines
    recalled_items = await _recalled(memory, session_id, user_id, asked, recall_count)
    block = _MemoryBlock(
        [summary_text, *profile_items, *note_items, *recalled_items, *memory_items]
    )
    kept_memories: list[str] = []

    def used(
        summary: str, kept_profile: list[str], kept_notes: list[str], kept_recalled: list[str]
    ) -> int:
        note = block.render(summary, kept_profile, kept_notes, kept_recalled, kept_memories)
        return request_cost + history_cost + (cost(note) if note is not None else 0)

    def fits(
        summary: str,
        kept_profile: list[str],
        kept_notes: list[str],
        kept_recalled: list[str] | None = None,
    ) -> bool:
        return used(summary, kept_profile, kept_notes, kept_recalled or []) <= budget

    # The memory message's header and fence come out of the rest of the budget;
    # the summary is cut further only when they do not fit beside it.
    if summary_text:
        cut = fit_text(summary_text, lambda text: used(text, [], [], []), budget)
        if len(cut) < len(summary_text):
            summary_text = cut if cut.strip() else ""
    kept_profile: list[str] = []
    for item in profile_items:
        if fits(summary_text, [*kept_profile, item], []):
            kept_profile.append(item)
    kept_notes: list[str] = []
    for item in note_items:
        if fits(summary_text, kept_profile, [*kept_notes, item]):
            kept_notes.append(item)

    for item in memory_items:
        kept_memories.append(item)
        if not fits(summary_text, kept_profile, kept_notes):
            kept_memories.pop()

    kept_recalled: list[str] = []
    for item in recalled_items:
        if fits(summary_text, kept_profile, kept_notes, [*kept_recalled, item]):
            kept_recalled.append(item)

    note = block.render(summary_text, kept_profile, kept_notes, kept_recalled, kept_memories)
    head: list[Message] = []
    memory_cost = 0
    summary_cost = 0
    if note is not None:
        memory_cost = cost(note)
        head = [note.model_copy(update={"token_count": memory_cost})]
        if summary_text:
            section = "\n".join([f"[{SUMMARY_LABEL}]", *quote(summary_text)])
            summary_cost = min(memory_cost, tokenizer(section))
    asked = asked.model_copy(update={"token_count": request_cost})
    return BuiltContext(
        messages=[*head, *history, asked],
        token_count=request_cost + history_cost + memory_cost,
        request_tokens=request_cost,
        history_tokens=history_cost + summary_cost,
        memory_tokens=memory_cost - summary_cost,
        history_messages=len(history),
        summary_included=bool(summary_text),
        dropped_notes=len(note_items) - len(kept_notes),
        dropped_profile_lines=len(profile_items) - len(kept_profile),
        recalled_messages=len(kept_recalled),
        memories_included=len(kept_memories),
    )


async def _remembered(
    memory: SessionMemory, user_id: str, request: Message, profile: bool, count: int
) -> tuple[list[str], list[str]]:
    """Profile lines from the user's facts about themselves (with
    ``profile``), and up to ``count`` other memories relevant to the
    request, best first, rendered as lines for the memory message."""
    facts = await memory.memories.profile(user_id=user_id) if profile else []
    lines = [f"{fact.predicate.replace('_', ' ')}: {fact.object}" for fact in facts]
    items: list[str] = []
    if count and request.content.strip():
        shown = {fact.id for fact in facts}
        hits = await memory.memories.search(
            request.content, user_id=user_id, limit=count + len(shown)
        )
        for hit in hits:
            record = hit.record
            if record.id in shown:
                continue
            learned = f"{record.created_at:%Y-%m-%d}" if record.created_at else "?"
            when = f"; about {record.event_date:%Y-%m-%d}" if record.event_date else ""
            items.append(f"- [{record.kind}; learned {learned}{when}] {record.text}")
            if len(items) == count:
                break
    return lines, items


async def _recalled(
    memory: SessionMemory, session_id: str, user_id: str, request: Message, count: int
) -> list[str]:
    """Up to ``count`` messages of the user's other sessions that match the
    request, best first, rendered as lines for the memory message."""
    if count == 0 or not request.content.strip():
        return []
    hits = await memory.search(request.content, user_id=user_id, limit=min(1000, count * 3 + 10))
    items = []
    for hit in hits:
        if hit.session_id == session_id:
            continue  # the session's own messages are in the history (or its summary)
        when = f"{hit.created_at:%Y-%m-%d}" if hit.created_at else "?"
        speaker = hit.message.role + (f" {hit.message.name}" if hit.message.name else "")
        items.append(f"{when} {speaker}: {hit.message.content}")
        if len(items) == count:
            break
    return items
