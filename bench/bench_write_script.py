"""Where the write script's server time goes, and the read-last-50 path's.

Issue 22, goal 4: the write script at most 10 µs of Redis server time per
write on a quiet server, reads of the last 50 at least 0.9x a
default-configured raw client. This bench measures where the time goes, on a
throwaway ``redis-server`` (``_util.throwaway_redis``: loopback, no
persistence; it is flushed between runs, so there is no ``--url``). Findings
and the plan built on them: docs/write-path.md.

1. **The product path.** ``Memory.connect(url, namespace="bws", ttl=3600)``,
   default options (recall indexing on, no summarization, no workers), makes
   ``--writes`` single-message writes over ``--sessions`` sessions (of
   ``--users`` users; 16 tasks, sessions taken in turn) through
   ``Memory.write`` on an emptied server after ``CONFIG RESETSTAT``;
   ``INFO commandstats`` gives the script's server time per call (``EVALSHA``
   usec / calls). The raw baseline's ``RPUSH`` + ``EXPIRE`` (pipelined, one
   list per session) give its server time per write.
2. **The write script's parts**, two ways, each run through ``Memory.write``
   (the "product" column: the copy is swapped in for the real script) and
   replayed (the "replay" column: every ``EVALSHA`` of step 1 recorded, keys
   and arguments as sent, and sent again in order, pipelined 16 deep, on an
   emptied server):

   * a ladder: copies of the script with parts taken out one after another
     (each rung one more), so the parts add up to the whole; a part's removal
     can change what later parts do (without the meta ``HSET`` the session
     never exists, so the meta load finds nothing to parse);
   * amplified parts: a copy of the whole script running one part
     ``AMPLIFY`` more times; (copy - whole) / ``AMPLIFY`` is that part's
     cost, Lua included, with less noise than one difference.

   The copies are made by exact text replacements on the assembled source
   (``redismem.core.lua.script_source``), each checked to match once, so a
   change of the script makes this bench stop instead of measuring something
   else. Also replayed: the script as a Redis function (``FCALL``), the
   script's includes alone (what defining its functions costs per call), TTLs
   refreshed by every write, Lua's number formatting, an empty script with
   the same KEYS/ARGV and with one of each, and ``RPUSH`` + ``PEXPIRE`` in
   Lua; the function is checked to write the same data as the script
   (``state_digest``) before it is timed.
3. **The read path.** ``Memory.read(limit=50)`` (one ``MULTI``: the ``touch``
   script and two ``LRANGE``) against ``LRANGE`` + ``json.loads`` on
   ``redis.asyncio.Redis.from_url(url)``: server time per read (sequential
   reads), the touch script's ladder and amplified parts, client-side reads/s
   (16 tasks) and sequential p50 of redismem, redismem with
   ``refresh_ttl=False``, the raw client, redismem's ``MULTI`` sent on the raw
   client undecoded, and a bare ``LRANGE``; and decoding one reply alone.

4. **Paired with another version** (``--against REF``, instead of 1-3): the
   write script as assembled at git revision ``REF`` (its ``redismem`` package
   unpacked by ``git archive`` and asked for ``script_source("write")``)
   against this checkout's, through ``Memory.write`` (``--rounds`` rounds,
   each running both, in alternating order) and replayed (the current
   script's recorded calls, ``3 x --replay-rounds`` rounds): the medians and
   the median of the per-round differences, which drift on a shared machine
   cancels. Both must take the same KEYS and ARGV; the replay also checks
   that both write the same data (``state_digest``).

    .venv/bin/python bench/bench_write_script.py           # full run, about 4 minutes on 2 cores
    .venv/bin/python bench/bench_write_script.py --quick   # smoke check, about 10 seconds
    .venv/bin/python bench/bench_write_script.py --against HEAD~1 --rounds 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources import files
from statistics import median
from typing import Any

import redis
import redis.asyncio as aioredis
from _util import conversation, percentile, throughput, throwaway_redis

import redismem.core.scripts as scripts_module
from redismem import Memory
from redismem.core import codec
from redismem.core.lua import GUARD_PRELUDE, guarded, includes, script_source

NAMESPACE = "bws"
TTL = 3600
READ_LIMIT = 50
TASKS = 16
#: Calls per pipeline when replaying recorded script calls: as many as the
#: product path's tasks have in flight (a longer pipeline keeps the server's
#: caches warmer and shows lower figures than the product path).
REPLAY_BATCH = TASKS


# -- the server's counters ---------------------------------------------------


def command_stats(client: redis.Redis) -> dict[str, tuple[int, float]]:
    """``INFO commandstats`` as command -> (calls, usec)."""
    stats = client.info("commandstats")
    out: dict[str, tuple[int, float]] = {}
    for name, value in stats.items():
        if name.startswith("cmdstat_"):
            out[name[len("cmdstat_") :]] = (int(value["calls"]), float(value["usec"]))
    return out


def reset_stats(client: redis.Redis) -> None:
    client.config_resetstat()


def usec_per(stats: dict[str, tuple[int, float]], names: Sequence[str], ops: int) -> float:
    """Server µs per operation spent in the commands ``names`` (top level)."""
    return sum(stats.get(n, (0, 0.0))[1] for n in names) / ops


# -- the write script's ladder -----------------------------------------------


@dataclass(frozen=True)
class Rung:
    """One more part taken out of the script: ``edits`` are exact text
    replacements on the source left by the rungs before."""

    part: str
    what: str
    edits: tuple[tuple[str, str], ...]


#: The write script's parts, taken out one after another (steady state: a
#: session that exists, TTL not yet due, indexing on, no tags, no trimming).
WRITE_LADDER: tuple[Rung, ...] = (
    Rung(
        "guard check",
        "HGET guard e, compare the epoch (_guard.lua)",
        (
            (
                "  local current = redis.call('HGET', GUARD, 'e') or '0'\n"
                "  if current ~= EPOCH then"
                " return redis.error_reply('REDISMEM_EPOCH ' .. current) end\n",
                "",
            ),
        ),
    ),
    Rung(
        "integrity check",
        "the pushes' replies vs meta (no command of its own; needed by later rungs)",
        (("if failure then\n", "if false then\n"),),
    ),
    Rung(
        "type checks",
        "TYPE of the keys this write may touch (type_error: none on the hot path)",
        (("  local broken = type_error(touched)\n", "  local broken = nil\n"),),
    ),
    Rung(
        "write id",
        "HSETNX writes (+ the sweep every 1,000 writes)",
        (
            (
                "local seen = remember_write(write_id,"
                " first_s .. ',' .. at_s .. ',' .. writes_s)\n",
                "local seen = nil\n",
            ),
        ),
    ),
    Rung(
        "pending mark",
        "ZSCORE pending (+ ZADD NX, HSET sumcfg when not marked)",
        (("  marked = redis.pcall('ZSCORE', KEYS[9], sid)\n", "  marked = '1'\n"),),
    ),
    Rung(
        "rttl field",
        "HSET rttl (first write of a session)",
        (
            (
                "if recall_ttl ~= '' and meta.rttl ~= recall_ttl then"
                " redis.call('HSET', KEYS[2], 'rttl', recall_ttl) end\n",
                "",
            ),
        ),
    ),
    Rung(
        "TTLs",
        "touch_session + prune_expired when the TTL is due (first write of a session here)",
        (
            (
                "local touching = len == 0 or needs_touch(ttl, now, meta and meta.exp)\n",
                "local touching = false\n",
            ),
        ),
    ),
    Rung(
        "entry record",
        "RPUSH entries 'first,at,<msgpack tail>'",
        (
            (
                "  record = redis.pcall('RPUSH', KEYS[3],"
                " first_s .. ',' .. at_s .. ',' .. ARGV[4])\n",
                "  record = 1\n",
            ),
        ),
    ),
    Rung(
        "meta update",
        "HSET meta seq tokens writes accessed (+ created gen on a new session)",
        (
            (
                "redis.call('HSET', KEYS[2], 'seq', last_s,"
                " 'tokens', meta.tokens + tonumber(ARGV[5]),\n"
                "  'writes', writes_s, 'accessed', now_s)\n",
                "",
            ),
            ("  redis.call('HSET', KEYS[2], 'created', at_s, 'gen', write_id)\n", ""),
        ),
    ),
    Rung(
        "clock",
        "TIME (now_ms)",
        (("local now = now_ms()\n", "local now = 1700000000000\n"),),
    ),
    Rung(
        "meta load",
        "HMGET meta, 8 fields, into a table (load_meta)",
        (("local meta = load_meta(KEYS[2])\n", "local meta = nil\n"),),
    ),
    Rung(
        "message RPUSH",
        "RPUSH msgs (what is left: argument parsing, the result table)",
        (
            (
                "  pushed = redis.pcall('RPUSH', KEYS[1], ARGV[first_msg])\n",
                "  pushed = len + 1\n",
            ),
        ),
    ),
)

#: The touch script (the read path's checks and sliding TTL), laddered the same way.
TOUCH_LADDER: tuple[Rung, ...] = (
    WRITE_LADDER[0],
    Rung(
        "integrity check",
        "meta vs LLEN, TYPE entries",
        (("local broken = integrity_error(meta, len)\n", "local broken = nil\n"),),
    ),
    Rung(
        "accessed + TTL",
        "TIME, touch_session (TTL not due), HSET meta accessed when it moves by 1 s",
        (("if ttl >= 0 then\n", "if false then\n"),),
    ),
    Rung(
        "meta load",
        "HMGET meta, 9 fields (load_meta)",
        (("local meta = load_meta(KEYS[2], 'accessed')\n", "local meta = {seq = len}\n"),),
    ),
    Rung(
        "LLEN",
        "LLEN msgs (what is left: the call and the result)",
        (("\nlocal len = redis.call('LLEN', KEYS[1])\n", "\nlocal len = 0\n"),),
    ),
)

#: Each part run AMPLIFY more times in a copy of the whole script (the copy
#: ``amplified``): (copy - whole) / AMPLIFY is what the part costs, with the
#: noise of one difference spread over AMPLIFY runs of it. Only parts that
#: can run again without changing what the write does are amplified.
AMPLIFY = 9
#: (part, the statement, the extra runs put before it; ``%d`` = AMPLIFY).
WRITE_AMPLIFIED: tuple[tuple[str, str, str], ...] = (
    (
        "guard check (HGET guard)",
        "  local current = redis.call('HGET', GUARD, 'e') or '0'\n",
        "  for _ = 1, %d do redis.call('HGET', GUARD, 'e') end\n",
    ),
    (
        "meta load (HMGET, 8 fields, table)",
        "local meta = load_meta(KEYS[2])\n",
        "for _ = 1, %d do load_meta(KEYS[2]) end\n",
    ),
    ("clock (TIME)", "local now = now_ms()\n", "for _ = 1, %d do now_ms() end\n"),
    (
        "pending mark read (ZSCORE pending)",
        "  marked = redis.pcall('ZSCORE', KEYS[9], sid)\n",
        "  for _ = 1, %d do redis.pcall('ZSCORE', KEYS[9], sid) end\n",
    ),
    (
        "meta update (HSET 4 fields)",
        "redis.call('HSET', KEYS[2], 'seq', last_s,",
        "for _ = 1, %d do redis.call('HSET', KEYS[2], 'seq', last_s, 'tokens',"
        " meta.tokens + tonumber(ARGV[5]), 'writes', writes_s, 'accessed', now_s) end\n",
    ),
    (
        "entry record (RPUSH entries)",
        "if failure then\n",
        "for _ = 1, %d do redis.call('RPUSH', KEYS[3], first_s .. ',' .. at_s .. ',' .. ARGV[4])"
        " end\n",
    ),
)
#: The same for the touch script.
TOUCH_AMPLIFIED: tuple[tuple[str, str, str], ...] = (
    WRITE_AMPLIFIED[0],
    (
        "LLEN msgs",
        "\nlocal len = redis.call('LLEN', KEYS[1])\n",
        "\nfor _ = 1, %d do redis.call('LLEN', KEYS[1]) end",
    ),
    (
        "meta load (HMGET, 9 fields, table)",
        "local meta = load_meta(KEYS[2], 'accessed')\n",
        "for _ = 1, %d do load_meta(KEYS[2], 'accessed') end\n",
    ),
    (
        "integrity check (TYPE entries)",
        "local broken = integrity_error(meta, len)\n",
        "for _ = 1, %d do integrity_error(meta, len) end\n",
    ),
    (
        "accessed (TIME, HSET when moved by 1 s)",
        "  local slid = touch_session(ttl, now, ARGV[2], meta.exp)\n",
        "  for _ = 1, %d do redis.call('HSET', KEYS[2], 'accessed', now_ms()) end\n",
    ),
    (
        "TTL check (touch_session, not due)",
        "  local slid = touch_session(ttl, now, ARGV[2], meta.exp)\n",
        "  for _ = 1, %d do touch_session(ttl, now, ARGV[2], meta.exp) end\n",
    ),
)


def amplified(name: str, statement: str, extra: str) -> str:
    """Script ``name`` with ``extra`` (AMPLIFY more runs of a part) put just
    before ``statement``, which must occur once."""
    source = script_source(name)
    if source.count(statement) != 1:
        raise SystemExit(
            f"{name}: expected one match of {statement!r} "
            "(the script changed: update bench/bench_write_script.py)"
        )
    return source.replace(statement, (extra % AMPLIFY) + statement)


def as_function(name: str, function: str) -> str:
    """Script ``name`` as a Redis Functions library (``FUNCTION LOAD``) with
    one function ``function``: the includes' definitions run once when the
    library loads instead of on every call; KEYS, ARGV and the guard's GUARD
    and EPOCH become library locals set at the start of each call (Redis
    runs one call at a time)."""
    guard = lua_text(GUARD_PRELUDE)
    cut = guard.index("local GUARD = table.remove(KEYS, 1)")
    check_end = guard.index("\nend\n", cut) + len("\nend\n")
    per_call = guard[cut:check_end].replace("local GUARD", "GUARD").replace("local EPOCH", "EPOCH")
    definitions = [
        guard[:cut] + guard[check_end:] if i == GUARD_PRELUDE else lua_text(i)
        for i in includes(name)
    ]
    return "\n".join(
        [
            f"#!lua name={function}",
            "local KEYS, ARGV, GUARD, EPOCH",
            *definitions,
            f"redis.register_function('{function}', function(keys, args)",
            "KEYS, ARGV = keys, args",
            per_call,
            lua_text(name),
            "end)",
        ]
    )


def lua_text(name: str) -> str:
    return (files("redismem") / "lua" / f"{name}.lua").read_text(encoding="utf-8")


EMPTY = "return 0"
#: What Lua's number handling costs (Lua 5.1 formats a number with sprintf
#: whenever it meets a string: in a concatenation or as a command argument).
#: ARGV[2] of a replayed write is its ttl, 3,600,000 (ARGV[1] is the epoch).
HSET_NUMBERS = (
    "local x = tonumber(ARGV[2])\n"
    "redis.call('HSET', KEYS[1], 'a', x, 'b', x, 'c', x, 'd', x)\nreturn 0"
)
HSET_STRINGS = (
    "local x = ARGV[2]\nredis.call('HSET', KEYS[1], 'a', x, 'b', x, 'c', x, 'd', x)\nreturn 0"
)
CONCAT_NUMBERS = (
    "local x = tonumber(ARGV[2])\nlocal s\nfor _ = 1, 10 do s = x .. ',' .. x end\nreturn 0"
)
CONCAT_STRINGS = "local x = ARGV[2]\nlocal s\nfor _ = 1, 10 do s = x .. ',' .. x end\nreturn 0"
TONUMBER = "local n = 0\nfor _ = 1, 10 do n = n + tonumber(ARGV[2]) end\nreturn 0"
#: Ten cheap commands: (this - EMPTY) / 10 is what one redis.call costs
#: around the command itself.
TEN_TIMES = "for i = 1, 10 do redis.call('TIME') end\nreturn 0"
#: The floor of a scripted write: the raw baseline's two commands in Lua.
RPUSH_EXPIRE = (
    "redis.call('RPUSH', KEYS[2], ARGV[#ARGV])\nredis.call('PEXPIRE', KEYS[2], ARGV[2])\nreturn 0"
)


def state_digest(client: redis.Redis) -> list[tuple[Any, ...]]:
    """Every key with its type, whether it has a TTL and its content, every
    13-digit number (a time in ms) masked: what two runs of the same calls
    must agree on though their clocks differ."""
    mask = re.compile(rb"\d{13}")
    out: list[tuple[Any, ...]] = []
    for key in sorted(client.scan_iter(count=1000)):
        kind = client.type(key)
        if kind == b"list":
            content: Any = client.lrange(key, 0, -1)
        elif kind == b"hash":
            content = sorted(client.hgetall(key).items())
        elif kind == b"zset":
            # Members only, sorted: scores are times, and their order too.
            content = sorted(client.zrange(key, 0, -1))
        else:
            content = client.get(key)
        text = mask.sub(b"T", repr(content).encode())
        out.append((key, kind, client.pttl(key) > 0, text))
    return out


def apply(source: str, rung: Rung) -> str:
    for old, new in rung.edits:
        found = source.count(old)
        if found != 1:
            raise SystemExit(
                f"rung {rung.part!r}: expected one match, found {found} of:\n{old}\n"
                "(the script changed: update the ladder in bench/bench_write_script.py)"
            )
        source = source.replace(old, new)
    return source


def ladder_sources(name: str, ladder: Sequence[Rung]) -> list[tuple[str, str]]:
    """(label, source): the whole script, then each rung's copy."""
    source = script_source(name)
    out = [("whole script", source)]
    for rung in ladder:
        source = apply(source, rung)
        out.append((f"- {rung.part}", source))
    return out


