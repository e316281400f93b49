"""A scripted agent for the fleet demo: multi-turn conversations with tool calls.

Each agent process serves turns of shared sessions (several agents serve the
same session, as a horizontally scaled fleet would): it reads the session's
context, then writes the turn (user message, assistant tool call, tool result,
assistant answer) as one entry. Now and then the user says something about
themselves (``PERSONAS``: one per user), which the workers' rule extractor
turns into memories. It reports how many messages it wrote per session, what
each user said about themselves and its latencies as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

from redismem.client import Memory
from redismem.errors import RedisMemError

__all__ = [
    "GO",
    "PERSONAS",
    "READY",
    "SCENARIOS",
    "Persona",
    "make_turn",
    "persona_of",
    "pick_statement",
    "run_agent",
    "session_of",
]

SCENARIOS: list[dict[str, Any]] = [
    {
        "ask": "Can you check the weather in {city} for {day}?",
        "tool": "get_weather",
        "args": {"city": "{city}", "day": "{day}"},
        "result": '{{"city": "{city}", "forecast": "light rain", "high": 14}}',
        "answer": "We will plan for light rain in {city} on {day}; the high is 14 degrees.",
    },
    {
        "ask": "Please book a table for {n} at an Italian place near {city}.",
        "tool": "book_table",
        "args": {"city": "{city}", "people": "{n}", "cuisine": "italian"},
        "result": '{{"status": "confirmed", "restaurant": "Trattoria Sole", "time": "19:30"}}',
        "answer": "Booked: Trattoria Sole at 19:30 for {n}.",
    },
    {
        "ask": "Why does my deploy to {city}-cluster fail with exit code {n}?",
        "tool": "search_logs",
        "args": {"service": "{city}-cluster", "code": "{n}"},
        "result": '{{"matches": 3, "first": "ImportError: no module named msgpack"}}',
        "answer": "The logs show a missing msgpack dependency; we decided to pin it in pyproject.",
    },
    {
        "ask": "What's the status of order {n}? I ordered it on {day}.",
        "tool": "order_status",
        "args": {"order_id": "{n}"},
        "result": '{{"order": "{n}", "status": "shipped", "eta": "{day}"}}',
        "answer": "Order {n} has shipped and should arrive {day}.",
    },
]
CITIES = ["Lisbon", "Oslo", "Kyoto", "Québec", "Nairobi", "Zürich", "São Paulo"]
DAYS = ["Monday", "Tuesday", "Friday", "the weekend"]


@dataclass(frozen=True)
class Persona:
    """A user of the demo: what they say about themselves now and then (each
    statement with the memories the rule extractor learns from it), and a
    word of the first statement, which no other message holds, to search
    their sessions for."""

    statements: tuple[tuple[str, tuple[str, ...]], ...]
    query: str


PERSONAS: tuple[Persona, ...] = (
    Persona(
        (
            ("I'm allergic to peanuts.", ("User is allergic to peanuts.",)),
            ("My name is Ana.", ("User's name is Ana.",)),
            ("I live in Lisbon.", ("User lives in Lisbon.",)),
            ("I'm vegetarian.", ("User is vegetarian.",)),
            ("I prefer celsius.", ("User prefers celsius.",)),
            (
                "I work as a data engineer at Acme Robotics.",
                ("User works as a data engineer.", "User works at Acme Robotics."),
            ),
        ),
        query="peanuts",
    ),
    Persona(
        (
            ("I love hiking.", ("User likes hiking.",)),
            ("Call me Bruno.", ("User's name is Bruno.",)),
            ("I live in Oslo.", ("User lives in Oslo.",)),
            ("I prefer trains over planes.", ("User prefers trains over planes.",)),
            ("My favorite cuisine is Italian.", ("User's favorite cuisine is Italian.",)),
            ("My sister is Maria.", ("User's sister is Maria.",)),
        ),
        query="hiking",
    ),
    Persona(
        (
            ("I plan to learn Portuguese.", ("User plans to learn Portuguese.",)),
            ("My name is Chiara.", ("User's name is Chiara.",)),
            ("I'm from Kyoto.", ("User is from Kyoto.",)),
            ("I prefer fahrenheit.", ("User prefers fahrenheit.",)),
            ("I work at Nordlys Energy.", ("User works at Nordlys Energy.",)),
            ("I like quiet restaurants.", ("User likes quiet restaurants.",)),
        ),
        query="Portuguese",
    ),
)
#: One turn in ``STATEMENT_EVERY`` opens with something the user says about
#: themselves; an agent's first turn in a session opens with the persona's
#: first statement, so a search for its ``query`` finds every session served.
STATEMENT_EVERY = 4


def session_of(index: int) -> tuple[str, str]:
    """``(user_id, session_id)`` of shared session ``index``: two sessions per
    user, so every user but perhaps the last has sessions to search across."""
    return f"user-{index // 2}", f"conv-{index}"


def persona_of(user_id: str) -> Persona:
    """The persona of a user of ``session_of``."""
    return PERSONAS[int(user_id.rpartition("-")[2]) % len(PERSONAS)]


def _fill(template: Any, values: dict[str, Any]) -> Any:
    if isinstance(template, str):
        return template.format(**values)
    if isinstance(template, dict):
        return {k: _fill(v, values) for k, v in template.items()}
    return template


def pick_statement(rng: random.Random, turn: int, persona: Persona, *, first: bool) -> int | None:
    """Which of the persona's statements the turn's user message opens with
    (None: none); ``first``: the agent's first turn in the session."""
    if first:
        return 0
    if turn % STATEMENT_EVERY == 0:
        return rng.randrange(len(persona.statements))
    return None


