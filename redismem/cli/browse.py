"""Finding your way in: ``redismem namespaces``, ``redismem users``,
``redismem search`` (recall over a user's sessions) and ``redismem browse``
(the terminal browser, ``redismem.cli.tui``, over the same data).

Users and namespaces are found by SCAN over the key layout (never KEYS):
the patterns and the parsing of what they match are ``redismem.core.keys``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from typing import Any

from redismem.cli.common import (
    CliError,
    add_connection_args,
    add_json,
    add_verbose,
    command_parser,
    connect,
    emit_json,
    iso,
    positive,
    table,
)
from redismem.cli.rows import HIT_COLUMNS, hit_row, user_activity
from redismem.cli.units import ago
from redismem.core.keys import KeyLayout, namespace_of, namespace_root_patterns
from redismem.models import ROLES, Hit

__all__ = ["BROWSE_EXTRA_MISSING", "add_commands"]

#: What ``redismem browse`` prints (exit 2) where Textual is not installed.
BROWSE_EXTRA_MISSING = "redismem browse needs the 'browse' extra: pip install 'redismem[browse]'"


def add_commands(sub: Any) -> None:
    namespaces = command_parser(
        sub,
        "namespaces",
        "the namespaces holding users on this Redis",
        "Every namespace of this Redis database that holds user data, with its number of "
        "users (found by SCAN; nothing is changed).",
        ["redismem namespaces", "redismem namespaces --url redis://localhost:6379/0 --json"],
    )
    add_connection_args(namespaces, namespace=False)
    add_json(namespaces)
    add_verbose(namespaces)
    namespaces.set_defaults(run=lambda a: asyncio.run(_namespaces(a)))

    users = command_parser(
        sub,
        "users",
        "the users of a namespace, with their live sessions and last activity",
        "Every user of the namespace holding data (sessions, indexed messages or memories), "
        "most recently active first, with their live sessions. Found by SCAN over the key "
        "layout; nothing is changed.",
        [
            "redismem users",
            "redismem users --namespace demo-1a2b3c",
            "redismem users --json | jq -r '.users[].user_id'",
        ],
    )
    add_connection_args(users)
    add_json(users)
    add_verbose(users)
    users.set_defaults(run=lambda a: asyncio.run(_users(a)))

    search = command_parser(
        sub,
        "search",
        "search a user's messages across sessions and agents (recall)",
        "Keyword (and, with an embedder, vector) search over what the workers indexed of one "
        "user's sessions, best first: every session and agent of the user, summarized "
        "messages included. Narrow it with --session, --agent, --tag, --role.",
        [
            'redismem search "flight to Lisbon" --user alice',
            'redismem search "budget" --user alice --agent planner --tag topic=travel --limit 5',
            'redismem search "refund" --user bob --session conv-7 --json',
        ],
    )
    add_connection_args(search)
    search.add_argument("query", help="what to look for (keywords)")
    search.add_argument("--user", required=True, help="user id")
    search.add_argument("--session", help="only this session")
    search.add_argument("--agent", help="only messages this agent wrote")
    search.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only messages written with this tag (repeat for more: all must match)",
    )
    search.add_argument(
        "--role", action="append", choices=ROLES, help="only this role (repeat for more)"
    )
    search.add_argument("--limit", type=positive(int), default=10, help="hits to show (10)")
    add_json(search)
    add_verbose(search)
    search.set_defaults(run=lambda a: asyncio.run(_search(a)))

    browse = command_parser(
        sub,
        "browse",
        "a terminal browser: users, sessions, messages, summaries, memories, search",
        "Browse a namespace in the terminal: its users, a user's sessions, a session's "
        "messages and summary, the user's memories, and search over the user's messages. "
        "Read-only: browsing never slides a session's TTL. Keys: arrows and enter to go in, "
        "escape or backspace to go back, / to search, q to quit. Needs the 'browse' extra "
        "(pip install 'redismem[browse]').",
        [
            "redismem browse",
            "redismem browse --namespace demo-1a2b3c --user user-0",
        ],
    )
    add_connection_args(browse)
    browse.add_argument("--user", help="start at this user's sessions")
    add_verbose(browse)
    browse.set_defaults(run=lambda a: asyncio.run(_browse(a)))


# -- namespaces and users --------------------------------------------------------


async def _namespaces(args: argparse.Namespace) -> int:
    async with await connect(args, refresh_ttl_on_read=False) as memory:
        found: dict[str, set[str]] = defaultdict(set)
        for pattern in namespace_root_patterns():
            async for key in memory.redis.scan_iter(match=pattern, count=1000):
                namespace = namespace_of(key)
                if namespace is not None:
                    user = KeyLayout(namespace).parse_user_root(key)
                    found[namespace].add(str(user))
    listed = [{"namespace": ns, "users": len(found[ns])} for ns in sorted(found)]
    if args.json:
        emit_json({"namespaces": listed})
        return 0
    if not listed:
        print("no namespace holds users on this Redis")
        return 0
    print(table([(n["namespace"], n["users"]) for n in listed], ["namespace", "users"]))
    print("\nredismem users --namespace NS lists the users of one")
    return 0


async def _users(args: argparse.Namespace) -> int:
    async with await connect(args, refresh_ttl_on_read=False) as memory:
        rows = await user_activity(memory)
    namespace = memory.layout.namespace
    if args.json:
        emit_json(
            {
                "namespace": namespace,
                "users": [
                    {"user_id": u, "sessions": n, "last_activity": iso(last)} for u, n, last in rows
                ],
            }
        )
        return 0
    if not rows:
        print(
            f"no users in namespace {namespace!r} "
            "(redismem namespaces lists the namespaces holding some)"
        )
        return 0
    print(f"namespace {namespace}: {len(rows)} user{'s' if len(rows) != 1 else ''}")
    print(table([(u, n, ago(last)) for u, n, last in rows], ["user", "sessions", "last active"]))
    print("\nredismem sessions --user USER lists one's sessions; redismem search QUERY --user USER")
    return 0


# -- search ------------------------------------------------------------------------


def _tags(pairs: list[str]) -> dict[str, str] | None:
    tags = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"--tag {pair!r} is not KEY=VALUE", "e.g. --tag topic=travel")
        tags[key] = value
    return tags or None


def _hit(hit: Hit) -> dict[str, Any]:
    return {
        "session_id": hit.session_id,
        "agent_name": hit.agent_name,
        "role": hit.message.role,
        "name": hit.message.name,
        "message_id": hit.message.id,
        "content": hit.message.content,
        "created_at": iso(hit.created_at),
        "score": hit.score,
        "tags": hit.tags,
    }


async def _search(args: argparse.Namespace) -> int:
    tags = _tags(args.tag)
    async with await connect(args, refresh_ttl_on_read=False) as memory:
        hits = await memory.search(
            args.query,
            user_id=args.user,
            session_id=args.session,
            agent_name=args.agent,
            tags=tags,
            roles=args.role,
            limit=args.limit,
        )
    namespace = memory.layout.namespace
    if args.json:
        emit_json(
            {
                "namespace": namespace,
                "user_id": args.user,
                "query": args.query,
                "hits": [_hit(h) for h in hits],
            }
        )
        return 0
    if not hits:
        print(
            f"no hits for {args.query!r} in the messages of user {args.user!r} "
            f"(namespace {namespace!r}). Search covers what the workers indexed: "
            "is one running? (redismem worker --check)"
        )
        return 0
    print(table([hit_row(h) for h in hits], list(HIT_COLUMNS)))
    print(f"\nredismem inspect SESSION --user {args.user} shows a session")
    return 0


# -- browse ------------------------------------------------------------------------


async def _browse(args: argparse.Namespace) -> int:
    try:
        from redismem.cli.tui import BrowseApp
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "textual":
            raise
        print(BROWSE_EXTRA_MISSING, file=sys.stderr)
        return 2
    # Read-only: no read slides a session's TTL (BrowseApp refuses a Memory
    # that would).
    async with await connect(args, refresh_ttl_on_read=False) as memory:
        await BrowseApp(memory, user=args.user).run_async()
    return 0