def includes_only(name: str, ladder: Sequence[Rung]) -> str:
    """Script ``name``'s includes without its own file, the guard check taken
    out (``ladder[0]``): what defining its functions costs per call."""
    own = lua_text(name)
    source = script_source(name)
    assert source.endswith(own)
    return apply(source[: -len(own)], ladder[0]) + "\nreturn 0\n"


# -- replaying recorded script calls -----------------------------------------


#: One recorded script call: keys and args as sent (guard and epoch first).
Call = tuple[list[Any], list[Any]]


def replay(client: redis.Redis, sha: str, calls: Sequence[Call], shrink: bool = False) -> None:
    """Send ``calls`` to script ``sha`` in order, pipelined; ``shrink``: with
    one key and one argument instead of theirs."""
    for start in range(0, len(calls), REPLAY_BATCH):
        pipe = client.pipeline(transaction=False)
        for keys, args in calls[start : start + REPLAY_BATCH]:
            if shrink:
                keys, args = keys[:1], args[:1]
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, Exception):
                raise SystemExit(f"replayed call failed: {reply}")


def function_usec(client: redis.Redis, library: str, function: str, calls: Sequence[Call]) -> float:
    """Server µs per call of ``function`` (loaded from ``library``) replaying
    ``calls`` on an emptied server, ``FCALL`` pipelined like ``replay``."""
    client.execute_command("FUNCTION", "LOAD", "REPLACE", library)
    client.flushall()
    reset_stats(client)
    for start in range(0, len(calls), REPLAY_BATCH):
        pipe = client.pipeline(transaction=False)
        for keys, args in calls[start : start + REPLAY_BATCH]:
            pipe.execute_command("FCALL", function, len(keys), *keys, *args)
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, Exception):
                raise SystemExit(f"replayed call failed: {reply}")
    count, usec = command_stats(client)["fcall"]
    assert count == len(calls), (count, len(calls))
    return usec / count


