"""A scripted agent for the fleet demo: multi-turn conversations with tool calls.

Each agent process serves turns of shared sessions (several agents serve the
same session, as a horizontally scaled fleet would): it reads the session's
context, then writes the turn (user message, assistant tool call, tool result,
assistant answer) as one entry. It reports how many messages it wrote per
session and its latencies as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from typing import Any

from redismem.client import Memory
from redismem.errors import RedisMemError

__all__ = ["SCENARIOS", "make_turn", "run_agent", "session_of"]

SCENARIOS: list[dict[str, Any]] = [
    {
        "ask": "Can you check the weather in {city} for {day}?",
        "fact": "I live in {city} and I prefer {unit}.",
        "tool": "get_weather",
        "args": {"city": "{city}", "day": "{day}"},
        "result": '{{"city": "{city}", "forecast": "light rain", "high": 14, "unit": "{unit}"}}',
        "answer": "We will plan for light rain in {city} on {day}; the high is 14 degrees.",
    },
    {
        "ask": "Please book a table for {n} at an Italian place near {city}.",
        "fact": "My partner is vegetarian and I like quiet restaurants.",
        "tool": "book_table",
        "args": {"city": "{city}", "people": "{n}", "cuisine": "italian"},
        "result": '{{"status": "confirmed", "restaurant": "Trattoria Sole", "time": "19:30"}}',
        "answer": "Booked: Trattoria Sole at 19:30 for {n}. I noted the vegetarian preference.",
    },
    {
        "ask": "Why does my deploy to {city}-cluster fail with exit code {n}?",
        "fact": "I use Python 3.11 and our CI runs on Debian.",
        "tool": "search_logs",
        "args": {"service": "{city}-cluster", "code": "{n}"},
        "result": '{{"matches": 3, "first": "ImportError: no module named msgpack"}}',
        "answer": "The logs show a missing msgpack dependency; we decided to pin it in pyproject.",
    },
    {
        "ask": "What's the status of order {n}? I ordered it on {day}.",
        "fact": "I'm usually home after 6 pm, call me Alex.",
        "tool": "order_status",
        "args": {"order_id": "{n}"},
        "result": '{{"order": "{n}", "status": "shipped", "eta": "{day}"}}',
        "answer": "Order {n} has shipped and should arrive {day}.",
    },
]
CITIES = ["Lisbon", "Oslo", "Kyoto", "Québec", "Nairobi", "Zürich", "São Paulo"]
DAYS = ["Monday", "Tuesday", "Friday", "the weekend"]


def session_of(index: int) -> tuple[str, str]:
    """``(user_id, session_id)`` of shared session ``index``."""
    return f"user-{index % 3}", f"conv-{index}"


def _fill(template: Any, values: dict[str, Any]) -> Any:
    if isinstance(template, str):
        return template.format(**values)
    if isinstance(template, dict):
        return {k: _fill(v, values) for k, v in template.items()}
    return template


def make_turn(rng: random.Random, agent: int, turn: int) -> list[dict[str, Any]]:
    """One realistic turn; every message carries (agent, turn) for verification."""
    scenario = rng.choice(SCENARIOS)
    values = {
        "city": rng.choice(CITIES),
        "day": rng.choice(DAYS),
        "unit": rng.choice(["celsius", "fahrenheit"]),
        "n": rng.randint(2, 9999),
    }
    tag = {"agent": agent, "turn": turn}
    call_id = f"call-{agent}-{turn}"
    user_text = _fill(scenario["ask"], values)
    if rng.random() < 0.4:
        user_text = _fill(scenario["fact"], values) + " " + user_text
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
    """Serve turns for ``duration`` seconds; return counts and latencies."""
    rng = random.Random(seed * 1000 + agent)
    written: dict[str, int] = {}
    write_ms: list[float] = []
    read_ms: list[float] = []
    deadline = time.monotonic() + duration
    turn = 0
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        user_id, session_id = session_of(rng.randrange(sessions))
        started = time.perf_counter()
        await memory.context(session_id=session_id, user_id=user_id, max_tokens=1500)
        read_ms.append((time.perf_counter() - started) * 1000)
        messages = make_turn(rng, agent, turn)
        started = time.perf_counter()
        await memory.write(
            messages,
            session_id=session_id,
            user_id=user_id,
            agent_name=f"agent-{agent}",
            tags={"agent": str(agent)},
        )
        write_ms.append((time.perf_counter() - started) * 1000)
        written[f"{user_id}/{session_id}"] = written.get(f"{user_id}/{session_id}", 0) + len(
            messages
        )
        turn += 1
        await asyncio.sleep(rng.uniform(0.0, 0.02))  # the "LLM" thinking
    return {
        "agent": agent,
        "turns": turn,
        "written": written,
        "write_ms": write_ms,
        "read_ms": read_ms,
    }


async def _main(args: argparse.Namespace) -> None:
    options = json.loads(args.options)
    async with await Memory.connect(args.url, namespace=args.namespace, **options) as memory:
        result = await run_agent(memory, args.agent, args.sessions, args.duration, args.seed)
    sys.stdout.write(json.dumps(result) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="a redismem demo agent process")
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--agent", type=int, required=True)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--options", default="{}", help="Memory.connect options as JSON")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_main(args))
    except (RedisMemError, OSError) as exc:  # the demo shows the agent's last words
        sys.exit(f"demo agent {args.agent}: {exc}")


if __name__ == "__main__":
    main()
