"""The Lua sources and their registry (``redismem.core.scripts``): includes
declared in each file's header and resolved by name, the user guard first
in every user-scoped script, one clock, session meta read by name, and a
``KEYS[]``/``ARGV[]`` header that matches what each file uses.

These read the files only (and run scripts on the embedded backend's Lua):
no server needed."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from importlib.resources import files
from pathlib import Path

import fakeredis
import pytest
import redis.exceptions as rexc

from redismem.core import lua as scripts
from redismem.core.keys import SESSION_META_FIELDS
from redismem.core.lua import (
    GUARD_PRELUDE,
    ScriptSourceError,
    includes,
    is_user_scoped,
    script_names,
    script_source,
)

LUA = Path(str(files("redismem") / "lua"))
ROOT = Path(__file__).resolve().parent.parent
ALL_FILES = sorted(p.stem for p in LUA.glob("*.lua"))
SCRIPTS = script_names()
INCLUDES = [name for name in ALL_FILES if name.startswith("_")]
#: The scripts that take no guard: the guard's own, and the LangGraph
#: checkpointer's (a thread belongs to no user). Opting out is a reviewed change.
UNGUARDED = {"guard_bump", "guard_settle"} | {n for n in SCRIPTS if n.startswith("lg_")}


def text(name: str) -> str:
    return (LUA / f"{name}.lua").read_text(encoding="utf-8")


def header(name: str) -> list[str]:
    """The leading comment lines of a Lua file."""
    lines = []
    for line in text(name).splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


def code(name: str) -> str:
    """The file without its comments (no Lua string here holds ``--``)."""
    return "\n".join(line.split("--", 1)[0] for line in text(name).splitlines())


def test_the_folder_holds_scripts_and_includes() -> None:
    assert [n for n in ALL_FILES if not n.startswith("_")] == SCRIPTS
    assert {"write", "read", "guard_bump", "store_put", "lg_put"} <= set(SCRIPTS)
    assert {
        "_guard",
        "_time",
        "_meta",
        "_common",
        "_recall",
        "_index",
        "_postings",
        "_store",
        "_langgraph",
    } == set(INCLUDES)


# -- includes ---------------------------------------------------------------


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_include_resolves_once_and_after_what_it_includes(name: str) -> None:
    resolved = includes(name)
    assert len(set(resolved)) == len(resolved)
    assert set(resolved) <= set(INCLUDES)
    for i, include in enumerate(resolved):
        assert set(scripts._declared(include).includes) <= set(resolved[:i])
    assert set(scripts._declared(name).includes) <= set(resolved)
    source = script_source(name)
    parts = [text(include) for include in resolved] + [text(name)]
    assert source == "\n".join(parts)


def test_every_include_is_used_by_some_script() -> None:
    used = {include for name in SCRIPTS for include in includes(name)}
    assert used == set(INCLUDES)


def test_an_include_a_script_uses_is_declared_by_name() -> None:
    """The helpers a script calls come from the includes its header names
    (or that those include): write needs _common, which needs _meta and _time."""
    assert scripts._declared("write").includes == ("_common",)
    assert includes("write") == ("_time", "_guard", "_meta", "_common")
    assert includes("index_commit") == (
        "_time",
        "_guard",
        "_meta",
        "_common",
        "_index",
        "_recall",
    )
    assert includes("guard_settle") == ()


@pytest.fixture
def fake_files(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[dict[str, str]], None]]:
    """Run the registry on made-up Lua files instead of the package's."""
    texts: dict[str, str] = {}

    def lua(name: str) -> str:
        if name not in texts:
            raise ScriptSourceError(f"no Lua file {name}.lua")
        return texts[name]

    def use(made: dict[str, str]) -> None:
        texts.clear()
        texts.update(made)
        for cached in (scripts._declared, scripts.includes, scripts.script_source):
            cached.cache_clear()

    monkeypatch.setattr(scripts, "_lua", lua)
    use({})
    yield use
    for cached in (scripts._declared, scripts.includes, scripts.script_source):
        cached.cache_clear()


GUARD = "-- the guard\nlocal G = 1\n"