def script_usec(
    client: redis.Redis,
    source: str,
    calls: Sequence[Call],
    shrink: bool = False,
    flush: bool = True,
) -> tuple[float, dict[str, tuple[int, float]]]:
    """Server µs per call of ``source`` replaying ``calls`` (on an emptied
    server with ``flush``), and the commandstats of the run."""
    sha = client.script_load(source)
    if flush:
        client.flushall()
    reset_stats(client)
    replay(client, sha, calls, shrink)
    stats = command_stats(client)
    calls_made, usec = stats["evalsha"]
    assert calls_made == len(calls), (calls_made, len(calls))
    return usec / calls_made, stats


def ladder_figures(
    client: redis.Redis,
    sources: Sequence[tuple[str, str]],
    calls: Sequence[Call],
    rounds: int,
    flush: bool = True,
) -> list[float]:
    """Median server µs per call of each source, rounds alternating the order."""
    samples: list[list[float]] = [[] for _ in sources]
    for r in range(rounds):
        order = list(range(len(sources)))
        if r % 2:
            order.reverse()
        for i in order:
            samples[i].append(script_usec(client, sources[i][1], calls, flush=flush)[0])
    return [median(s) for s in samples]


async def part_costs(
    name: str,
    parts: Sequence[tuple[str, str, str]],
    rounds: int,
    measure: Callable[[str | None], Awaitable[float]],
) -> list[float]:
    """Per part, the median over rounds of (amplified copy - whole script) /
    AMPLIFY, each round measuring the whole script once (``measure(None)``)
    and then each amplified copy."""
    copies = [amplified(name, statement, extra) for _part, statement, extra in parts]
    samples: list[list[float]] = [[] for _ in parts]
    for r in range(rounds):
        whole = await measure(None)
        order = range(len(parts)) if r % 2 == 0 else reversed(range(len(parts)))
        for i in order:
            samples[i].append((await measure(copies[i]) - whole) / AMPLIFY)
    return [median(x) for x in samples]


