"""Browsing one user: ``redismem sessions``, ``redismem inspect`` (one
session) and ``redismem memories`` (what the workers learned)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import redis.exceptions as rexc

from redismem.cli.common import (
    add_connection_args,
    add_json,
    add_verbose,
    clip,
    command_parser,
    connect,
    emit_json,
    iso,
    positive,
    preview,
    table,
)
from redismem.cli.units import ago, duration, size, until
from redismem.core.guard import current_epoch
from redismem.models import SessionInfo

__all__ = ["add_commands"]


def add_commands(sub: Any) -> None:
    sessions = command_parser(
        sub,
        "sessions",
        "a user's live sessions",
        "The live sessions of one user: messages and tokens stored, tags, last access and "
        "when each expires. redismem users lists the users.",
        [
            "redismem sessions --user alice",
            "redismem sessions --user alice --namespace demo-1a2b3c --json",
        ],
    )
    add_connection_args(sessions)
    sessions.add_argument("--user", default="default", help="user id (default 'default')")
    add_json(sessions)
    add_verbose(sessions)
    sessions.set_defaults(run=lambda a: asyncio.run(_sessions(a)))

    memories = command_parser(
        sub,
        "memories",
        "a user's long-term memories (facts, preferences, goals...)",
        "The memories of one user (what the workers' extractor learned, or what was added "
        "with mem.memories.add), newest first or ranked by a keyword query; --history shows "
        "every state of one record.",
        [
            "redismem memories --user alice",
            'redismem memories "tea" --user alice --status any',
            "redismem memories --user alice --history m-01HX... --json",
        ],
    )
    add_connection_args(memories)
    memories.add_argument("query", nargs="?", help="keyword query (default: newest first)")
    memories.add_argument("--user", default="default", help="user id (default 'default')")
    memories.add_argument(
        "--status",
        choices=("active", "superseded", "deleted", "any"),
        default="active",
        help="which records (default active)",
    )
    memories.add_argument("--limit", type=positive(int), default=20, help="records to show")
    memories.add_argument("--history", metavar="ID", help="every state of one record")
    add_json(memories)
    add_verbose(memories)
    memories.set_defaults(run=lambda a: asyncio.run(_memories(a)))

    inspect = command_parser(
        sub,
        "inspect",
        "one session in detail: counters, summary, last messages",
        "One session of a user: when it was made and last used, what it stores (messages, "
        "tokens, bytes), its TTL and tags, whether a summary is due, the running summary, "
        "and its last messages.",
        [
            "redismem inspect conv-0 --user user-0",
            "redismem inspect conv-0 --user user-0 --last 30",
            "redismem inspect conv-0 --user user-0 --json | jq .summary.text",
        ],
    )
    add_connection_args(inspect)
    inspect.add_argument("session", help="session id (redismem sessions --user U lists them)")
    inspect.add_argument("--user", default="default", help="user id (default 'default')")
    inspect.add_argument("--last", type=positive(int), default=10, help="messages to show")
    add_json(inspect)
    add_verbose(inspect)
    inspect.set_defaults(run=lambda a: asyncio.run(_inspect(a)))


def _session(s: SessionInfo) -> dict[str, Any]:
    return {
        "session_id": s.session_id,
        "message_count": s.message_count,
        "token_count": s.token_count,
        "tags": s.tags,
        "created_at": iso(s.created_at),
        "accessed_at": iso(s.accessed_at),
        "expires_at": iso(s.expires_at),
    }


async def _sessions(args: argparse.Namespace) -> int:
    async with await connect(args, refresh_ttl_on_read=False) as memory:
        sessions = await memory.sessions(user_id=args.user)
    namespace = memory.layout.namespace
    if args.json:
        emit_json(
            {
                "namespace": namespace,
                "user_id": args.user,
                "sessions": [_session(s) for s in sessions],
            }
        )
        return 0
    if not sessions:
        print(
            f"no live sessions for user {args.user!r} in namespace {namespace!r} "
            f"(redismem users --namespace {namespace} lists its users)"
        )
        return 0
    rows = [
        (
            s.session_id,
            s.message_count,
            s.token_count,
            ", ".join(f"{k}={v}" for k, v in s.tags.items()) or "-",
            ago(s.accessed_at),
            until(s.expires_at),
        )
        for s in sessions
    ]
    print(table(rows, ["session", "messages", "tokens", "tags", "last access", "expires"]))
    print(f"\nredismem inspect SESSION --user {args.user} shows one of them")
    return 0


async def _memories(args: argparse.Namespace) -> int:
    async with await connect(args, refresh_ttl_on_read=False) as memory:
        namespace = memory.layout.namespace
        if args.history:
            changes = await memory.memories.history(user_id=args.user, memory_id=args.history)
            if args.json:
                emit_json(
                    {
                        "namespace": namespace,
                        "user_id": args.user,
                        "memory_id": args.history,
                        "changes": [c.model_dump(mode="json") for c in changes],
                    }
                )
                return 0 if changes else 1
            if not changes:
                print(
                    f"no memory {args.history!r} for user {args.user!r} "
                    f"(redismem memories --user {args.user} lists them)"
                )
                return 1
            changed = [
                (
                    c.version,
                    ago(c.at),
                    c.change,
                    c.record.status if c.record else "-",
                    clip(c.record.text if c.record else "", 60),
                    clip(c.reason, 40) or "-",
                )
                for c in changes
            ]
            print(table(changed, ["version", "when", "change", "status", "text", "reason"]))
            return 0
        hits = await memory.memories.search(
            user_id=args.user, query=args.query, status=args.status, limit=args.limit
        )
    if args.json:
        emit_json(
            {
                "namespace": namespace,
                "user_id": args.user,
                "query": args.query,
                "memories": [{**h.record.model_dump(mode="json"), "score": h.score} for h in hits],
            }
        )
        return 0
    if not hits:
        print(f"no {args.status} memories for user {args.user!r} in namespace {namespace!r}")
        return 0
    rows = [
        (
            h.record.id,
            h.record.kind,
            h.record.status,
            clip(h.record.text, 60),
            len(h.record.sources),
            ago(h.record.updated_at) if h.record.updated_at else "-",
        )
        for h in hits
    ]
    print(table(rows, ["id", "kind", "status", "text", "sources", "updated"]))
    print(f"\nredismem memories --user {args.user} --history ID shows how one changed")
    return 0


async def _inspect(args: argparse.Namespace) -> int:
    async with await connect(args, refresh_ttl_on_read=False) as memory:
        namespace = memory.layout.namespace
        found = [
            s for s in await memory.sessions(user_id=args.user) if s.session_id == args.session
        ]
        if not found:
            if args.json:
                emit_json({"namespace": namespace, "user_id": args.user, "session": None})
                return 1
            print(
                f"no live session {args.session!r} for user {args.user!r} "
                f"(redismem sessions --user {args.user} lists them)"
            )
            return 1
        info = found[0]
        epoch = await current_epoch(memory.backend, args.user)
        keys = memory.layout.session(args.user, args.session, epoch)
        ttl_ms = await memory.redis.pttl(keys.meta)
        pending = await memory.redis.zscore(keys.pending, args.session)
        stored = await _bytes(memory.redis, [keys.msgs, keys.entries, keys.meta, keys.summary])
        summary = await memory.summary(session_id=args.session, user_id=args.user)
        messages = await memory.read(session_id=args.session, user_id=args.user, limit=args.last)
    ttl_s = None if ttl_ms < 0 else ttl_ms / 1000
    if args.json:
        emit_json(
            {
                "namespace": namespace,
                "user_id": args.user,
                "session": _session(info),
                "ttl_s": ttl_s,
                "bytes": stored,
                "pending_summarization": pending is not None,
                "summary": None
                if summary is None
                else {
                    "text": summary.text,
                    "message_count": summary.message_count,
                    "summarized_until": summary.summarized_until,
                    "updated_at": iso(summary.updated_at),
                },
                "messages": [
                    {
                        "id": m.id,
                        "role": m.role,
                        "name": m.name,
                        "content": m.content,
                        "created_at": iso(m.created_at),
                    }
                    for m in messages
                ],
            }
        )
        return 0
    rows = [
        ("user / session", f"{info.user_id} / {info.session_id}"),
        ("created", f"{info.created_at.isoformat(timespec='seconds')} ({ago(info.created_at)})"),
        ("last access", ago(info.accessed_at)),
        ("messages stored", info.message_count),
        ("tokens stored", info.token_count),
        ("size", "-" if stored is None else size(stored)),
        ("ttl", "none" if ttl_s is None else duration(ttl_s)),
        ("tags", ", ".join(f"{k}={v}" for k, v in info.tags.items()) or "-"),
        ("pending summarization", "yes" if pending is not None else "no"),
        (
            "summary covers",
            f"{summary.message_count} messages (until {summary.summarized_until})"
            if summary
            else "-",
        ),
    ]
    print(table(rows, ["field", "value"]))
    if summary:
        print(f"\nsummary (updated {ago(summary.updated_at)}):\n{summary.text}")
    print(f"\nlast {len(messages)} messages")
    print(
        table(
            [(m.id, m.role, preview(m)) for m in messages],
            ["id", "role", "content"],
        )
    )
    return 0


async def _bytes(redis: Any, keys: list[str]) -> int | None:
    """What ``keys`` take in Redis (``MEMORY USAGE``), None where the server
    does not say."""
    total = 0
    try:
        for key in keys:
            total += int(await redis.memory_usage(key) or 0)
    except (rexc.ResponseError, TypeError, ValueError):
        return None
    return total
