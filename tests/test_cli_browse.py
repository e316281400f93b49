"""Browsing memory with the ``redismem`` command, as real processes: users
and namespaces found by SCAN, search over what a real worker indexed,
``--json`` on every read command, human units, suggestions for mistyped
commands, ``worker --check`` of a worker that never existed, the worker's
start-up line and its health records at DEBUG, and help with examples."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import shlex
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_cli_worker import CliWorkers, cli_env, drop_keys, run_cli

from redismem import Memory
from redismem.cli import build_parser
from redismem.cli.units import ago, duration, size, until

# Every test runs the CLI (a few seconds a process on a loaded machine).
pytestmark = [pytest.mark.processes, pytest.mark.timeout(300)]

#: Ids escaped in keys (space, ':', braces, non-ASCII): listed as written.
ODD_USER = "ana maria:{x}/é"


async def _write(url: str, namespace: str, queue: str | None = None) -> None:
    options: dict[str, Any] = {"queue_name": queue} if queue else {}
    async with await Memory.connect(url, namespace=namespace, **options) as memory:
        await memory.write(
            [
                {"role": "user", "content": "Book me a flight to Lisbon in May"},
                {"role": "assistant", "content": "Looking at flights to Lisbon for May"},
            ],
            session_id="trip-1",
            user_id="alice",
            agent_name="planner",
            tags={"topic": "travel"},
        )
        await memory.write(
            [{"role": "user", "content": "I drink green tea every morning"}],
            session_id="chat/2",
            user_id="alice",
            agent_name="concierge",
        )
        await memory.write([{"role": "user", "content": "hello"}], session_id="s", user_id=ODD_USER)


def _json(result: Any) -> Any:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def test_users_and_namespaces_list_what_a_test_wrote_in_its_own_namespace(
    redis_url: str, namespace: str
) -> None:
    other = f"{namespace}-b"
    env = cli_env(redis_url, namespace)

    async def write_other() -> None:
        async with await Memory.connect(redis_url, namespace=other) as memory:
            await memory.write([{"role": "user", "content": "hi"}], session_id="x", user_id="zed")

    try:
        asyncio.run(_write(redis_url, namespace))
        asyncio.run(write_other())
        listed = run_cli("users", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        document = _json(listed)
        assert document["namespace"] == namespace
        users = {u["user_id"]: u for u in document["users"]}
        assert set(users) == {"alice", ODD_USER}  # not zed: another namespace
        assert users["alice"]["sessions"] == 2 and users[ODD_USER]["sessions"] == 1
        assert re.match(r"\d{4}-\d\d-\d\dT", users["alice"]["last_activity"])
        # The newest activity first (the odd user wrote last, but the two
        # writes may share a timestamp: then the ids decide).
        order = [
            (-datetime.fromisoformat(u["last_activity"]).timestamp(), u["user_id"])
            for u in document["users"]
        ]
        assert order == sorted(order)
        assert users[ODD_USER]["last_activity"] >= users["alice"]["last_activity"]

        human = run_cli("users", env=env)
        assert human.returncode == 0, human.stderr
        assert ODD_USER in human.stdout and "zed" not in human.stdout
        assert re.search(r"^alice\s+2\s+(\d+s ago|just now)$", human.stdout, re.M), human.stdout
        assert "2 users" in human.stdout

        spaces = _json(run_cli("namespaces", "--json", env=env))["namespaces"]
        counts = {n["namespace"]: n["users"] for n in spaces}
        assert counts[namespace] == 2 and counts[other] == 1

        empty = run_cli("users", "--namespace", f"{namespace}-none", env=env)
        assert empty.returncode == 0 and "no users in namespace" in empty.stdout
    finally:
        drop_keys(redis_url, namespace)


def test_search_finds_what_a_real_worker_indexed_with_filters_and_json(
    redis_url: str, namespace: str
) -> None:
    env = cli_env(redis_url, namespace)
    try:
        asyncio.run(_write(redis_url, namespace, env["REDISMEM_QUEUE_NAME"]))
        burst = run_cli("worker", "--burst", env=env, timeout=90)
        assert burst.returncode == 0, burst.stderr

        found = run_cli("search", "lisbon", "--user", "alice", "--json", env=env)
        assert found.returncode == 0, found.stderr
        document = _json(found)
        assert document["query"] == "lisbon" and document["user_id"] == "alice"
        hits = document["hits"]
        assert {h["role"] for h in hits} == {"user", "assistant"}
        first = hits[0]
        assert set(first) == {
            "session_id",
            "agent_name",
            "role",
            "name",
            "message_id",
            "content",
            "created_at",
            "score",
            "tags",
        }
        assert first["session_id"] == "trip-1" and first["agent_name"] == "planner"
        assert first["tags"] == {"topic": "travel"} and first["score"] > 0
        assert "Lisbon" in first["content"]

        human = run_cli("search", "lisbon", "--user", "alice", env=env)
        assert human.returncode == 0, human.stderr
        header = human.stdout.splitlines()[0].split()
        assert header == ["when", "session", "agent", "role", "score", "text"]
        assert re.search(
            r"(\d+s ago|just now)\s+trip-1\s+planner\s+user\s+\d\.\d\d\s+Book me", human.stdout
        )

        # Across sessions and agents; filters narrow it.
        searches = {
            ("tea", "--session", "chat/2"): [("chat/2", "concierge", "user")],
            ("lisbon", "--agent", "concierge"): [],
            ("lisbon", "--tag", "topic=travel", "--role", "assistant"): [
                ("trip-1", "planner", "assistant")
            ],
        }
        for args, expected in searches.items():
            narrowed = _json(run_cli("search", *args, "--user", "alice", "--json", env=env))
            got = [(h["session_id"], h["agent_name"], h["role"]) for h in narrowed["hits"]]
            assert got == expected, args

        nothing = run_cli("search", "lisbon", "--user", "bob", env=env)
        assert nothing.returncode == 0 and "no hits" in nothing.stdout
        bad = run_cli("search", "x", "--user", "alice", "--tag", "topic", env=env)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1
        assert bad.stderr.startswith("redismem: --tag 'topic' is not KEY=VALUE (hint: ")
    finally:
        drop_keys(redis_url, namespace)


def test_every_read_command_prints_one_json_document(redis_url: str, namespace: str) -> None:
    env = cli_env(redis_url, namespace)
    try:
        asyncio.run(_write(redis_url, namespace))
        commands = {
            "users": (["users", "--json"], {"namespace", "users"}, 0),
            "namespaces": (["namespaces", "--json"], {"namespaces"}, 0),
            "search": (["search", "flight", "--user", "alice", "--json"], {"hits"}, 0),
            "sessions": (["sessions", "--user", "alice", "--json"], {"sessions"}, 0),
            "memories": (["memories", "--user", "alice", "--json"], {"memories"}, 0),
            "inspect": (["inspect", "trip-1", "--user", "alice", "--json"], {"messages"}, 0),
            "stats": (["stats", "--json"], {"counters", "workers", "jobs_queued"}, 0),
            "worker --check": (["worker", "--check", "--json"], {"healthy", "workers"}, 1),
        }
        documents = {}
        for name, (args, keys, code) in commands.items():
            result = run_cli(*args, env=env)
            assert result.returncode == code, (name, result.stderr)
            documents[name] = _json(result)
            assert keys <= set(documents[name]), (name, documents[name])

        documented = documented_json_keys()
        assert set(documented) == set(commands)
        for name, document in documents.items():
            assert set(document) == documented[name], name

        sessions = documents["sessions"]["sessions"]
        trip = next(s for s in sessions if s["session_id"] == "trip-1")
        assert trip["message_count"] == 2 and trip["tags"] == {"topic": "travel"}
        inspect = documents["inspect"]
        assert [m["role"] for m in inspect["messages"]] == ["user", "assistant"]
        assert inspect["ttl_s"] > 0 and inspect["bytes"] > 0 and inspect["summary"] is None
    finally:
        drop_keys(redis_url, namespace)


def test_human_units_in_sessions_and_inspect(redis_url: str, namespace: str) -> None:
    env = cli_env(redis_url, namespace)

    async def write() -> None:
        async with await Memory.connect(
            redis_url, namespace=namespace, ttl=7 * 86400 + 3 * 3600 + 60
        ) as memory:
            await memory.write([{"role": "user", "content": "hi"}], session_id="s", user_id="u")

    try:
        asyncio.run(write())
        listed = run_cli("sessions", "--user", "u", env=env)
        assert listed.returncode == 0, listed.stderr
        assert re.search(
            r"^s\s+1\s+\d+\s+-\s+(\d+s ago|just now)\s+in 7d \d+h$", listed.stdout, re.M
        ), listed.stdout
        inspect = run_cli("inspect", "s", "--user", "u", env=env)
        assert re.search(r"^ttl\s+7d \d+h$", inspect.stdout, re.M), inspect.stdout
        assert re.search(r"^size\s+\d+(\.\d)? (B|KB)$", inspect.stdout, re.M), inspect.stdout
        assert not re.search(r"\d+min|\d+ s$", inspect.stdout + listed.stdout, re.M)
    finally:
        drop_keys(redis_url, namespace)


def test_the_units_helper() -> None:
    assert [duration(s) for s in (0.12, 45, 125, 7980, 7 * 86400 + 3 * 3600 + 100)] == [
        "120ms",
        "45s",
        "2m 5s",
        "2h 13m",
        "7d 3h",
    ]
    assert [duration(s) for s in (60, 3600, 86399)] == ["1m", "1h", "1d"]
    assert [size(n) for n in (512, 1250, 5 * 1024 * 1024)] == ["512 B", "1.2 KB", "5.0 MB"]
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert ago(now - timedelta(hours=2, minutes=13), now) == "2h 13m ago"
    assert until(now + timedelta(seconds=45), now) == "in 45s"
    assert (ago(None), until(None)) == ("-", "never")


@pytest.mark.parametrize("typed, meant", [("serach", "search"), ("user", "users")])
def test_a_mistyped_command_gets_one_line_with_a_suggestion(typed: str, meant: str) -> None:
    result = run_cli(typed, "--user", "alice", env=cli_env("redis://127.0.0.1:1/0", "x"))
    assert result.returncode == 2
    assert result.stderr == (
        f"redismem: no command {typed!r} (hint: did you mean {meant!r}? "
        "redismem --help lists the commands)\n"
    )


def test_an_unknown_command_lists_the_commands() -> None:
    unknown = run_cli("zzzz", env=cli_env("redis://127.0.0.1:1/0", "x"))
    assert unknown.returncode == 2 and "the commands are demo, " in unknown.stderr


def test_worker_check_of_a_worker_that_never_existed(redis_url: str, namespace: str) -> None:
    env = cli_env(redis_url, namespace)
    result = run_cli("worker", "--check", "nope", env=env)
    assert result.returncode == 1
    assert result.stdout.startswith("worker nope: never registered on this queue")
    assert "STALE" not in result.stdout
    document = _json(run_cli("worker", "--check", "nope", "--json", env=env))
    assert document["healthy"] is False
    unknown = dict.fromkeys(("seen_ago_s", "record", "summarizer", "extractor"))
    unknown |= dict.fromkeys(("consolidator", "embedder"))
    assert document["workers"] == [
        {"name": "nope", "healthy": False, "registered": False, "namespaces": [], **unknown}
    ]


def test_worker_names_its_plugins_at_start_and_records_health_at_debug(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    env = cli_env(
        redis_url,
        namespace,
        REDISMEM_EXTRACTOR="rules",
        REDISMEM_EMBEDDER="hashing",
    )
    workers = CliWorkers(tmp_path / "logs")
    quiet = workers.start(env, name=f"{namespace}-info")
    loud = workers.start(env, "-v", name=f"{namespace}-debug")
    try:
        deadline = time.monotonic() + 60
        startup = re.compile(
            rf"INFO redismem\.workers\.run: worker {quiet.name} on queue "
            rf"'redismem/queue-{namespace}', sweeping namespace {namespace}: "
            r"summarizer keypoints, extractor rules, consolidator off, embedder hashing \("
        )
        while not startup.search(quiet.log()):
            assert time.monotonic() < deadline and quiet.alive, workers.logs()
            time.sleep(0.3)

        async def keep_writing() -> None:
            # Jobs change arq's health record, which it logs ("recording health").
            async with await Memory.connect(
                redis_url, namespace=namespace, queue_name=env["REDISMEM_QUEUE_NAME"]
            ) as memory:
                i = 0
                while "recording health" not in loud.log():
                    assert time.monotonic() < deadline + 30, workers.logs()
                    await memory.write(
                        [{"role": "user", "content": f"note {i}"}], session_id="s", user_id="u"
                    )
                    i += 1
                    await asyncio.sleep(0.5)

        asyncio.run(keep_writing())
        assert re.search(r"DEBUG arq\.worker: recording health", loud.log()), loud.log()
        assert "recording health" not in quiet.log(), quiet.log()
        assert "INFO arq.worker: recording health" not in loud.log()
    finally:
        workers.close()
        drop_keys(redis_url, namespace)


def test_every_command_has_a_description_and_examples() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = dict(sub.choices)  # type: ignore[arg-type]
    keys = commands["keys"]
    keys_sub = next(a for a in keys._actions if a.dest == "keys_command")
    commands.update({f"keys {n}": p for n, p in keys_sub.choices.items()})  # type: ignore[union-attr]
    for name, command in commands.items():
        text = command.format_help()
        assert command.description, name
        assert "examples:\n  redismem " in text, (name, text)
    shown = run_cli("search", "--help", env=cli_env("redis://127.0.0.1:1/0", "x")).stdout
    assert 'examples:\n  redismem search "flight to Lisbon" --user alice\n' in shown, shown
    worker = run_cli("worker", "--help", env=cli_env("redis://127.0.0.1:1/0", "x")).stdout
    assert "examples:\n  redismem worker " in worker
    assert "summarization worker" not in worker
    for does in ("index new messages", "running summary", "extract lasting memories"):
        assert does in " ".join(worker.split()), does


# -- docs/cli.md ---------------------------------------------------------------------

CLI_DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def documented_json_keys() -> dict[str, set[str]]:
    """docs/cli.md's table of ``--json`` keys: command -> top-level keys."""
    found = {}
    text = CLI_DOC.read_text(encoding="utf-8")
    table = text.split("| command | top-level keys |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    for line in table.splitlines():
        match = re.fullmatch(r"\| `([a-z -]+)` \| (.+) \|", line)
        assert match, line
        top = re.sub(r"\([^)]*\)", "", match.group(2))  # nested keys left out
        top = top.split(";")[0]  # "with --history: ..." is another shape
        found[match.group(1)] = set(re.findall(r"`([a-z_]+)`", top))
    return found


def test_the_documented_commands_parse() -> None:
    parser = build_parser()
    text = CLI_DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    commands = [
        re.sub(r"^([A-Z_]+=\S+ )+", "", line.split("|")[0].split("#")[0]).strip()
        for line in lines
        if "redismem " in line
    ]
    assert len(commands) > 15
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "redismem", command
        parser.parse_args(words[1:])  # exits (fails the test) on a bad command


def test_user_root_patterns_match_each_user_once_in_any_epoch() -> None:
    from redismem.core.keys import KeyLayout, namespace_of

    layout = KeyLayout("ns")
    roots = [layout.sessions(ODD_USER), layout.sessions("bob", 1700000000000)]
    roots += [layout.recall("carol").i_meta, layout.store("dave").refs]
    for key in roots:
        assert any(fnmatch.fnmatchcase(key, p) for p in layout.user_root_patterns()), key
        assert namespace_of(key.encode()) == "ns"
    assert [layout.parse_user_root(k) for k in roots] == [ODD_USER, "bob", "carol", "dave"]
    others = [
        layout.session("bob", "sessions", 0).msgs,  # a session named "sessions"
        layout.guard("bob"),
        layout.pending("bob"),
        "ns:{u:bob}:x:sessions",
        "other:{u:%zz}:sessions",
        "ns:{lg:t}:ids",
    ]
    assert [layout.parse_user_root(k) for k in others] == [None] * len(others)
    assert namespace_of("nope") is None and namespace_of("a b:{u:x}:sessions") is None