# -- the product path, with the real script or a copy -----------------------


@contextmanager
def script_swapped(name: str, source: str | None) -> Iterator[None]:
    """Clients made inside run ``source`` as script ``name`` (None: the real one)."""
    original = scripts_module.script_source
    if source is not None:
        scripts_module.script_source = lambda n: source if n == name else original(n)  # type: ignore[assignment]
    try:
        yield
    finally:
        scripts_module.script_source = original  # type: ignore[assignment]


def session_of(i: int, sessions: int, users: int) -> tuple[str, str]:
    s = i % sessions
    return f"u{s % users}", f"s{s}"


@dataclass(frozen=True)
class Shape:
    writes: int
    sessions: int
    users: int
    reads: int


async def product_writes(
    url: str, client: redis.Redis, shape: Shape, source: str | None = None, record: bool = False
) -> tuple[float, dict[str, tuple[int, float]], list[Call]]:
    """``shape.writes`` single-message ``Memory.write`` calls (16 tasks) on an
    emptied server, the write script being ``source`` (None: the real one):
    its server µs per call, the run's commandstats and, with ``record``, the
    script calls as sent."""
    messages = conversation(22, 1000)
    with script_swapped("write", source):
        mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
        calls: list[Call] = []
        if record:
            runner = mem.backend.scripts
            run = runner.run

            def recording(name: str, keys: Sequence[Any], args: Sequence[Any], **kw: Any) -> Any:
                if name == "write":
                    calls.append((list(keys), list(args)))
                return run(name, keys, args, **kw)

            runner.run = recording  # type: ignore[method-assign]
        # Connect and load the script outside the measured run.
        await mem.write([messages[0]], session_id="warm", user_id="warm")
        calls.clear()
        client.flushall()
        reset_stats(client)
        counter = iter(range(shape.writes))

        async def task() -> None:
            for i in counter:
                uid, sid = session_of(i, shape.sessions, shape.users)
                await mem.write([messages[i % len(messages)]], session_id=sid, user_id=uid)

        await asyncio.gather(*(task() for _ in range(TASKS)))
        stats = command_stats(client)
        await mem.aclose()
    count, usec = stats["evalsha"]
    assert count == shape.writes, (count, shape.writes)
    return usec / count, stats, calls


