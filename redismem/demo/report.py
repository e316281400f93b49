"""What ``redismem demo`` shows after the traffic, and the checks of its verdict.

``gather`` reads the store once the workers are done: the counts every check
needs (``Findings``), a sample summary, a search of one user's sessions and
the memories learned about that user. ``show`` prints them, ``verdict``
makes one ``Check`` per feature the demo ran, ``judge`` prints them and gives
the exit code, and ``commands`` are the CLI commands that look further at the
data the demo kept.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

from redismem.client import Memory
from redismem.core.guard import current_epoch
from redismem.demo.agent import persona_of
from redismem.models import Hit, Summary

__all__ = [
    "Check",
    "Findings",
    "commands",
    "gather",
    "judge",
    "plural",
    "show",
    "verdict",
]


def plural(count: int, word: str) -> str:
    """``1 session``, ``2 sessions``, ``1 summary``, ``3 summaries``,
    ``2 agent processes`` (English rules enough for the demo's words)."""
    if count == 1:
        return f"{count:,} {word}"
    if word.endswith(("s", "x", "ch", "sh")):
        return f"{count:,} {word}es"
    if word.endswith("y") and word[-2:-1] not in tuple("aeiou"):
        return f"{count:,} {word[:-1]}ies"
    return f"{count:,} {word}s"


@dataclass
class Findings:
    """What the store holds after the run, next to what the agents wrote."""

    #: Messages the agents wrote, by ``user/session``.
    written: dict[str, int]
    #: Messages still stored and covered by summaries, summed over sessions.
    stored: int = 0
    summarized: int = 0
    #: Documents in the users' recall indexes; messages not yet indexed.
    indexed_docs: int = 0
    unindexed: int = 0
    #: Sessions with enough messages for a summary; summaries made.
    due_sessions: int = 0
    summaries: int = 0
    #: Memories the users' statements should have taught, and those missing.
    expected_memories: int = 0
    missing_memories: list[str] = field(default_factory=list)
    memories_added: int = 0
    #: The shown user, the search query, and what its hits span.
    user: str = "user-0"
    query: str = ""
    user_sessions: int = 0
    agents: int = 0
    hits: list[Hit] = field(default_factory=list)
    summary_session: str | None = None
    summary: Summary | None = None
    memories: list[Any] = field(default_factory=list)
    drained: bool = True

    @property
    def total(self) -> int:
        return sum(self.written.values())

    @property
    def lost(self) -> int:
        return self.total - self.stored - self.summarized

    @property
    def direct(self) -> list[Hit]:
        """The hits that say the query word (search also ranks their
        neighbours in the conversation)."""
        word = self.query.casefold()
        return [h for h in self.hits if word in h.message.content.casefold()]

    @property
    def hit_sessions(self) -> list[str]:
        return sorted({h.session_id for h in self.direct})

    @property
    def hit_agents(self) -> list[str]:
        return sorted({h.agent_name or "?" for h in self.direct})

    def sessions_of(self, user: str) -> list[str]:
        return sorted(
            (key.split("/", 1)[1] for key in self.written if key.split("/", 1)[0] == user),
            key=lambda s: int(s.rpartition("-")[2]) if s.rpartition("-")[2].isdigit() else 0,
        )


async def gather(
    memory: Memory,
    *,
    written: Mapping[str, int],
    stated: Mapping[str, set[int]],
    counters: Mapping[str, int],
    agents: int,
    due_at: int,
    drained: bool,
) -> Findings:
    found = Findings(dict(written), drained=drained, agents=agents)
    found.summaries = counters.get("summaries", 0)
    found.memories_added = counters.get("memories_added", 0)
    found.due_sessions = sum(1 for count in written.values() if count >= due_at)
    users = sorted({key.split("/", 1)[0] for key in written})
    for user in users:
        sessions = found.sessions_of(user)
        epoch = await current_epoch(memory.backend, user)
        for session_id in sessions:
            stored = len(await memory.read(session_id=session_id, user_id=user))
            summary = await memory.summary(session_id=session_id, user_id=user)
            found.stored += stored
            found.summarized += summary.message_count if summary else 0
            meta = memory.layout.session(user, session_id, epoch).meta
            seq, iwm = await memory.redis.hmget(meta, ["seq", "iwm"])
            found.unindexed += int(seq or 0) - int(iwm or 0)
        found.indexed_docs += await _index_docs(memory, user, epoch)
        learned = {h.record.text for h in await memory.memories.search(user_id=user, limit=100)}
        statements = persona_of(user).statements
        for index in sorted(stated.get(user, ())):
            for text in statements[index][1]:
                found.expected_memories += 1
                if text not in learned:
                    found.missing_memories.append(f"{user}: {text}")
    found.user = users[0] if users else "user-0"
    found.query = persona_of(found.user).query
    sessions = found.sessions_of(found.user)
    found.user_sessions = len(sessions)
    found.hits = await memory.search(found.query, user_id=found.user, limit=100)
    for user in [found.user, *users]:
        for session_id in found.sessions_of(user):
            summary = await memory.summary(session_id=session_id, user_id=user)
            if summary is not None:
                found.summary_session, found.summary = f"{user}/{session_id}", summary
                break
        if found.summary is not None:
            break
    found.memories = await memory.memories.search(user_id=found.user, limit=20)
    return found


async def _index_docs(memory: Memory, user: str, epoch: int) -> int:
    """The documents in the user's recall index (format 2 counts them in
    ``i:meta``, format 1 in its stats hash)."""
    recall = memory.layout.recall(user, epoch)
    count = await memory.redis.hget(recall.i_meta, "n")
    if count is None:
        count = await memory.redis.hget(recall.stats, "n")
    return int(count or 0)


@dataclass(frozen=True)
class Check:
    """One line of the verdict: a feature the demo ran, and whether it worked."""

    name: str
    ok: bool
    detail: str


def verdict(found: Findings) -> list[Check]:
    """A check for every feature the demo ran."""
    total = found.total
    checks = [
        Check(
            "nothing lost",
            found.lost == 0,
            f"all {plural(total, 'message')} written are in their sessions "
            f"({found.stored:,} stored, {found.summarized:,} in summaries)"
            if found.lost == 0
            else f"{plural(found.lost, 'message')} lost of {total:,} written "
            f"({found.stored:,} stored, {found.summarized:,} in summaries)",
        ),
        Check(
            "indexed once",
            found.unindexed == 0 and found.indexed_docs == total,
            f"{plural(found.indexed_docs, 'index document')} for {plural(total, 'message')}"
            + (f", {found.unindexed:,} not indexed yet" if found.unindexed else ""),
        ),
    ]
    if found.due_sessions and not found.summaries:
        summary_detail = (
            f"no summary made, though {plural(found.due_sessions, 'session')} "
            f"{'was' if found.due_sessions == 1 else 'were'} due for one "
            "(are the workers summarizing? see redismem stats)"
        )
    else:
        summary_detail = (
            f"{plural(found.summaries, 'summary')} made; "
            f"{plural(found.due_sessions, 'session')} had enough messages for one"
        )
    summarized = not (found.due_sessions and not found.summaries)
    checks.append(Check("summaries", summarized, summary_detail))
    missing = found.missing_memories
    checks.append(
        Check(
            "memories",
            found.expected_memories > 0 and not missing,
            f"{found.expected_memories - len(missing):,} learned of the "
            f"{plural(found.expected_memories, 'memory')} the users' statements teach"
            + (f"; missing: {'; '.join(missing[:3])}" if missing else ""),
        )
    )
    sessions, agents = found.hit_sessions, found.hit_agents
    want_sessions = min(2, found.user_sessions)
    want_agents = min(2, found.agents)
    spans = len(sessions) >= want_sessions and len(agents) >= want_agents and found.direct
    detail = (
        f'"{found.query}" for {found.user}: {plural(len(found.direct), "message")} in '
        f"{plural(len(sessions), 'session')} by {plural(len(agents), 'agent')}"
    )
    if found.user_sessions < 2:
        detail += " (the user has one session: pass --sessions 2 or more to search across)"
    checks.append(Check("cross-session search", bool(spans), detail))
    if not found.drained:
        checks.append(
            Check("workers caught up", False, "work was still pending at the drain timeout")
        )
    return checks


def judge(checks: list[Check], out: IO[str]) -> int:
    """Print the checks; 0 when all passed, else 1 with a FAIL line per failure."""
    width = max(len(c.name) for c in checks)
    out.write("\nverdict\n")
    for check in checks:
        out.write(f"  {'ok  ' if check.ok else 'FAIL'}  {check.name:<{width}}  {check.detail}\n")
    failed = [c for c in checks if not c.ok]
    for check in failed:
        out.write(f"FAIL: {check.detail}\n")
    if failed:
        return 1
    out.write(
        "OK: no message lost, every message indexed once, summaries made, memories "
        "learned, search spans sessions\n"
    )
    return 0


def show(found: Findings, out: IO[str]) -> None:
    """The sample summary, the search and the memories of the shown user."""
    out.write("\n")
    if found.summary is not None and found.summary_session is not None:
        user, session = found.summary_session.split("/", 1)
        summary = found.summary
        out.write(
            f"A summary: {user} / {session}, {plural(summary.message_count, 'message')} "
            f"in {len(summary.text):,} characters (mem.summary(...)):\n"
        )
        for line in _trim(summary.text, lines=6, width=96):
            out.write(f"  | {line}\n")
    else:
        out.write("A summary: none yet (a session needs more messages: run the demo longer)\n")
    direct = found.direct
    out.write(
        f'\nSearch across sessions and agents: mem.search("{found.query}", '
        f'user_id="{found.user}") ranks {plural(len(found.hits), "message")}; the '
        f"{plural(len(direct), 'message')} saying it {'is' if len(direct) == 1 else 'are'} in "
        f"{plural(len(found.hit_sessions), 'session')} ({', '.join(found.hit_sessions) or '-'}), "
        f"written by {plural(len(found.hit_agents), 'agent')}; a few:\n"
    )
    for hit in _spread(direct, 4):
        score = f"{hit.score:5.2f}" if hit.score is not None else "    -"
        out.write(
            f"  {score}  {hit.session_id:<8} {hit.agent_name or '?':<8} "
            f"{hit.message.role}: {_clip(hit.message.content, 60)}\n"
        )
    out.write(
        f"\nMemories learned about {found.user} (mem.memories, rule-based extraction in "
        f"the workers): {plural(len(found.memories), 'memory')}\n"
    )
    for hit in found.memories[:10]:
        record = hit.record
        out.write(
            f"  {record.kind:<12} {_clip(record.text, 56):<56}  "
            f"from {plural(len(record.sources), 'message')}\n"
        )


def _spread(hits: Sequence[Hit], count: int) -> list[Hit]:
    """Up to ``count`` hits, best first, one per (session, agent) before any repeat."""
    seen: set[tuple[str, str | None]] = set()
    first = []
    for hit in hits:
        if (hit.session_id, hit.agent_name) not in seen:
            seen.add((hit.session_id, hit.agent_name))
            first.append(hit)
    rest = [h for h in hits if h not in first]
    return (first + rest)[:count]


def _trim(text: str, *, lines: int, width: int) -> list[str]:
    out = [_clip(line, width) for line in text.splitlines() if line.strip()]
    if len(out) > lines:
        out = [*out[: lines - 1], f"... ({len(out) - lines + 1} more lines)"]
    return out


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def commands(
    *,
    url: str,
    queue_url: str | None,
    namespace: str,
    user: str,
    session: str,
    query: str,
) -> list[str]:
    """The CLI commands that look at the kept data (a URL holding a password
    is left out: the commands then read $REDISMEM_URL)."""
    flags = []
    if urlsplit(url).password is None:
        flags += ["--url", url]
    if queue_url is not None and urlsplit(queue_url).password is None:
        flags += ["--queue-url", queue_url]
    flags += ["--namespace", namespace]
    tail = " ".join(shlex.quote(f) for f in flags)
    u = shlex.quote(user)
    return [
        f"redismem users {tail}",
        f"redismem search {shlex.quote(query)} --user {u} {tail}",
        f"redismem memories --user {u} {tail}",
        f"redismem inspect {shlex.quote(session)} --user {u} {tail}",
        f"redismem sessions --user {u} {tail}",
    ]
