"""The key layout: escaping, parsing, SCAN patterns, namespace validation."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from redismem import InvalidInput, KeyLayout
from redismem.core.keys import (
    MAX_ID_BYTES,
    SESSION_KEY_KINDS,
    ParsedKey,
    agent_filter_suffix,
    escape_id,
    tag_filter_suffix,
    unescape_id,
    validate_id,
)

quick = settings(max_examples=examples(300), deadline=None, database=None)

ids = st.text(min_size=1, max_size=80)
HOSTILE = [
    "a:b",
    "{a}",
    "a}:s:x",
    "*",
    "?",
    "[a-z]",
    "\\",
    "a\nb",
    " ",
    "\t\r",
    "ünï©ødé 🚀",
    "%41",
    "%",
    "\x00",
    "x" * 1024,
]
FORBIDDEN = re.compile(r"[:{}*?\[\]\\\s]")


@quick
@given(ids)
def test_escaping_is_reversible(value):
    assert unescape_id(escape_id(value)) == value


@quick
@given(ids)
def test_escaped_ids_hold_only_safe_characters(value):
    escaped = escape_id(value)
    assert re.fullmatch(r"[A-Za-z0-9_.%-]+", escaped)
    assert not FORBIDDEN.search(escaped)
    assert escaped.isascii()


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_ids_escape_to_safe_text(value):
    escaped = escape_id(value)
    assert not FORBIDDEN.search(escaped)
    assert unescape_id(escaped) == value


def test_escaping_examples():
    assert escape_id("Alice_1.x-y") == "Alice_1.x-y"
    assert escape_id("a:b") == "a%3Ab"
    assert escape_id("%41") == "%2541"
    assert escape_id("é") == "%C3%A9"
    assert escape_id("%41") != escape_id("A")


@quick
@given(ids, ids, st.sampled_from(SESSION_KEY_KINDS))
def test_parse_key_inverts_session_keys(user_id, session_id, kind):
    layout = KeyLayout("ns")
    key = layout.session_key(user_id, session_id, kind)
    assert layout.parse_key(key) == ParsedKey(user_id, session_id, kind)
    keys = layout.session(user_id, session_id)
    assert getattr(keys, kind) == key
    assert layout.parse_key(keys.sessions) == ParsedKey(user_id, None, "sessions")
    assert layout.parse_key(keys.tagidx) == ParsedKey(user_id, None, "tagidx")


@quick
@given(ids, ids)
def test_user_pattern_matches_only_that_users_keys(owner, other):
    layout = KeyLayout("ns")
    pattern = layout.user_pattern(owner)
    assert pattern.count("*") == 1 and pattern.endswith("*")
    assert not any(ch in pattern[:-1] for ch in "*?[]\\")
    for key in (layout.sessions(other), layout.session_key(other, owner, "msgs")):
        assert fnmatchcase(key, pattern) == (owner == other)
    assert fnmatchcase(layout.session_key(owner, other, "meta"), pattern)


@quick
@given(ids)
def test_all_keys_of_a_user_share_one_hash_tag(user_id):
    layout = KeyLayout("ns")
    keys = layout.session(user_id, "s")
    tags = {re.search(r"\{([^}]*)\}", key).group(1) for key in keys.script_keys()}
    assert tags == {"u:" + escape_id(user_id)}


def test_namespace_pattern_stays_inside_the_namespace():
    layout = KeyLayout("redismem")
    pattern = layout.namespace_pattern()
    assert fnmatchcase(layout.sessions("a"), pattern)
    for foreign in ("redismem2:{u:a}:sessions", "redismem", "xredismem:a", "other:{x}"):
        assert not fnmatchcase(foreign, pattern)


@pytest.mark.parametrize(
    "key",
    [
        "other:{u:a}:sessions",
        "ns2:{u:a}:sessions",
        "ns:u:a:sessions",
        "ns:{u:a",
        "ns:q:stats",
        "ns:{u:%ZZ}:sessions",
        "ns:{u:%4}:sessions",
        "ns:{u:a%}:sessions",
        "ns:{u:%FF}:sessions",
        "ns:{u:%41}:sessions",  # not canonical: "A" is never escaped
        "ns:{u:%2a}:sessions",  # not canonical: escapes use upper-case hex
        "ns:{u:a b}:sessions",
        "ns:{u:é}:sessions",
        "ns:{u:}:sessions",
        "ns:{u:a}:s:%ZZ:msgs",
    ],
)
def test_parse_key_rejects_foreign_and_malformed_keys(key):
    with pytest.raises(InvalidInput):
        KeyLayout("ns").parse_key(key)


@pytest.mark.parametrize("bad", ["%ZZ", "%4", "a%", "%FF", "%41", "%2a", "a b", "é", ""])
def test_unescape_rejects_what_escape_never_produces(bad):
    with pytest.raises(InvalidInput):
        unescape_id(bad)


@pytest.mark.parametrize("namespace", ["a", "redismem", "A-b_c.d", "9", "n" * 64])
def test_valid_namespaces(namespace):
    layout = KeyLayout(namespace)
    assert layout.sessions("u").startswith(namespace + ":{u:")
    assert layout.queue_key("x") == f"redismem/q:{namespace}:x"


@pytest.mark.parametrize("namespace", ["a", "redismem", "q", "arq-x"])
def test_queue_keys_lie_outside_every_namespace(namespace):
    """clear_all SCANs ``ns:*``: the work queue (arq's keys and ours) must not match."""
    layout = KeyLayout(namespace)
    queue_keys = [
        layout.queue_key("stats"),
        "redismem/queue",
        "redismem/queue:health-check",
        "arq:job:sum:x",
        "arq:in-progress:sum:x",
    ]
    for key in queue_keys:
        assert not fnmatchcase(key, layout.namespace_pattern())
    assert layout.owns_queue_name(f"{namespace}:queue")
    assert not layout.owns_queue_name("redismem/queue")


def test_the_arq_namespace_is_reserved():
    with pytest.raises(InvalidInput, match="reserved"):
        KeyLayout("arq")


@pytest.mark.parametrize(
    "namespace",
    ["", "n" * 65, "a:b", "a{b", "a}b", "a*", "a?", "a[b]", "a\\b", "a b", "abc\n", "\nabc", "ü"],
    ids=repr,
)
def test_invalid_namespaces(namespace):
    with pytest.raises(InvalidInput):
        KeyLayout(namespace)


@pytest.mark.parametrize("namespace", [None, 5, b"ns"], ids=repr)
def test_non_str_namespaces(namespace):
    with pytest.raises(InvalidInput):
        KeyLayout(namespace)


def test_default_namespace():
    assert KeyLayout().namespace == "redismem"


def test_validate_id():
    assert validate_id("x", "user_id") == "x"
    assert validate_id("é" * (MAX_ID_BYTES // 2), "user_id")
    for bad in ("", None, 5, b"x", "é" * (MAX_ID_BYTES // 2) + "x", "\ud800"):
        with pytest.raises(InvalidInput) as info:
            validate_id(bad, "user_id")
        assert "user_id" in str(info.value)


# -- each user's keys, epochs, and what the sweep and the parser accept ----------

USERS = ["alice", "bob smith", "é{x}:*", "u%41"]


@pytest.mark.parametrize("user_id", USERS)
def test_each_users_pending_index_matches_the_sweep_pattern(user_id: str) -> None:
    # The sweep finds due sessions by scanning pending_pattern(); a pending
    # key it cannot match would never be summarized.
    layout = KeyLayout("ns")
    pending = layout.pending(user_id)
    assert fnmatchcase(pending, layout.pending_pattern())
    assert pending == layout.user_prefix(user_id) + "pending"
    assert layout.session("x", "s").pending == layout.pending("x")
    # ...and nothing else of the user's matches it.
    for other in (
        layout.sessions(user_id),
        layout.tagidx(user_id),
        layout.session(user_id, "s").meta,
    ):
        assert not fnmatchcase(other, layout.pending_pattern())


def test_the_documented_layout_of_one_user() -> None:
    layout = KeyLayout("ns")
    assert layout.sessions("alice") == "ns:{u:alice}:sessions"
    assert layout.tagidx("alice") == "ns:{u:alice}:tagidx"
    assert layout.pending("alice") == "ns:{u:alice}:pending"
    assert layout.pending_pattern() == "ns:{u:*:pending"
    # After a clear, the user's keys live in a new epoch; the guard in none.
    assert layout.pending("alice", 17) == "ns:{u:alice}:@17:pending"
    assert layout.session("alice", "s", 17).msgs == "ns:{u:alice}:@17:s:s:msgs"
    assert layout.recall("alice", 17).docs == "ns:{u:alice}:@17:r:docs"
    assert layout.store("alice", 17).refs == "ns:{u:alice}:@17:kv:refs"
    assert layout.guard("alice") == "ns:{u:alice}:guard"


def test_the_documented_layout_of_recall_format_2() -> None:
    recall = KeyLayout("ns").recall("alice", 17)
    base = "ns:{u:alice}:@17:i:"
    assert recall.i_prefix == base
    assert recall.index_keys() == [
        base + kind for kind in ("meta", "rec", "docs", "sess", "spk", "dead")
    ]
    assert recall.i_term("walk") == base + "t:walk"
    assert recall.i_doc_table(3) == base + "dt:3"
    assert recall.i_session_list(12) == base + "f:s:12"
    assert recall.i_key(agent_filter_suffix("a b")) == base + "f:a:a%20b"
    assert recall.i_key(tag_filter_suffix("k", "v:1")) == base + "f:g:k=v%3A1"
    assert KeyLayout("ns").recall("alice").i_meta == "ns:{u:alice}:i:meta"
    for key in [*recall.index_keys(), recall.i_term("x"), recall.i_doc_table(0)]:
        parsed = KeyLayout("ns").parse_key(key)
        assert (parsed.user_id, parsed.session_id, parsed.epoch) == ("alice", None, 17)
        assert parsed.kind.startswith("i:")


@pytest.mark.parametrize("user_id", USERS)
@pytest.mark.parametrize("epoch", [0, 1, 1796173567980])
def test_every_epoch_parses_back_and_only_pending_indexes_parse_as_pending(
    user_id: str, epoch: int
) -> None:
    layout = KeyLayout("ns")
    keys = layout.session(user_id, "s:1", epoch)
    assert (keys.guard, keys.epoch) == (layout.guard(user_id), epoch)
    for key in (keys.msgs, keys.meta, keys.pending, layout.recall(user_id, epoch).docs):
        parsed = layout.parse_key(key)
        assert (parsed.user_id, parsed.epoch) == (user_id, epoch)
        assert fnmatchcase(key, layout.user_pattern(user_id))
    pending = layout.parse_pending(keys.pending)
    assert pending is not None and (pending.user_id, pending.epoch) == (user_id, epoch)
    for other in (keys.meta, keys.sessions, layout.recall(user_id, epoch).prefix + "t:pending"):
        assert layout.parse_pending(other) is None
    assert layout.parse_key(layout.guard(user_id)).kind == "guard"


@pytest.mark.parametrize("key", ["ns:{u:a}:@:sessions", "ns:{u:a}:@01:sessions", "ns:{u:a}:@x:s"])
def test_a_malformed_epoch_is_refused(key: str) -> None:
    with pytest.raises(InvalidInput):
        KeyLayout("ns").parse_key(key)


@pytest.mark.parametrize(
    "key",
    [
        # A foreign namespace whose prefix has the same length as ours: the
        # rest of the key would parse as a user key if the prefix went unchecked.
        "xx:{u:alice}:sessions",
        "NS:{u:alice}:s:s1:msgs",
        "ns:{x:alice}:sessions",
    ],
)
def test_parse_key_refuses_keys_of_other_namespaces_of_the_same_length(key: str) -> None:
    with pytest.raises(InvalidInput):
        KeyLayout("ns").parse_key(key)


def test_store_pattern_takes_a_known_store_key_kind_only() -> None:
    layout = KeyLayout("ns")
    assert layout.store_pattern("updated") == "ns:{u:*:kv:updated"
    with pytest.raises(InvalidInput, match="unknown store key kind 'nope'"):
        layout.store_pattern("nope")


def test_the_epoch_roots_are_one_key_of_each_family_of_the_user() -> None:
    layout = KeyLayout("ns")
    assert layout.epoch_roots("u", 0) == [
        "ns:{u:u}:sessions",
        "ns:{u:u}:r:stats",
        "ns:{u:u}:r:docs",
        "ns:{u:u}:i:meta",
        "ns:{u:u}:kv:refs",
    ]
    assert layout.epoch_roots("u", 7) == [
        f"ns:{{u:u}}:@7:{root}" for root in ("sessions", "r:stats", "r:docs", "i:meta", "kv:refs")
    ]