def make_turn(
    rng: random.Random,
    agent: int,
    turn: int,
    persona: Persona | None = None,
    statement: int | None = None,
) -> list[dict[str, Any]]:
    """One realistic turn, its user message opening with the persona's
    ``statement`` (an index) if given. Every message carries (agent, turn)."""
    scenario = rng.choice(SCENARIOS)
    values = {"city": rng.choice(CITIES), "day": rng.choice(DAYS), "n": rng.randint(2, 9999)}
    tag = {"agent": agent, "turn": turn}
    call_id = f"call-{agent}-{turn}"
    user_text = _fill(scenario["ask"], values)
    if persona is not None and statement is not None:
        user_text = persona.statements[statement][0] + " " + user_text
    turn_messages: list[dict[str, Any]] = [{"role": "user", "content": user_text, "metadata": tag}]
    if rng.random() < 0.7:
        turn_messages += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "name": scenario["tool"],
                        "arguments": _fill(scenario["args"], values),
                    }
                ],
                "metadata": tag,
            },
            {
                "role": "tool",
                "content": _fill(scenario["result"], values),
                "tool_call_id": call_id,
                "name": scenario["tool"],
                "metadata": tag,
            },
        ]
    turn_messages.append(
        {"role": "assistant", "content": _fill(scenario["answer"], values), "metadata": tag}
    )
    return turn_messages


async def run_agent(
    memory: Memory,
    agent: int,
    sessions: int,
    duration: float,
    seed: int,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Serve turns for ``duration`` seconds; return counts and latencies, and
    which persona statements each user made."""
    rng = random.Random(seed * 1000 + agent)
    written: dict[str, int] = {}
    stated: dict[str, set[int]] = {}
    write_ms: list[float] = []
    read_ms: list[float] = []
    deadline = time.monotonic() + duration
    turn = 0
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        user_id, session_id = session_of(rng.randrange(sessions))
        started = time.perf_counter()
        await memory.context(session_id=session_id, user_id=user_id, max_tokens=1500)
        read_ms.append((time.perf_counter() - started) * 1000)
        key = f"{user_id}/{session_id}"
        persona = persona_of(user_id)
        statement = pick_statement(rng, turn, persona, first=key not in written)
        messages = make_turn(rng, agent, turn, persona, statement)
        started = time.perf_counter()
        await memory.write(
            messages,
            session_id=session_id,
            user_id=user_id,
            agent_name=f"agent-{agent}",
            tags={"agent": str(agent)},
        )
        write_ms.append((time.perf_counter() - started) * 1000)
        written[key] = written.get(key, 0) + len(messages)
        if statement is not None:
            stated.setdefault(user_id, set()).add(statement)
        turn += 1
        await asyncio.sleep(rng.uniform(0.0, 0.02))  # the "LLM" thinking
    return {
        "agent": agent,
        "turns": turn,
        "written": written,
        "stated": {user: sorted(found) for user, found in stated.items()},
        "write_ms": write_ms,
        "read_ms": read_ms,
    }


#: What an agent process prints once connected, then waits for ``GO`` on
#: stdin: the fleet's traffic starts together, after every process started.
READY = "ready"
GO = "go"


async def _main(args: argparse.Namespace) -> int:
    options = json.loads(args.options)
    async with await Memory.connect(args.url, namespace=args.namespace, **options) as memory:
        await memory.ping()
        if args.wait:
            sys.stdout.write(READY + "\n")
            sys.stdout.flush()
            if (await asyncio.to_thread(sys.stdin.readline)).strip() != GO:
                return 1  # the demo stopped before the traffic began
        result = await run_agent(memory, args.agent, args.sessions, args.duration, args.seed)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()  # the demo reads it before this process has exited
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="a redismem demo agent process")
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--agent", type=int, required=True)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--options", default="{}", help="Memory.connect options as JSON")
    parser.add_argument(
        "--wait", action="store_true", help=f"print {READY!r} once connected, wait for {GO!r}"
    )
    args = parser.parse_args(argv)
    try:
        sys.exit(asyncio.run(_main(args)))
    except (RedisMemError, OSError) as exc:  # the demo shows the agent's last words
        sys.exit(f"demo agent {args.agent}: {exc}")


if __name__ == "__main__":
    main()