def test_includes_resolve_depth_first_each_once(
    fake_files: Callable[[dict[str, str]], None],
) -> None:
    fake_files(
        {
            "_guard": "-- include: _t\n" + GUARD,
            "_t": "-- time\n",
            "_a": "-- include: _t\n-- a\n",
            "_b": "-- b\n-- include: _a _t\n",
            "s": "-- s\n-- include: _b _a\n-- KEYS[1]\nreturn 1\n",
            "u": "-- u\n-- unguarded: no user\n-- include: _a\nreturn 1\n",
        }
    )
    assert includes("s") == ("_t", "_guard", "_a", "_b")
    assert includes("u") == ("_t", "_a")
    assert (
        script_source("u")
        == "-- time\n\n-- include: _t\n-- a\n\n"
        + "-- u\n-- unguarded: no user\n-- include: _a\nreturn 1\n"
    )
    assert is_user_scoped("s") and not is_user_scoped("u")


@pytest.mark.parametrize(
    ("files_", "message"),
    [
        ({"s": "-- include: _nope\n"}, "no Lua file _nope"),
        ({"s": "-- include: _a _a\n", "_a": ""}, "twice"),
        ({"s": "-- include: other\n", "other": ""}, "a script, not an include"),
        ({"s": "-- include: _guard\n"}, "the registry adds it"),
        ({"s": "-- unguarded:\n-- include: _a\n", "_a": ""}, "says why"),
        ({"_a": "-- unguarded: no\n", "s": "-- include: _a\n"}, "says why"),
        (
            {
                "s": "-- unguarded: x\n-- include: _a\n",
                "_a": "-- include: _b\n",
                "_b": "-- include: _a\n",
            },
            "cycle: s -> _a -> _b -> _a",
        ),
        ({}, "no Lua file s"),
    ],
)
def test_a_wrong_header_fails_when_the_script_is_loaded(
    fake_files: Callable[[dict[str, str]], None], files_: dict[str, str], message: str
) -> None:
    fake_files({"_guard": GUARD, **files_})
    with pytest.raises(ScriptSourceError, match=re.escape(message)):
        script_source("s")


def test_an_include_is_not_a_script(fake_files: Callable[[dict[str, str]], None]) -> None:
    fake_files({"_guard": GUARD, "_a": "-- a\n"})
    with pytest.raises(ScriptSourceError, match="an include, not a script"):
        script_source("_a")


def test_declarations_are_read_from_the_header_only(
    fake_files: Callable[[dict[str, str]], None],
) -> None:
    fake_files({"_guard": GUARD, "s": "-- s\nlocal x = 1\n-- include: _nope\n-- unguarded: no\n"})
    assert includes("s") == (GUARD_PRELUDE,)


LUA_NAMES = {"tonumber", "tostring", "type", "pairs", "ipairs", "unpack", "select", "error"}
LUA_KEYWORDS = {"and", "or", "not", "if", "elseif", "return", "in", "until", "while", "function"}


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_function_a_script_calls_is_defined_in_it_or_its_includes(name: str) -> None:
    """A helper of an include the header forgot would be an undefined global
    at run time (Redis refuses those)."""
    source = "\n".join(code(n) for n in (*includes(name), name))
    called = set(re.findall(r"(?<![\w.:])([A-Za-z_]\w*)\s*\(", source))
    defined = set(re.findall(r"\blocal function (\w+)", source))
    assert called - defined - LUA_NAMES - LUA_KEYWORDS == set()


# -- the user guard -----------------------------------------------------------


def test_the_unguarded_scripts_are_exactly_the_guards_own_and_the_checkpointers() -> None:
    assert {n for n in SCRIPTS if not is_user_scoped(n)} == UNGUARDED
    for name in UNGUARDED:
        assert any(line.startswith("-- unguarded: ") for line in header(name))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_user_scoped_script_starts_with_the_guard_prelude(name: str) -> None:
    source, guard = script_source(name), text(GUARD_PRELUDE)
    if not is_user_scoped(name):
        assert GUARD_PRELUDE not in includes(name)
        assert guard not in source
        return
    # The guard's own includes come first, then the guard, then the rest.
    before = list(scripts._declared(GUARD_PRELUDE).includes)
    assert list(includes(name)[: len(before) + 1]) == [*before, GUARD_PRELUDE]
    assert source.startswith("\n".join([*(text(i) for i in before), guard]))
    assert source.count(guard) == 1


