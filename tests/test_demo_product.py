"""``redismem demo`` shows the whole product (issue 23, item 2): start-up
phases, progress counted from the first write, a sample summary, a search
across sessions and agents, the memories learned about a user, a verdict
with a check per feature, and (with ``--keep``) CLI commands that work."""

from __future__ import annotations

import json
import re
import shlex
from io import StringIO

import pytest
from test_cli_demo import demo_env
from test_cli_worker import drop_keys, run_cli

from redismem.demo.agent import PERSONAS, make_turn, pick_statement
from redismem.demo.report import Findings, judge, plural, verdict

SECTIONS = (
    "A summary: user-0 / conv-",
    'Search across sessions and agents: mem.search("peanuts", user_id="user-0")',
    "Memories learned about user-0",
    "redismem fleet demo report",
    "verdict",
)
CHECKS = ("nothing lost", "indexed once", "summaries", "memories", "cross-session search")
#: A count of one followed by a plural, or another count by a singular.
BAD_PLURALS = re.compile(
    r"(?<![\d.,])1 (?:messages|sessions|agents|workers|summaries|memories|users|hits)\b"
    r"|(?<![\d.,])(?:[02-9]|\d[\d,]+) (?:message|session|agent|worker|summary|memory|user)\b"
    r"(?! (?:process|task))"  # "2 agent processes"
)


def _namespace(stdout: str) -> str:
    found = re.search(r"ns (demo-[0-9a-f]+)", stdout)
    assert found, stdout
    return found.group(1)


def test_the_demo_shows_every_feature_and_the_commands_it_prints_work(redis_url: str) -> None:
    result = run_cli(
        *("demo", "--url", redis_url, "--agents", "2", "--workers", "1", "--sessions", "4"),
        *("--duration", "3", "--keep"),
        env=demo_env(),
        timeout=180,
    )
    namespace = _namespace(result.stdout)
    try:
        out = result.stdout
        assert result.returncode == 0, out + result.stderr
        for section in SECTIONS:
            assert section in out, f"missing {section!r}:\n{out}"
        # Start-up phases, then times counted from the start of the traffic.
        assert re.search(r"^\[\s*[\d.]+s\] starting 1 worker and 2 agents", out, re.M), out
        assert re.search(r"^\[\s*[\d.]+s\] ready: 1 worker registered, 2 agents", out, re.M)
        assert re.search(r"^\[\s*[\d.]+s\] traffic done after", out, re.M), out
        assert re.search(r"^\[\s*[\d.]+s\] workers caught up", out, re.M), out
        for check in CHECKS:
            assert re.search(rf"^  ok    {check} ", out, re.M), f"{check}:\n{out}"
        assert "FAIL" not in out
        assert "OK: no message lost, every message indexed once" in out
        assert not BAD_PLURALS.search(out), BAD_PLURALS.search(out)
        # The search shows messages of both sessions of user-0.
        shown = re.findall(r"^\s+[\d.]+\s+(conv-\d)\s+(agent-\d)\s+user: I'm allergic", out, re.M)
        assert {session for session, _ in shown} == {"conv-0", "conv-1"}, out
        # The printed commands, run as printed.
        printed = re.findall(r"^  (redismem \w+ .*)$", out, re.M)
        kinds = [shlex.split(line)[1] for line in printed]
        assert kinds == ["users", "search", "memories", "inspect", "sessions"], printed
        for line in printed:
            argv = shlex.split(line)
            assert argv[argv.index("--url") + 1] == redis_url
            assert argv[argv.index("--namespace") + 1] == namespace
            ran = run_cli(*argv[1:], env=demo_env(), timeout=60)
            assert ran.returncode == 0, (line, ran.stdout, ran.stderr)
            expected = {
                "users": ["user-0", "user-1"],
                "search": ["peanuts"],
                "memories": ["User is allergic to peanuts."],
                "inspect": ["user-0 / conv-0"],
                "sessions": ["conv-0", "conv-1"],
            }[argv[1]]
            for text in expected:
                assert text in ran.stdout, (line, ran.stdout)
            if argv[1] == "inspect":
                # The demo's sessions live 1 h (plus the sliding slack), even
                # after the report's own reads.
                ttl = json.loads(run_cli(*argv[1:], "--json", env=demo_env()).stdout)["ttl_s"]
                assert 0 < ttl <= 3600 * (1 + 1 / 32), ttl
    finally:
        drop_keys(redis_url, namespace)


def test_without_keep_the_data_goes_and_no_command_is_printed(redis_url: str) -> None:
    result = run_cli(
        *("demo", "--url", redis_url, "--agents", "1", "--workers", "1", "--sessions", "2"),
        *("--duration", "1"),
        env=demo_env(),
        timeout=120,
    )
    namespace = _namespace(result.stdout)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "The demo's data is removed now: run it with --keep" in result.stdout
        assert not re.search(r"^  redismem ", result.stdout, re.M), result.stdout
        assert "starting 1 worker and 1 agent " in result.stdout
        assert not BAD_PLURALS.search(result.stdout), BAD_PLURALS.search(result.stdout)
        check = run_cli(
            "sessions",
            "--url",
            redis_url,
            "--namespace",
            namespace,
            "--user",
            "user-0",
            env=demo_env(),
        )
        assert "no live sessions" in check.stdout, check.stdout
    finally:
        drop_keys(redis_url, namespace)  # nothing, unless the test failed


