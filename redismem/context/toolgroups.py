"""How tool calls group: the one rule every feature that keeps, cuts, merges
or summarizes messages follows.

An assistant message with ``tool_calls`` and the tool results right after it
are one *tool group*, handled whole: kept or dropped together, moved together,
never cut between. Results are matched by position, not by call id. A tool
result that does not follow an assistant tool call (its call was cut away, or
never stored) is an *orphan*: no chat API accepts it.

``place`` says where each message of a history goes, and ``tool_units``
collects that into units (a tool group, or one message). Features differ only
in three choices, passed as arguments:

``system``: a system message that sits inside a group, after the call
    ``"join"``
        belongs to the group (``merge_messages`` moves it with the call).
    ``"join_if_results_follow"``
        belongs to the group when a tool result follows it; otherwise it ends
        the group (the strategies, ``BufferMemory``'s reads).
    ``"split"``
        ends the group, like any other message (``Memory.read``, the
        summarization pass).
    ``"free"``
        belongs to no unit and does not end the group: it stays in place
        (the strategies' uncounted system messages).

``orphans``: a tool result with no call before it
    ``"drop"``  is dropped (the strategies, ``merge_messages``' output).
    ``"alone"`` is a unit of its own (``merge_messages``' interleaving).
    ``"attach"`` joins the unit before it (the summarization pass, which never
    cuts before a tool result).

``cut_head``
    The history may begin inside a group whose call was cut off (a window of
    a longer one): its leading results, with the system messages that
    ``system`` puts inside the group, are dropped. Orphans after the head
    follow ``orphans``.

``drop_orphan_tool_results`` applies it to windows of a history
(``Memory.read``, ``Memory.context``, ``build_context``, the providers) and
``split_at_tool_boundary`` to the batches of the summarization pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from redismem.models import Message

__all__ = [
    "OrphanRule",
    "Placement",
    "SystemRule",
    "ToolUnits",
    "drop_orphan_tool_results",
    "is_tool_call",
    "place",
    "split_at_tool_boundary",
    "tool_units",
]

SystemRule = Literal["join", "join_if_results_follow", "split", "free"]
OrphanRule = Literal["drop", "alone", "attach"]
#: Where a message goes: it starts a unit, joins the unit before it, is
#: dropped, or stays in place outside every unit.
Placement = Literal["start", "join", "drop", "free"]


def is_tool_call(message: Message) -> bool:
    """Whether ``message`` is an assistant message calling tools."""
    return message.role == "assistant" and bool(message.tool_calls)


def place(
    messages: Sequence[Message],
    *,
    system: SystemRule = "join_if_results_follow",
    orphans: OrphanRule = "drop",
    cut_head: bool = False,
) -> Iterator[Placement]:
    """Where each message of ``messages`` (oldest first) goes, in order
    (see the module docstring for the choices)."""
    in_group = cut_head  # does the open unit take tool results (a call, or the cut head)?
    headless = cut_head  # is that unit the head of a group whose call was cut?
    started = False  # has a unit started?
    for position, message in enumerate(messages):
        role = message.role
        if role == "system" and system == "free":
            yield "free"
            continue
        if in_group and (
            role == "tool" or (role == "system" and _joins(system, messages, position))
        ):
            yield "drop" if headless else "join"
            continue
        if role == "tool":  # an orphan
            if orphans == "drop":
                yield "drop"
                continue
            if orphans == "attach" and started:
                yield "join"
                continue
        yield "start"
        started = True
        in_group = is_tool_call(message)
        headless = False


def _joins(system: SystemRule, messages: Sequence[Message], position: int) -> bool:
    """Whether the system message at ``position``, inside a group, belongs to it."""
    if system == "join":
        return True
    if system == "join_if_results_follow":
        for message in messages[position + 1 :]:
            if message.role != "system":
                return message.role == "tool"
    return False


@dataclass(frozen=True, slots=True)
class ToolUnits:
    """Positions in a history, each in exactly one list, all ascending."""

    #: Oldest first: a tool group, or one message. Kept or dropped whole.
    units: list[list[int]]
    #: Orphaned tool results (and the cut head).
    dropped: list[int]
    #: System messages outside every unit (``system="free"``).
    free: list[int]


def tool_units(
    messages: Sequence[Message],
    *,
    system: SystemRule = "join_if_results_follow",
    orphans: OrphanRule = "drop",
    cut_head: bool = False,
) -> ToolUnits:
    """``place`` collected: the units, dropped and free positions of ``messages``."""
    units: list[list[int]] = []
    dropped: list[int] = []
    free: list[int] = []
    placements = place(messages, system=system, orphans=orphans, cut_head=cut_head)
    for position, placement in enumerate(placements):
        if placement == "start":
            units.append([position])
        elif placement == "join":
            units[-1].append(position)
        elif placement == "drop":
            dropped.append(position)
        else:
            free.append(position)
    return ToolUnits(units=units, dropped=dropped, free=free)


def drop_orphan_tool_results(
    messages: list[Message], *, system: SystemRule = "split"
) -> list[Message]:
    """``messages`` without the head of a tool group whose call was cut off.

    For windows of a longer history (the newest N messages, a token budget):
    the leading tool results, and with ``system="join_if_results_follow"``
    the system messages among them, are dropped. Later orphans are kept (they
    are what the store holds). Returns ``messages`` itself when nothing is cut.
    """
    cut = 0
    for placement in place(messages, system=system, orphans="alone", cut_head=True):
        if placement != "drop":
            break
        cut += 1
    return messages[cut:] if cut else messages


def split_at_tool_boundary(batch: list[Message], following: Message | None) -> list[Message]:
    """The longest prefix of ``batch`` that does not end inside a tool-call sequence.

    ``following`` is the first message after the batch, if any. The prefix
    may not be followed by a tool result (it would be cut from its call), nor
    end with an assistant tool call (its results may still come).
    """
    history = [*batch, following] if following is not None else batch
    placements = place(history, system="split", orphans="attach")
    starts = [placement == "start" for placement in placements]
    for end in range(len(batch), 0, -1):
        at_boundary = end == len(history) or starts[end]
        if at_boundary and not is_tool_call(batch[end - 1]):
            return batch[:end]
    return []