def raw_writes(client: redis.Redis, shape: Shape) -> float:
    """Server µs per write of the raw baseline (RPUSH + EXPIRE, pipelined)."""
    messages = [json.dumps(m) for m in conversation(22, 1000)]
    client.flushall()
    reset_stats(client)
    for start in range(0, shape.writes, REPLAY_BATCH):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(shape.writes, start + REPLAY_BATCH)):
            key = f"benchraw:s{i % shape.sessions}"
            pipe.rpush(key, messages[i % len(messages)])
            pipe.expire(key, TTL)
        pipe.execute()
    return usec_per(command_stats(client), ("rpush", "expire"), shape.writes)


def alternating(count: int, rounds: int) -> Iterator[int]:
    """Indexes ``0..count-1`` for each round, every other round reversed."""
    for r in range(rounds):
        yield from (range(count) if r % 2 == 0 else reversed(range(count)))


# -- reads ---------------------------------------------------------------------


async def fill_for_reads(url: str, client: redis.Redis, shape: Shape) -> None:
    """Each session written by ``Memory.write`` (one message per call) and its
    raw twin ``benchraw:s<i>``: at least 100 messages each."""
    messages = conversation(23, 1000)
    client.flushall()
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
    per = max(READ_LIMIT * 2, shape.writes // shape.sessions)
    for s in range(shape.sessions):
        uid, sid = session_of(s, shape.sessions, shape.users)
        chosen = [messages[(s + j) % len(messages)] for j in range(per)]
        await asyncio.gather(*(mem.write([m], session_id=sid, user_id=uid) for m in chosen[:1]))
        for m in chosen[1:]:
            await mem.write([m], session_id=sid, user_id=uid)
        client.rpush(f"benchraw:s{s}", *[json.dumps(m) for m in chosen])
        client.expire(f"benchraw:s{s}", TTL)
    await mem.aclose()


def touch_calls(mem: Memory, shape: Shape) -> list[Call]:
    """The touch script's KEYS and ARGV for each session, as ``read`` sends them."""
    out: list[Call] = []
    for s in range(shape.sessions):
        uid, sid = session_of(s, shape.sessions, shape.users)
        _sid, _uid, keys = mem._keys(sid, uid)
        out.append(guarded(keys, keys.script_keys(), [mem._refresh_ttl_arg(), sid]))
    return out


async def product_reads(
    url: str, client: redis.Redis, shape: Shape, source: str | None = None
) -> tuple[float, dict[str, tuple[int, float]]]:
    """``shape.reads`` sequential ``Memory.read(limit=50)``, the touch script
    being ``source``: its server µs per call and the run's commandstats."""
    with script_swapped("touch", source):
        mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
        await mem.read(session_id="s0", user_id="u0", limit=READ_LIMIT)
        reset_stats(client)
        for i in range(shape.reads):
            uid, sid = session_of(i, shape.sessions, shape.users)
            await mem.read(session_id=sid, user_id=uid, limit=READ_LIMIT)
        stats = command_stats(client)
        await mem.aclose()
    count, usec = stats["evalsha"]
    assert count == shape.reads, (count, shape.reads)
    return usec / count, stats


async def client_side(url: str, shape: Shape, rounds: int) -> dict[str, tuple[float, float]]:
    """Reads/s of 16 tasks and sequential p50 µs of each way of reading the
    last 50, rounds alternating the order."""
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
    raw = aioredis.Redis.from_url(url)
    touch_sha = await raw.script_load(script_source("touch"))
    calls = touch_calls(mem, shape)

    async def ours(i: int, refresh: bool = True) -> Any:
        uid, sid = session_of(i, shape.sessions, shape.users)
        return await mem.read(session_id=sid, user_id=uid, limit=READ_LIMIT, refresh_ttl=refresh)

    async def raw_read(i: int) -> Any:
        key = f"benchraw:s{i % shape.sessions}"
        return [json.loads(m) for m in await raw.lrange(key, -READ_LIMIT, -1)]

    async def multi_on_raw(i: int) -> Any:
        keys, args = calls[i % len(calls)]
        pipe = raw.pipeline(transaction=True)
        pipe.execute_command("EVALSHA", touch_sha, len(keys), *keys, *args)
        pipe.lrange(keys[1], -READ_LIMIT, -1)
        pipe.lrange(keys[3], -READ_LIMIT, -1)
        return await pipe.execute()

    async def lrange_on_raw(i: int) -> Any:
        return await raw.lrange(f"benchraw:s{i % shape.sessions}", -READ_LIMIT, -1)

    sides: dict[str, Callable[[int], Awaitable[Any]]] = {
        "raw LRANGE + json.loads (the baseline)": raw_read,
        "redismem read(limit=50)": ours,
        "redismem read, refresh_ttl=False": lambda i: ours(i, refresh=False),
        "redismem's MULTI on the raw client, undecoded": multi_on_raw,
        "raw LRANGE alone, undecoded": lrange_on_raw,
    }
    rates: dict[str, list[float]] = {k: [] for k in sides}
    p50s: dict[str, list[float]] = {k: [] for k in sides}
    names = list(sides)
    ops = max(1, shape.reads // TASKS)
    for index in alternating(len(names), rounds):
        name = names[index]
        op = sides[name]
        rates[name].append(await throughput(TASKS, ops, lambda t, i, op=op: op(t * ops + i)))
        lat = []
        for i in range(min(shape.reads, 1000)):
            t0 = time.perf_counter()
            await op(i)
            lat.append((time.perf_counter() - t0) * 1e6)
        p50s[name].append(percentile(lat, 50))
    await mem.aclose()
    await raw.aclose()
    return {k: (median(rates[k]), median(p50s[k])) for k in sides}


async def decode_cost(url: str, shape: Shape) -> tuple[float, float]:
    """µs to decode one reply of the last 50 as ``Memory.read`` does
    (``parse_covering`` + ``decode_messages``), and ``json.loads`` of the raw
    twin's 50."""
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
    raw = aioredis.Redis.from_url(url)
    keys, args = touch_calls(mem, shape)[0]
    pipe = raw.pipeline(transaction=True)
    pipe.execute_command("EVAL", script_source("touch"), len(keys), *keys, *args)
    pipe.lrange(keys[1], -READ_LIMIT, -1)
    pipe.lrange(keys[3], -READ_LIMIT, -1)
    (seq, _len), messages, records = await pipe.execute()
    twin = await raw.lrange("benchraw:s0", -READ_LIMIT, -1)
    await mem.aclose()
    await raw.aclose()
    first_seq = seq - len(messages) + 1
    covering = []
    for record in reversed(records):
        prefix = b",".join(record.split(b",", 2)[:2])
        covering.append(prefix)
        if int(prefix.split(b",", 1)[0]) <= first_seq:
            break
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        created = codec.parse_covering(covering, keys[3])
        codec.decode_messages(messages, first_seq, created, keys[1])
    ours = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        [json.loads(m) for m in twin]
    return ours, (time.perf_counter() - t0) / n * 1e6


# -- paired with another version ----------------------------------------------


def source_at(revision: str, name: str) -> str:
    """Script ``name`` as the ``redismem`` package at git ``revision`` assembles it."""
    root = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", root, "archive", revision, "redismem"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        return subprocess.run(
            [
                sys.executable,
                "-c",
                f"from redismem.core.lua import script_source; print(script_source({name!r}), "
                "end='')",
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": tmp},
        ).stdout


async def paired(url: str, client: redis.Redis, shape: Shape, revision: str, opts: Any) -> None:
    """Section 4: the write script at ``revision`` against this checkout's."""
    old = source_at(revision, "write")
    new = script_source("write")
    _us, new_stats, calls = await product_writes(url, client, shape, record=True)
    _us, old_stats, _calls = await product_writes(url, client, shape, old)
    script_usec(client, old, calls)
    expected = state_digest(client)
    script_usec(client, new, calls)
    if state_digest(client) != expected:
        raise SystemExit(f"this checkout's write script wrote other data than {revision}'s")
    print(f"4. The write script at {revision} (before) and in this checkout (after), paired")
    for label, stats in ((revision, old_stats), ("this checkout", new_stats)):
        others = {
            k: c for k, (c, _u) in stats.items() if k != "evalsha" and not k.startswith("config")
        }
        print(f"  commands per write, {label}:")
        print("    " + ", ".join(f"{k} {c / shape.writes:.3f}" for k, c in sorted(others.items())))
    rows: list[tuple[str, list[float], list[float]]] = []
    befores: list[float] = []
    afters: list[float] = []
    for r in range(opts.rounds):
        pair = [old, None] if r % 2 == 0 else [None, old]
        got = {}
        for source in pair:
            got[source is None] = (await product_writes(url, client, shape, source))[0]
        befores.append(got[False])
        afters.append(got[True])
    rows.append((f"Memory.write, {opts.rounds} rounds", befores, afters))
    befores, afters = [], []
    for r in range(3 * opts.replay_rounds):
        pair = [old, new] if r % 2 == 0 else [new, old]
        got_replay = {text: script_usec(client, text, calls)[0] for text in pair}
        befores.append(got_replay[old])
        afters.append(got_replay[new])
    rows.append((f"replayed, {3 * opts.replay_rounds} rounds", befores, afters))
    # The minimum of each side too: on a busy machine the server is descheduled
    # inside commands, which only ever adds time.
    print(
        f"  {'server µs per write':34}{'before':>9}{'after':>9}{'paired diff':>13}"
        f"{'min before':>12}{'min after':>11}"
    )
    for label, before, after in rows:
        diff = median(a - b for a, b in zip(after, before, strict=True))
        print(
            f"  {label:34}{median(before):9.2f}{median(after):9.2f}{diff:+13.2f}"
            f"{min(before):12.2f}{min(after):11.2f}"
        )
        print(
            "    rounds (before/after): "
            + ", ".join(f"{b:.1f}/{a:.1f}" for b, a in zip(before, after, strict=True))
        )


# -- the report ----------------------------------------------------------------


def inner_lines(stats: dict[str, tuple[int, float]], ops: int, skip: Sequence[str]) -> list[str]:
    lines = []
    for name, (calls, usec) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
        if name in skip or name.startswith("config") or calls == 0:
            continue
        lines.append(
            f"  {name:14}{calls / ops:8.3f} calls/op{usec / calls:8.2f} µs/call"
            f"{usec / ops:8.2f} µs/op"
        )
    return lines


def ladder_lines(
    sources: Sequence[tuple[str, str]],
    product: Sequence[float],
    replayed: Sequence[float],
    ladder: Sequence[Rung],
) -> list[str]:
    lines = [
        f"  {'rung':22}{'product':>9}{'part':>7}{'replay':>9}{'part':>7}  what the part is",
    ]
    for i, (label, _src) in enumerate(sources):
        row = f"  {label:22}{product[i]:9.2f}"
        row += "       " if i == 0 else f"{product[i - 1] - product[i]:7.2f}"
        row += f"{replayed[i]:9.2f}"
        row += "       " if i == 0 else f"{replayed[i - 1] - replayed[i]:7.2f}"
        lines.append(row + ("" if i == 0 else f"  {ladder[i - 1].what}"))
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 1 round")
    parser.add_argument("--writes", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--reads", type=int, default=3_000, help="reads per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the product-path runs")
    parser.add_argument("--replay-rounds", type=int, default=7, help="rounds of the replays")
    parser.add_argument(
        "--against", metavar="REF", help="only section 4: paired with the script at git REF"
    )
    opts = parser.parse_args()
    if opts.quick:
        opts.writes, opts.reads, opts.rounds, opts.replay_rounds = 1_000, 300, 1, 1
    shape = Shape(opts.writes, opts.sessions, opts.users, opts.reads)

    with throwaway_redis() as url:
        client = redis.Redis.from_url(url)
        server = client.info("server")
        print(
            f"write script bench: Redis {server['redis_version']} (throwaway, loopback), "
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"{shape.writes:,} single-message writes over {shape.sessions} sessions of "
            f"{shape.users} users, {TASKS} tasks; product path: medians of {opts.rounds} "
            f"rounds, replays: of {opts.replay_rounds}"
        )
        print()
        if opts.against:
            await paired(url, client, shape, opts.against, opts)
            return

        # 1. The product path, and the raw baseline.
        sources = ladder_sources("write", WRITE_LADDER)
        product: list[list[float]] = [[] for _ in sources]
        raw_us: list[float] = []
        _us, stats, calls = await product_writes(url, client, shape, record=True)
        for index in alternating(len(sources), opts.rounds):
            source = None if index == 0 else sources[index][1]
            product[index].append((await product_writes(url, client, shape, source))[0])
            if index == 0:
                raw_us.append(raw_writes(client, shape))
        whole = median(product[0])
        print("1. Memory.write, default options (index on): server time, INFO commandstats")
        print(
            f"  write script (EVALSHA)  {whole:6.2f} µs/call  (rounds: "
            + ", ".join(f"{x:.2f}" for x in product[0])
            + ")"
        )
        print(f"  raw RPUSH + EXPIRE      {median(raw_us):6.2f} µs/write")
        others = {
            k: c for k, (c, _u) in stats.items() if k != "evalsha" and not k.startswith("config")
        }
        print("  commands per write (the script's, and the job a session's first write enqueues):")
        print("  " + ", ".join(f"{k} {c / shape.writes:.3f}" for k, c in sorted(others.items())))
        print()

        # 2. The ladder, through Memory.write and replayed.
        replayed: list[list[float]] = [[] for _ in sources]
        for index in alternating(len(sources), opts.replay_rounds):
            replayed[index].append(script_usec(client, sources[index][1], calls)[0])
        print("2. The write script with parts taken out one after another (µs per call;")
        print("   product: through Memory.write; replay: the recorded calls pipelined 16 deep)")
        for line in ladder_lines(
            sources, [median(x) for x in product], [median(x) for x in replayed], WRITE_LADDER
        ):
            print(line)
        whole_replayed, inner = script_usec(client, sources[0][1], calls)
        inner_us = sum(u for k, (c, u) in inner.items() if k != "evalsha")
        print(
            f"  commands the whole script ran, per write (replay: {inner_us / len(calls):.2f} µs "
            f"of {whole_replayed:.2f}; the rest is Lua and the call itself):"
        )
        for line in inner_lines(inner, len(calls), ("evalsha", "flushall")):
            print(line)
        forced_touch = script_source("write").replace(
            "local touching = len == 0 or needs_touch(ttl, now, meta and meta.exp)\n",
            "local touching = true\n",
        )
        extra = [
            (
                "includes only (their definitions), no command",
                includes_only("write", WRITE_LADDER),
                False,
            ),
            ("TTLs refreshed by every write (forced)", forced_touch, False),
            ("10 x redis.call('TIME'), same KEYS/ARGV", TEN_TIMES, False),
            ("HSET of 4 numbers (formatted by Lua)", HSET_NUMBERS, False),
            ("HSET of the same 4 values as strings", HSET_STRINGS, False),
            ("20 numbers formatted in concatenations", CONCAT_NUMBERS, False),
            ("the same concatenations of strings", CONCAT_STRINGS, False),
            ("10 x tonumber", TONUMBER, False),
            ("empty script, same KEYS/ARGV", EMPTY, False),
            ("empty script, 1 key 1 arg", EMPTY, True),
            ("RPUSH + PEXPIRE in Lua, same KEYS/ARGV", RPUSH_EXPIRE, False),
        ]
        # FLUSHALL keeps functions (FUNCTION FLUSH removes them).
        script_usec(client, sources[0][1], calls)
        expected = state_digest(client)
        library = as_function("write", "bws_write")
        function_usec(client, library, "bws_write", calls)
        if state_digest(client) != expected:
            raise SystemExit("the function bws_write wrote other data than the write script")
        diffs: list[float] = []
        wholes: list[float] = []
        for _ in range(3 * opts.replay_rounds):
            whole = script_usec(client, sources[0][1], calls)[0]
            wholes.append(whole)
            diffs.append(function_usec(client, library, "bws_write", calls) - whole)
        print(
            f"  paired with the whole script ({median(wholes):.2f}), median of per-round "
            f"differences over {len(wholes)} rounds; the function writes the same data:"
        )
        print(f"    {'the script as a function (FCALL)':46}{median(diffs):+7.2f}  (replay)")
        for label, source, shrink in extra:
            us = median(
                script_usec(client, source, calls, shrink)[0] for _ in range(opts.replay_rounds)
            )
            print(f"  {label:48}{us:7.2f}")
        print()

        async def replayed_write(source: str | None) -> float:
            return script_usec(client, source or sources[0][1], calls)[0]

        async def product_write(source: str | None) -> float:
            return (await product_writes(url, client, shape, source))[0]

        by_replay = await part_costs("write", WRITE_AMPLIFIED, opts.replay_rounds, replayed_write)
        by_product = await part_costs("write", WRITE_AMPLIFIED, opts.rounds, product_write)
        print(
            f"2b. Parts run {AMPLIFY} more times in a copy of the whole write script: "
            f"µs per run of the part, Lua included"
        )
        print(f"  {'part':40}{'product':>9}{'replay':>9}")
        for (part, _s, _e), a, b in zip(WRITE_AMPLIFIED, by_product, by_replay, strict=True):
            print(f"  {part:40}{a:9.2f}{b:9.2f}")
        print()

        # 3. Reads of the last 50.
        await fill_for_reads(url, client, shape)
        mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
        reads = touch_calls(mem, shape)
        await mem.aclose()
        tsources = ladder_sources("touch", TOUCH_LADDER)
        tproduct: list[list[float]] = [[] for _ in tsources]
        treplayed: list[list[float]] = [[] for _ in tsources]
        read_stats: dict[str, tuple[int, float]] = {}
        for index in alternating(len(tsources), opts.rounds):
            source = None if index == 0 else tsources[index][1]
            us, stats = await product_reads(url, client, shape, source)
            tproduct[index].append(us)
            if index == 0:
                read_stats = stats
        replay_calls = [reads[i % len(reads)] for i in range(shape.reads)]
        for index in alternating(len(tsources), opts.replay_rounds):
            treplayed[index].append(
                script_usec(client, tsources[index][1], replay_calls, flush=False)[0]
            )
        reset_stats(client)
        for i in range(shape.reads):
            await_raw = client.lrange(f"benchraw:s{i % shape.sessions}", -READ_LIMIT, -1)
            [json.loads(m) for m in await_raw]
        raw_read_us = usec_per(command_stats(client), ("lrange",), shape.reads)
        n = shape.reads
        top = sum(read_stats.get(c, (0, 0.0))[1] for c in ("multi", "exec")) / n
        print("3. Reads of the last 50: server time per read, INFO commandstats")
        print(
            f"  redismem MULTI + EXEC   {top:6.2f} µs (touch script "
            f"{read_stats['evalsha'][1] / n:.2f}, two LRANGE {read_stats['lrange'][1] / n:.2f})"
        )
        print(f"  raw LRANGE              {raw_read_us:6.2f} µs")
        print("  every command per read:")
        for line in inner_lines(read_stats, n, ("flushall",)):
            print(line)
        print("  the touch script with parts taken out one after another (µs per call;")
        print("  product: through Memory.read; replay: pipelined 16 deep, same sessions)")
        for line in ladder_lines(
            tsources, [median(x) for x in tproduct], [median(x) for x in treplayed], TOUCH_LADDER
        ):
            print(line)
        replay_calls_ = replay_calls

        async def replayed_touch(source: str | None) -> float:
            return script_usec(client, source or tsources[0][1], replay_calls_, flush=False)[0]

        async def product_touch(source: str | None) -> float:
            return (await product_reads(url, client, shape, source))[0]

        by_replay = await part_costs("touch", TOUCH_AMPLIFIED, opts.replay_rounds, replayed_touch)
        by_product = await part_costs("touch", TOUCH_AMPLIFIED, opts.rounds, product_touch)
        print(f"  touch script parts run {AMPLIFY} more times: µs per run of the part")
        print(f"  {'part':40}{'product':>9}{'replay':>9}")
        for (part, _s, _e), a, b in zip(TOUCH_AMPLIFIED, by_product, by_replay, strict=True):
            print(f"  {part:40}{a:9.2f}{b:9.2f}")
        sides = await client_side(url, shape, opts.rounds)
        base = sides["raw LRANGE + json.loads (the baseline)"][0]
        print(f"  {'client side':48}{'reads/s, 16 tasks':>19}{'vs raw':>8}{'p50 µs, seq':>13}")
        for name, (rate, p50) in sides.items():
            print(f"  {name:48}{rate:19,.0f}{rate / base:8.2f}{p50:13.0f}")
        ours, theirs = await decode_cost(url, shape)
        print(
            f"  decoding one reply of 50 (parse_covering + decode_messages) {ours:.0f} µs; "
            f"json.loads of the raw 50 {theirs:.0f} µs"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
