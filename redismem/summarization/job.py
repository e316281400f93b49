"""One summarization pass over a session, safe to run twice or to kill midway.

A pass reads the backlog after the summary watermark and before the recent
window (never ending between an assistant tool call and its results), asks
the summarizer for the new summary, and commits with compare-and-set on the
watermark and the session's incarnation: new summary, advanced watermark and
(with ``compact``) removal of exactly the summarized messages, in one script.
Nothing is written before that script runs, so a pass that dies or fails
leaves the session as it was, a second pass over the same backlog loses the
compare-and-set, and a pass over a session that was cleared or expired
meanwhile (even if written again) commits nothing. With indexing on, a pass
that compacts first indexes the messages it is about to remove.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from redismem.context.toolgroups import split_at_tool_boundary
from redismem.core import codec
from redismem.core.epochs import EpochMoved
from redismem.core.keys import SessionKeys, validate_id
from redismem.errors import SummarizerError
from redismem.recall import index as recall

if TYPE_CHECKING:
    from redismem.core.backend import Backend
    from redismem.core.scripts import PrepareResult
    from redismem.summarization.summarizers import Summarizer

__all__ = [
    "MAX_SUMMARY_CHARS",
    "SummarizeOutcome",
    "settle_pending",
    "split_at_tool_boundary",
    "summarize_pass",
]

#: Longest summary text accepted from a summarizer.
MAX_SUMMARY_CHARS = 32_000
#: Most messages handed to the summarizer in one pass.
DEFAULT_PASS_CAP = 400


@dataclass(frozen=True, slots=True)
class SummarizeOutcome:
    status: Literal["committed", "idle", "stale", "gone"]
    summarized: int = 0
    still_pending: bool = False
    lag_ms: int | None = None
    #: The session's write sequence and incarnation the pass read (for
    #: ``settle_pending``).
    seq: int = 0
    gen: str = ""


async def summarize_pass(
    backend: Backend,
    summarizer: Summarizer,
    *,
    user_id: str,
    session_id: str,
    keep_recent: int,
    batch: int,
    compact: bool = True,
    cap: int = DEFAULT_PASS_CAP,
    summarizer_timeout: float = 60.0,
) -> SummarizeOutcome:
    """Summarize the session's backlog once. Raises ``SummarizerError`` when the
    summarizer fails (exception, timeout, unusable output); the session is then
    unchanged."""
    sid = validate_id(session_id, "session_id")
    uid = validate_id(user_id, "user_id")

    async def read_at(keys: SessionKeys) -> tuple[SessionKeys, PrepareResult]:
        found = await backend.scripts.prepare(
            keys, session_id=sid, keep_recent=keep_recent, cap=cap
        )
        return keys, found

    # The pass reads the user's current epoch and commits to that epoch only.
    keys, read = await backend.in_session(uid, sid, read_at)
    if not read.seq:
        return SummarizeOutcome("gone")
    if not read.messages:
        return SummarizeOutcome("idle", seq=read.seq, gen=read.gen)
    first = read.first_seq
    last = read.last_seq
    created = codec.parse_covering(read.covering, keys.entries)
    messages = codec.decode_messages(read.messages, first, created, keys.msgs)
    count = last - first + 1
    todo = split_at_tool_boundary(
        messages[:count], messages[count] if len(messages) > count else None
    )
    if not todo:
        # Every cut would split an unfinished tool sequence: wait for its results.
        return SummarizeOutcome("idle", seq=read.seq, gen=read.gen)

    previous = codec.decode_summary(read.summary, keys.summary) if read.summary else None
    try:
        text = await asyncio.wait_for(
            summarizer.summarize(previous["text"] if previous else None, todo), summarizer_timeout
        )
    except TimeoutError as exc:
        raise SummarizerError(f"summarizer timed out after {summarizer_timeout}s") from exc
    except SummarizerError:
        raise
    except Exception as exc:
        raise SummarizerError(f"summarizer raised {exc!r}") from exc
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_SUMMARY_CHARS:
        raise SummarizerError(f"summarizer returned unusable output: {str(text)[:100]!r}")

    until = codec.seq_of(todo[-1].id or "0")
    if compact and 0 <= read.indexed_until < until:
        # Compaction removes only indexed messages: index the rest first
        # (the workers' jobs have done it already; other callers may not).
        await recall.catch_up(backend, user_id=uid, session_id=sid)
    total = (previous["message_count"] if previous else 0) + len(todo)
    now_ms = int(time.time() * 1000)
    blob = codec.encode_summary(text, total, until, now_ms)
    try:
        result = await backend.scripts.commit(
            keys,
            session_id=sid,
            read=read,
            until_seq=until,
            summarized=len(todo),
            summary=blob,
            compact=compact,
            keep_recent=keep_recent,
            batch=batch,
        )
    except EpochMoved:
        return SummarizeOutcome("gone")  # the user was cleared since the read
    if result.status == "gone":
        return SummarizeOutcome("gone")
    if result.status == "stale":
        return SummarizeOutcome("stale", still_pending=True)
    since = read.pending_since
    lag = now_ms - int(float(since)) if since else None
    return SummarizeOutcome("committed", len(todo), result.still_pending, lag, read.seq, read.gen)


async def settle_pending(
    backend: Backend, *, user_id: str, session_id: str, seq: int, gen: str
) -> bool:
    """Clear the pending mark after an idle or gone pass, unless a write
    arrived after the pass read ``seq`` of incarnation ``gen`` (that write's
    backlog keeps it)."""
    keys = backend.layout.session(user_id, session_id, backend.epochs.get(user_id))
    try:
        return await backend.scripts.settle(keys, session_id=session_id, seq=seq, gen=gen)
    except EpochMoved:
        return True  # the user was cleared: nothing of that epoch is pending