@pytest.mark.parametrize("name", scripts._declared(GUARD_PRELUDE).includes)
def test_what_comes_before_the_guard_only_defines_functions(name: str) -> None:
    """So the guard's check is the first command a user-scoped script runs."""
    assert re.fullmatch(r"(\s*local function \w+\(.*?\nend\b)*\s*", code(name), re.DOTALL)
    first = re.search(r"redis\.call\('(\w+)', (\w+)", code(GUARD_PRELUDE))
    assert first is not None and first.groups() == ("HGET", "GUARD")


@pytest.mark.parametrize("name", sorted(set(SCRIPTS) - UNGUARDED))
def test_a_user_scoped_script_of_another_epoch_changes_nothing(name: str) -> None:
    """Run on the embedded backend's Lua with the keys and arguments of no
    real call: the guard refuses it before anything else runs."""
    r = fakeredis.FakeRedis()
    r.hset("guard", "e", "5")
    keys = ["guard", *(f"k{i}" for i in range(1, 20))]
    args = ["0", *("1" for _ in range(30))]
    with pytest.raises(rexc.ResponseError, match="REDISMEM_EPOCH 5"):
        r.eval(script_source(name), len(keys), *keys, *args)
    assert r.keys("*") == [b"guard"]


# -- one clock ------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_FILES)
def test_only_the_clock_reads_the_time(name: str) -> None:
    if name == "_time":
        assert "redis.call('TIME')" in code(name)
        return
    assert not re.search(r"""['"]TIME['"]""", code(name))
    assert not re.search(r"local function now_ms\b", code(name))


@pytest.mark.parametrize("name", ALL_FILES)
def test_a_file_that_asks_the_time_includes_the_clock(name: str) -> None:
    if "now_ms(" not in code(name) or name == "_time":
        return
    if name.startswith("_"):
        assert "_time" in scripts._declared(name).includes
    else:
        assert "_time" in includes(name)


# -- session meta, by name --------------------------------------------------------


def meta_key(name: str) -> str | None:
    """The KEYS entry that is the session's meta in file ``name`` (or in the
    includes a script uses), as its header says; None when it has none."""
    sources = [name] if name.startswith("_") else [name, *reversed(includes(name))]
    for source in sources:
        for line in header(source):
            found = re.search(r"KEYS\[(\d+)\]\s+(?:the session's )?meta\b", line)
            if found:
                return f"KEYS[{found[1]}]"
    return None


def call_arguments(source: str, command: str) -> Iterator[list[str]]:
    """The arguments of every ``redis.call('<command>', ...)`` in ``source``,
    split at its top-level commas."""
    for found in re.finditer(r"redis\.call\('" + command + r"',", source):
        depth, part, parts = 0, "", []
        for char in source[found.end() :]:
            if char == "," and depth == 0:
                parts.append(part.strip())
                part = ""
                continue
            if char == ")" and depth == 0:
                break
            depth += {"(": 1, ")": -1, "{": 1, "}": -1}.get(char, 0)
            part += char
        yield [*parts, part.strip()]


def meta_fields_named(source: str, key: str) -> set[str]:
    """Field names in the hash commands ``source`` runs on ``key``."""
    names: set[str] = set()
    for command in ("HGET", "HMGET", "HDEL", "HEXISTS", "HSET", "HSETNX", "HINCRBY"):
        for args in call_arguments(source, command):
            if args[0] != key:
                continue
            fields = args[1::2] if command in ("HSET", "HSETNX", "HINCRBY") else args[1:]
            names |= {f.strip("'") for f in fields if re.fullmatch(r"'\w+'", f)}
    return names


@pytest.mark.parametrize("name", ALL_FILES)
def test_no_meta_field_is_read_by_position(name: str) -> None:
    source = code(name)
    assert not re.search(r"\bmeta\[\d+\]", source)
    key = meta_key(name)
    if key is not None:
        assert not re.search(r"'HMGET', " + re.escape(key), source), "read it with load_meta"
        assert not re.search(r"load_meta\((?!" + re.escape(key) + r")", source)


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_meta_field_a_script_names_is_listed(name: str) -> None:
    source = code(name)
    named = set(re.findall(r"\bmeta\.(\w+)", source))
    for extra in re.findall(r"load_meta\(KEYS\[\d+\]((?:, '\w+')*)\)", source):
        named |= set(re.findall(r"'(\w+)'", extra))
    key = meta_key(name)
    if key is not None:
        named |= meta_fields_named(source, key)
    assert named <= set(SESSION_META_FIELDS)


