"""The rules several features share, each tested at its one home: how tool
calls group (``toolgroups``), how text is cut to a budget (``tokens.fit_text``
and the summary message built on it), and the argument checks (``checks``)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redismem.checks import (
    MAX_TAGS,
    check_bool,
    check_choice,
    check_count,
    check_fraction,
    check_instance,
    check_int,
    check_items,
    check_list_of,
    check_message_list,
    check_optional_bool,
    check_optional_callable,
    check_optional_int,
    check_optional_str,
    check_plain_json,
    check_tags,
    check_text,
    check_ttl,
    check_write_id,
    new_write_id,
)
from redismem.client import Memory
from redismem.context.quoting import SUMMARY_LABEL, render_summary, summary_message, unfence
from redismem.context.strategies import MemoryStrategy, TokenBudget
from redismem.context.tokens import estimate_tokens, fit_text, message_tokens
from redismem.context.toolgroups import (
    OrphanRule,
    SystemRule,
    drop_orphan_tool_results,
    is_tool_call,
    place,
    split_at_tool_boundary,
    tool_units,
)
from redismem.errors import InvalidInput
from redismem.models import Message, Summary, ToolCall
from redismem.surface import check_memory, is_memory

SYSTEM_RULES: tuple[SystemRule, ...] = get_args(SystemRule)
ORPHAN_RULES: tuple[OrphanRule, ...] = get_args(OrphanRule)

# -- histories, written as letters ---------------------------------------------------

_ROLES = {"u": "user", "a": "assistant", "s": "system", "t": "tool"}


def history(spec: str) -> list[Message]:
    """``"u c t s a"``: user, tool call, tool result, system, answer."""
    out = []
    for i, kind in enumerate(spec.split()):
        if kind == "c":
            call = ToolCall(id=f"call-{i}", name="lookup", arguments={"q": i})
            out.append(Message(role="assistant", content="", tool_calls=[call]))
        elif kind == "t":
            out.append(Message(role="tool", content=f"result {i}", tool_call_id=f"call-{i}"))
        else:
            out.append(Message.model_validate({"role": _ROLES[kind], "content": f"{kind} {i}"}))
    return out


def spec_of(messages: list[Message]) -> str:
    return " ".join(
        "c" if is_tool_call(m) else {v: k for k, v in _ROLES.items()}[m.role] for m in messages
    )


histories = st.lists(st.sampled_from("uacts"), max_size=12).map(
    lambda kinds: history(" ".join(kinds))
)


# -- tool groups: the rule ----------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "units", "dropped", "free"),
    [
        # A system message after the call, then results, then one not followed by results.
        ("join", [[0, 1, 2, 3], [4]], [], []),
        ("join_if_results_follow", [[0, 1, 2], [3], [4]], [], []),
        ("split", [[0], [1], [3], [4]], [2], []),
        ("free", [[0, 2], [4]], [], [1, 3]),
    ],
)
def test_system_rules(
    system: SystemRule, units: list[list[int]], dropped: list[int], free: list[int]
) -> None:
    grouped = tool_units(history("c s t s u"), system=system)
    assert (grouped.units, grouped.dropped, grouped.free) == (units, dropped, free)


@pytest.mark.parametrize(
    ("orphans", "units", "dropped"),
    [
        ("drop", [[0], [2, 3, 4], [5]], [1, 6]),
        ("alone", [[0], [1], [2, 3, 4], [5], [6]], []),
        ("attach", [[0, 1], [2, 3, 4], [5, 6]], []),
    ],
)
def test_orphan_rules(orphans: OrphanRule, units: list[list[int]], dropped: list[int]) -> None:
    grouped = tool_units(history("u t c t t u t"), orphans=orphans)
    assert (grouped.units, grouped.dropped) == (units, dropped)


def test_an_orphan_first_is_alone_even_when_attached() -> None:
    assert tool_units(history("t u"), orphans="attach").units == [[0], [1]]


def test_a_cut_head_is_dropped_with_the_system_messages_inside_it() -> None:
    messages = history("s t s u t")
    rule: dict[str, Any] = {"orphans": "alone", "cut_head": True}
    assert tool_units(messages, system="join_if_results_follow", **rule).dropped == [0, 1]
    assert tool_units(messages, system="join", **rule).dropped == [0, 1, 2]
    assert tool_units(messages, system="split", **rule).dropped == []
    # Later orphans follow ``orphans``.
    assert tool_units(messages, system="split", **rule).units == [[0], [1], [2], [3], [4]]
    assert tool_units(history("t t c t"), system="split", **rule).dropped == [0, 1]


def test_a_trailing_call_without_results_is_a_unit_of_its_own() -> None:
    assert tool_units(history("u c")).units == [[0], [1]]
    assert tool_units(history("u c u")).units == [[0], [1], [2]]


def test_place_is_lazy() -> None:
    placements = place(history("t u"), system="split", orphans="alone", cut_head=True)
    assert next(placements) == "drop"
    assert next(placements) == "start"


@given(
    histories,
    st.sampled_from(SYSTEM_RULES),
    st.sampled_from(ORPHAN_RULES),
    st.booleans(),
)
def test_every_message_has_exactly_one_place(
    messages: list[Message], system: SystemRule, orphans: OrphanRule, cut_head: bool
) -> None:
    grouped = tool_units(messages, system=system, orphans=orphans, cut_head=cut_head)
    flat = [p for unit in grouped.units for p in unit]
    assert flat == sorted(flat)  # units in order, each ascending
    assert sorted(flat + grouped.dropped + grouped.free) == list(range(len(messages)))
    assert all(messages[p].role == "system" for p in grouped.free)
    assert (system == "free") or not grouped.free
    for unit in grouped.units:
        if len(unit) > 1 and orphans != "attach":
            assert is_tool_call(messages[unit[0]])  # only a call gathers what follows it
    if orphans == "drop" and not cut_head:
        assert all(messages[p].role == "tool" for p in grouped.dropped)
    if orphans != "drop" and not cut_head:
        assert grouped.dropped == []


@given(histories)
def test_orphans_are_the_same_whether_system_messages_join_or_stay_free(
    messages: list[Message],
) -> None:
    dropped = {
        system: tool_units(messages, system=system, orphans="drop").dropped
        for system in ("join", "join_if_results_follow", "free")
    }
    assert len({tuple(found) for found in dropped.values()}) == 1
    # An orphan: walking back over results and system messages finds no call.
    for position, message in enumerate(messages):
        if message.role == "tool":
            before = [m for m in messages[:position] if m.role not in ("tool", "system")]
            has_call = bool(before) and is_tool_call(before[-1])
            assert (position in dropped["join"]) == (not has_call)


# -- tool groups: windowed reads ---------------------------------------------------


def test_drop_orphan_tool_results() -> None:
    assert spec_of(drop_orphan_tool_results(history("t t u t"))) == "u t"
    kept = history("u t")
    assert drop_orphan_tool_results(kept) is kept  # nothing cut: the list itself
    assert spec_of(drop_orphan_tool_results(history("s t u"))) == "s t u"
    jirf: SystemRule = "join_if_results_follow"
    assert spec_of(drop_orphan_tool_results(history("s t u"), system=jirf)) == "u"
    assert spec_of(drop_orphan_tool_results(history("t s t s u"), system=jirf)) == "s u"
    assert spec_of(drop_orphan_tool_results(history("s u t"), system=jirf)) == "s u t"
    assert drop_orphan_tool_results([]) == []


@given(histories)
def test_drop_orphan_tool_results_cuts_exactly_the_head_of_a_cut_group(
    messages: list[Message],
) -> None:
    roles = [m.role for m in messages]
    leading_results = next((i for i, role in enumerate(roles) if role != "tool"), len(roles))
    assert drop_orphan_tool_results(messages) == messages[leading_results:]
    # With system messages inside groups: up to the last result before anything else.
    head = next((i for i, role in enumerate(roles) if role not in ("tool", "system")), len(roles))
    cut = max((i + 1 for i in range(head) if roles[i] == "tool"), default=0)
    found = drop_orphan_tool_results(messages, system="join_if_results_follow")
    assert found == messages[cut:]


# -- tool groups: summarization batches ----------------------------------------------


@pytest.mark.parametrize(
    ("batch", "following", "kept"),
    [
        ("u c", None, "u"),
        ("u c t", None, "u c t"),
        ("u c t", "t", "u"),
        ("u c t", "u", "u c t"),
        ("c t", "t", ""),
        ("", "u", ""),
        ("u c s", "t", "u"),
        ("c t s", "t", "c t"),
        ("c t s", "u", "c t s"),
        ("u t", None, "u t"),
        ("u", "t", ""),
    ],
)
def test_split_at_tool_boundary(batch: str, following: str | None, kept: str) -> None:
    messages = history(batch + (" " + following if following else ""))
    size = len(batch.split())
    after = messages[size] if following else None
    assert spec_of(split_at_tool_boundary(messages[:size], after)) == kept


@given(histories, st.data())
def test_split_at_tool_boundary_is_the_longest_clean_prefix(
    messages: list[Message], data: st.DataObject
) -> None:
    size = data.draw(st.integers(0, len(messages)))
    batch, following = messages[:size], messages[size] if size < len(messages) else None
    kept = split_at_tool_boundary(batch, following)

    def clean(end: int) -> bool:
        after = batch[end] if end < len(batch) else following
        return not is_tool_call(batch[end - 1]) and (after is None or after.role != "tool")

    longest = max((end for end in range(1, size + 1) if clean(end)), default=0)
    assert kept == batch[:longest]


# -- budget text cutting -------------------------------------------------------------


def chars(per_token: int = 4, base: int = 0) -> Callable[[str], int]:
    def cost(text: str) -> int:
        return base + -(-len(text) // per_token)

    return cost


def test_fit_text_keeps_a_text_that_fits() -> None:
    calls: list[str] = []

    def cost(text: str) -> int:
        calls.append(text)
        return len(text)

    assert fit_text("hello", cost, 5) == "hello"
    assert calls == ["hello"]
    assert fit_text("hello", cost, 4, text_cost=5) == "hell"
    assert "hello" not in calls[1:]  # the cost given is not measured again


def test_fit_text_cuts_the_head_or_the_tail() -> None:
    text = "0123456789" * 3
    assert fit_text(text, chars(1), 12) == text[:12]
    assert fit_text(text, chars(1), 12, keep="tail") == text[-12:]
    assert fit_text(text, chars(4, base=2), 5) == text[:12]
    assert fit_text(text, chars(4, base=2), 5, keep="tail") == text[-12:]
    assert fit_text(text, chars(1, base=3), 2) == ""  # not even "" fits
    assert fit_text("", chars(1, base=3), 2) == ""


@given(
    st.text(alphabet="ab \n", max_size=80),
    st.dictionaries(st.sampled_from("ab \n"), st.integers(0, 4)),
    st.integers(0, 10),
    st.integers(1, 5),
    st.integers(0, 60),
    st.sampled_from(["head", "tail"]),
)
def test_fit_text_keeps_the_longest_part_that_fits(
    text: str, weights: dict[str, int], base: int, per_token: int, budget: int, keep: Any
) -> None:
    calls = 0

    def cost(candidate: str) -> int:
        nonlocal calls
        calls += 1
        size = sum(weights.get(ch, 1) for ch in candidate) + 2 * candidate.count("\n")
        return base + -(-size // per_token)

    found = fit_text(text, cost, budget, keep=keep)
    assert calls <= 5 * math.ceil(math.log2(len(text) + 1)) + 4
    parts = [text[:n] if keep == "head" else text[len(text) - n :] for n in range(len(text) + 1)]
    fitting = [part for part in parts if cost(part) <= budget]
    assert found == (fitting[-1] if fitting else "")


@given(st.integers(1, 5000), st.integers(1, 60), st.sampled_from(["jump", "plateau", "sqrt"]))
def test_fit_text_needs_few_cost_calls(size: int, budget_share: int, shape: str) -> None:
    calls = 0

    def cost(candidate: str) -> int:
        nonlocal calls
        calls += 1
        n = len(candidate)
        if shape == "jump":
            return n + (10**6 if n > size // 2 else 0)
        if shape == "plateau":
            return n // 37
        return int(math.sqrt(n) * 10)

    text = "x" * size
    budget = cost(text) * budget_share // 100
    calls = 0
    fit_text(text, cost, budget)
    assert calls <= 5 * math.ceil(math.log2(size + 1)) + 4


@pytest.mark.parametrize("budget", [1, 17, 50, 98])
def test_fit_text_crosses_a_long_run_of_equal_costs_in_logarithmic_time(budget: int) -> None:
    calls = 0

    def cost(candidate: str) -> int:  # a token per thousand characters
        nonlocal calls
        calls += 1
        return len(candidate) // 1000

    found = fit_text("x" * 100_000, cost, budget)
    assert len(found) == budget * 1000 + 999
    assert calls <= 2 * math.ceil(math.log2(1000)) + 4


@given(st.text(alphabet="ab", max_size=40), st.integers(0, 10))
def test_fit_text_returns_a_fitting_part_even_when_costs_are_erratic(
    text: str, budget: int
) -> None:
    def cost(candidate: str) -> int:
        return hash(candidate) % 20

    found = fit_text(text, cost, budget)
    assert text.startswith(found)
    assert found == "" or cost(found) <= budget


def _summary(text: str) -> Summary:
    return Summary(text=text, message_count=3, summarized_until="3", updated_at=datetime.now(UTC))


def _marker(message: Message) -> str:
    found = re.search(r"^BEGIN MEMORY DATA (\S+)$", message.content, re.M)
    assert found is not None
    return found.group(1)


def test_summary_message_without_a_budget_is_the_whole_summary() -> None:
    text = "The user lives in Lyon.\nThey prefer trains."
    note = summary_message(_summary(text))
    assert note is not None and note.role == "system"
    assert unfence(note.content) == {SUMMARY_LABEL: text}
    assert note.metadata == {"redismem": "summary"}
    assert note.token_count == message_tokens(note)
    assert summary_message(_summary(text), estimate_tokens, note.token_count) == note


@pytest.mark.parametrize("tokenizer", [estimate_tokens, lambda text: len(text.split())])
def test_summary_message_keeps_the_longest_start_that_fits(
    tokenizer: Callable[[str], int],
) -> None:
    text = "\n".join(f"point {i}: something decided" for i in range(60))
    empty = message_tokens(render_summary(""), tokenizer)
    for budget in (empty, empty + 1, empty + 17, empty + 100):
        note = summary_message(_summary(text), tokenizer, budget)
        assert note is not None
        kept = unfence(note.content).get(SUMMARY_LABEL, "")
        assert text.startswith(kept)
        assert note.token_count == message_tokens(note, tokenizer) <= budget
        # Unfencing drops a trailing line break (it renders the same): the length kept.
        marker = _marker(note)
        size = next(
            n
            for n in (len(kept) + 1, len(kept))
            if render_summary(text[:n], marker).content == note.content
        )
        assert message_tokens(render_summary(text[: size + 1], marker), tokenizer) > budget
    assert summary_message(_summary(text), tokenizer, empty - 1) is None


# -- argument checks -----------------------------------------------------------------


class _Strategy:
    def apply(self, messages: Any, tokenizer: Any = None) -> Any: ...


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (lambda v: check_int("n", v), -1, "n must be an int >= 0, got -1"),
        (lambda v: check_int("n", v, minimum=1), 0, "n must be an int >= 1, got 0"),
        (lambda v: check_int("n", v), True, "n must be an int >= 0, got True"),
        (lambda v: check_int("n", v), 1.0, "n must be an int >= 0, got 1.0"),
        (lambda v: check_int("n", v), None, "n must be an int >= 0, got None"),
        (lambda v: check_optional_int("n", v), -1, "n must be an int >= 0 or None, got -1"),
        (lambda v: check_optional_int("n", v, minimum=1), 0, "n must be an int >= 1 or None"),
        (lambda v: check_count("limit", v), False, "limit must be an int >= 0 or None"),
        (lambda v: check_fraction("r", v), 1.5, "r must be a number in [0, 1], got 1.5"),
        (lambda v: check_fraction("r", v), True, "r must be a number in [0, 1], got True"),
        (lambda v: check_bool("b", v), 1, "b must be a bool, got 1"),
        (lambda v: check_optional_bool("b", v), "yes", "b must be a bool or None, got 'yes'"),
        (lambda v: check_text("e", v), "", "e must be a non-empty str, got ''"),
        (lambda v: check_optional_str("q", v), 3, "q must be a str or None, not int"),
        (lambda v: check_choice("m", v, ("x", "y")), "z", "m must be one of x, y, got 'z'"),
        (lambda v: check_optional_callable("f", v), 3, "f must be callable or None, not int"),
        (
            lambda v: check_instance("strategy", v, MemoryStrategy, optional=True),
            "w",
            "strategy must be a MemoryStrategy or None, not str",
        ),
        (lambda v: check_instance("s", v, MemoryStrategy), None, "s must be a MemoryStrategy,"),
        (lambda v: check_items("xs", v, int), [1, "2"], "xs[1] is a str, not a int"),
        (lambda v: check_list_of("ps", v, int, what="ints"), 3, "ps must be a list of ints"),
        (lambda v: check_list_of("ps", v, int, what="ints"), {1}, "ps must be a list of ints"),
        (check_message_list, {"role": "user"}, "messages must be a list of Message objects"),
        (check_message_list, Message(role="user", content="x"), "messages must be a list"),
        (check_message_list, 3, "messages must be a list of Message objects or dicts"),
        (check_tags, ["a"], "tags must be a dict[str, str], not list"),
        (check_tags, {"": "x"}, "tag keys must be non-empty str, got ''"),
        (check_tags, {"a": 1}, "tag values must be str, got 1 for 'a'"),
        (check_tags, {str(i): "v" for i in range(MAX_TAGS + 1)}, f"at most {MAX_TAGS} tags"),
        (check_write_id, "has space", "write_id must be 1-128 printable ASCII"),
        (check_write_id, "x" * 129, "write_id must be 1-128 printable ASCII"),
        (check_write_id, 7, "write_id must be 1-128 printable ASCII"),
        (check_memory, "redis://", "expected a Memory, got str"),
        (lambda v: check_int("n", v, minimum=1, maximum=9), 0, "n must be an int in [1, 9], got 0"),
        (
            lambda v: check_ttl("ttl", v, maximum=60),
            10**400,
            "ttl must be a number of seconds in (0, 60] or None, got an int of 1329 bits",
        ),
        (lambda v: check_ttl("t", v, maximum=60, unit="minutes"), 0, "t must be a number of min"),
        (lambda v: check_ttl("t", v, maximum=9, none=" (keep)"), math.nan, "t must be a number of"),
        (lambda v: check_ttl("t", v, maximum=9), -math.inf, "t must be a number of seconds"),
        (
            lambda v: check_ttl("t", v, maximum=9, none=" (keep)"),
            "1",
            "t must be a number of seconds in (0, 9] or None (keep), got '1'",
        ),
        (lambda v: check_ttl("t", v, maximum=9), True, "t must be a number of seconds in (0, 9]"),
        (lambda v: check_plain_json("value", v), {"a": (1,)}, "value['a'] is a tuple (use a list)"),
        (lambda v: check_plain_json("value", v), {1: 2}, "value has a key of type int"),
    ],
)
def test_checks_reject_with_a_message_naming_the_argument(
    check: Callable[[Any], Any], value: object, message: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        check(value)
    assert str(raised.value).startswith(message)
    assert isinstance(raised.value, ValueError)


def test_checks_return_what_they_accept() -> None:
    assert check_int("n", 0) == 0
    assert check_int("n", 5, minimum=5) == 5
    assert check_optional_int("n", None) is None
    assert check_optional_int("n", 3, minimum=1) == 3
    assert check_count("limit", None) == -1
    assert check_count("limit", 0) == 0
    assert check_fraction("r", 1) == 1.0 and isinstance(check_fraction("r", 1), float)
    assert check_fraction("r", 0.25) == 0.25
    assert check_bool("b", False) is False
    assert check_optional_bool("b", None) is None
    assert check_text("e", "cl100k_base") == "cl100k_base"
    assert check_optional_str("q", None) is None
    choices = ("interleave", "concat")
    assert check_choice("m", "concat", choices) is choices[1]
    assert check_optional_callable("f", None) is None
    assert check_optional_callable("f", print) is print
    check_instance("strategy", None, MemoryStrategy, optional=True)
    check_instance("strategy", TokenBudget(5), MemoryStrategy)
    check_instance("strategy", _Strategy(), MemoryStrategy)
    check_items("xs", [1, 2], int)
    check_list_of("ps", (1, 2), int, what="ints")
    check_message_list([{"role": "user", "content": "x"}])
    check_message_list(m for m in [])
    tags = {"a": "b"}
    assert check_tags(tags) == tags and check_tags(tags) is not tags
    assert check_tags(None) == {}
    assert check_write_id("retry-1") == "retry-1"
    assert check_ttl("t", None, maximum=9) is None
    assert check_ttl("t", 9, maximum=9) == 9.0 and isinstance(check_ttl("t", 9, maximum=9), float)
    assert check_ttl("t", 0.001, maximum=9) == 0.001
    check_plain_json("value", {"a": [1, 2.5, None, True, "x", {"b": {}}]})
    fresh = check_write_id(None)
    assert re.fullmatch(r"[0-9a-f]{32}", fresh) and fresh != new_write_id()


def test_fresh_write_ids_never_repeat_in_a_process_or_across_a_fork() -> None:
    ids = {new_write_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new prefix, not the parent's next ids
        os.write(write, " ".join(new_write_id() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {new_write_id() for _ in range(100)}
    assert len(child) == 100 and not child & (ids | parent)
    assert {i[:16] for i in child}.isdisjoint({i[:16] for i in ids})


async def test_is_memory_knows_a_memory_by_what_it_holds() -> None:
    """``surface`` tells a ``Memory`` apart without importing the façade: a
    ``Backend`` held as a property, and the session calls."""
    memory = await Memory.connect("memory://is-memory")
    try:
        assert is_memory(memory)
        assert check_memory(memory) is memory
        assert not is_memory(memory.backend)
        assert not is_memory(object())
        assert not is_memory(None)
    finally:
        await memory.aclose()