def test_the_demo_runs_on_the_embedded_backend_with_every_check() -> None:
    result = run_cli(
        *("demo", "--url", "memory://demo-test", "--agents", "2", "--workers", "1"),
        *("--sessions", "2", "--duration", "1"),
        env=demo_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for check in CHECKS:
        assert re.search(rf"^  ok    {check} ", result.stdout, re.M), result.stdout
    assert "2 agent tasks" in result.stdout


# -- the verdict and its words, without a server -------------------------------------------


def _findings(**changes: object) -> Findings:
    found = Findings(
        written={"user-0/conv-0": 40, "user-0/conv-1": 30},
        stored=24,
        summarized=46,
        indexed_docs=70,
        due_sessions=2,
        summaries=3,
        expected_memories=4,
        memories_added=6,
        user="user-0",
        query="peanuts",
        user_sessions=2,
        agents=2,
    )
    for name, value in changes.items():
        setattr(found, name, value)
    return found


def _hits(*where: tuple[str, str]) -> list[object]:
    from redismem.models import Hit, Message

    return [
        Hit(
            message=Message(role="user", content="I'm allergic to peanuts."),
            session_id=session,
            agent_name=agent,
            score=1.0,
        )
        for session, agent in where
    ]


def test_the_verdict_passes_when_every_feature_worked() -> None:
    found = _findings(hits=_hits(("conv-0", "agent-0"), ("conv-1", "agent-1")))
    out = StringIO()
    assert judge(verdict(found), out) == 0
    assert out.getvalue().strip().splitlines()[-1].startswith("OK: no message lost")


@pytest.mark.parametrize(
    "changes, failed, words",
    [
        ({"stored": 23}, "nothing lost", "1 message lost of 70 written"),
        ({"indexed_docs": 71}, "indexed once", "71 index documents for 70 messages"),
        ({"indexed_docs": 69, "unindexed": 1}, "indexed once", "1 not indexed yet"),
        ({"summaries": 0}, "summaries", "no summary made, though 2 sessions were due"),
        (
            {"missing_memories": ["user-0: User is vegetarian."]},
            "memories",
            "3 learned of the 4 memories",
        ),
        ({"expected_memories": 0}, "memories", "0 learned of the 0 memories"),
        ({"hits": "one session"}, "cross-session search", "in 1 session by 2 agents"),
        ({"hits": "one agent"}, "cross-session search", "in 2 sessions by 1 agent"),
        ({"drained": False}, "workers caught up", "still pending"),
    ],
)
def test_the_verdict_fails_naming_the_feature(
    changes: dict[str, object], failed: str, words: str
) -> None:
    changes = dict(changes)
    hits = {
        "one session": _hits(("conv-0", "agent-0"), ("conv-0", "agent-1")),
        "one agent": _hits(("conv-0", "agent-0"), ("conv-1", "agent-0")),
    }.get(str(changes.pop("hits", "")), _hits(("conv-0", "agent-0"), ("conv-1", "agent-1")))
    found = _findings(hits=hits, **changes)
    out = StringIO()
    assert judge(verdict(found), out) == 1
    text = out.getvalue()
    assert re.search(rf"^  FAIL  {failed} .*{re.escape(words)}", text, re.M), text
    assert re.search(rf"^FAIL: .*{re.escape(words)}", text, re.M), text
    assert "OK:" not in text
    assert len(re.findall(r"^  FAIL ", text, re.M)) == 1, text


def test_one_user_session_is_enough_for_the_search_check() -> None:
    found = _findings(user_sessions=1, hits=_hits(("conv-0", "agent-0"), ("conv-0", "agent-1")))
    check = next(c for c in verdict(found) if c.name == "cross-session search")
    assert check.ok and "pass --sessions 2 or more" in check.detail


@pytest.mark.parametrize(
    "count, word, expected",
    [
        (1, "session", "1 session"),
        (2, "session", "2 sessions"),
        (0, "summary", "0 summaries"),
        (1, "summary", "1 summary"),
        (3, "memory", "3 memories"),
        (2, "agent process", "2 agent processes"),
        (1, "agent process", "1 agent process"),
        (1234, "message", "1,234 messages"),
        (2, "day", "2 days"),
    ],
)
def test_plural(count: int, word: str, expected: str) -> None:
    assert plural(count, word) == expected


def test_every_persona_statement_teaches_the_memories_it_lists() -> None:
    """The verdict expects these memories: the rule extractor must find them."""
    import asyncio
    from datetime import UTC, datetime

    from redismem.longterm.extraction import RuleExtractor
    from redismem.models import Message

    async def learned(text: str) -> set[str]:
        message = Message(role="user", content=text, id="m", created_at=datetime.now(UTC))
        return {r.text for r in await RuleExtractor().extract([message], user_id="u")}

    for persona in PERSONAS:
        for statement, memories in persona.statements:
            assert set(memories) <= asyncio.run(learned(statement)), statement
        assert persona.query in persona.statements[0][0]
        others = [s for p in PERSONAS if p is not persona for s, _ in p.statements]
        assert not any(persona.query in s for s in others)


def test_a_turn_opens_with_a_statement_the_first_time_and_every_fourth_turn() -> None:
    import random

    rng = random.Random(1)
    persona = PERSONAS[0]
    assert pick_statement(rng, 5, persona, first=True) == 0
    assert pick_statement(rng, 5, persona, first=False) is None
    assert pick_statement(rng, 8, persona, first=False) is not None
    messages = make_turn(rng, 0, 5, persona, 0)
    assert messages[0]["content"].startswith(persona.statements[0][0] + " ")
    assert not any(s in make_turn(rng, 0, 6)[0]["content"] for s, _ in persona.statements)