def test_load_meta_reads_listed_fields_by_name() -> None:
    source = code("_meta")
    [call] = re.findall(r"redis\.call\('HMGET', key,([^)]*)\.\.\.\)", source)
    always = re.findall(r"'(\w+)'", call)
    assert len(always) == 8 and set(always) <= set(SESSION_META_FIELDS)
    for i, field in enumerate(always, 1):
        assert re.search(rf"\b{field} = [^,]*\bv\[{i}\]", source)


def test_the_meta_checks_see_the_fields_scripts_use() -> None:
    assert meta_key("_common") == "KEYS[2]"
    assert meta_key("write") == "KEYS[2]" and meta_key("settle") == "KEYS[1]"
    assert {"seq", "tokens", "writes", "accessed", "created", "gen"} <= meta_fields_named(
        code("write"), "KEYS[2]"
    )
    assert {"gen", "xwm", "xbox", "rttl", "iwm", "seq"} <= set(
        re.findall(r"\bmeta\.(\w+)", code("settle"))
    )


def python_meta_fields() -> set[str]:
    """Field names Python code passes along with a session meta key."""
    names: set[str] = set()
    pattern = re.compile(r"\bmeta\s*,\s*(?:field\s*=\s*)?((?:\"\w+\"\s*,\s*)*\"\w+\")")
    for path in (ROOT / "redismem").rglob("*.py"):
        for found in pattern.findall(path.read_text(encoding="utf-8")):
            names |= set(re.findall(r"\"(\w+)\"", found))
    return names


def test_python_names_only_listed_meta_fields() -> None:
    named = python_meta_fields()
    assert {"seq", "iwm", "sumcfg"} <= named
    assert named <= set(SESSION_META_FIELDS)


# -- headers --------------------------------------------------------------------


def declared_indexes(lines: list[str]) -> dict[str, list[tuple[int, float]]]:
    """``KEYS[n]``, ``KEYS[a..b]``, ``ARGV[a..]``, ``ARGV[11 .. 10+2T]`` in a
    header, as ranges."""
    ranges: dict[str, list[tuple[int, float]]] = {"KEYS": [], "ARGV": []}
    for line in lines:
        for table, first, dots, last in re.findall(
            r"(KEYS|ARGV)\[(\d+)(\s*\.\.\s*)?([^\]]*)\]", line
        ):
            if not dots:
                if last:
                    continue  # an expression: ARGV[11+2T..]
                ranges[table].append((int(first), int(first)))
            else:
                ranges[table].append((int(first), int(last) if last.isdigit() else float("inf")))
    return ranges


def used_indexes(name: str) -> set[tuple[str, int]]:
    return {(t, int(n)) for t, n in re.findall(r"\b(KEYS|ARGV)\[(\d+)\]", code(name))}


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_header_lists_keys_and_argv(name: str) -> None:
    lines = header(name)
    assert lines, "a Lua file opens with its header"
    joined = "\n".join(lines)
    assert re.search(r"\bKEYS\b", joined) and re.search(r"\bARGV\b", joined)


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_key_and_argument_a_file_uses_is_in_its_header(name: str) -> None:
    """Literal ``KEYS[n]``/``ARGV[n]`` of the file, and of the includes a
    script uses (but the guard's, which it takes off), are described."""
    declared = declared_indexes(header(name))
    used = used_indexes(name)
    if not name.startswith("_"):
        for include in includes(name):
            if include != GUARD_PRELUDE:
                used |= used_indexes(include)
    missing = {f"{t}[{n}]" for t, n in used if not any(a <= n <= b for a, b in declared[t])}
    assert not missing


def test_the_header_check_sees_ranges() -> None:
    ranges = declared_indexes(["-- KEYS[1..9]  x", "-- ARGV[11 .. 10+2T] y", "-- KEYS[14..] z"])
    assert (1, 9) in ranges["KEYS"] and (14, float("inf")) in ranges["KEYS"]
    assert (11, float("inf")) in ranges["ARGV"]
    assert ("KEYS", 10) in used_indexes("clear")


# -- what both Lua runtimes provide -----------------------------------------------


@pytest.mark.parametrize("name", ALL_FILES)
def test_no_library_that_one_runtime_lacks(name: str) -> None:
    assert not re.search(r"\b(cmsgpack|struct|bit|cjson)\.", code(name))


def test_every_script_compiles_on_the_embedded_backend() -> None:
    r = fakeredis.FakeRedis()
    for name in SCRIPTS:
        r.script_load(script_source(name))
