"""One current value per single-valued fact (``mem.memories``): restore and
delete keep at most one active record per (user, subject, predicate); the
current value is the one said last (message time, then message id),
whatever order the statements are added or extracted in; a fact is found
by the question its predicate answers. Every test runs on a real Redis and
on the embedded backend."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redismem import BackendUnavailable, InvalidInput
from redismem.longterm.extraction import RuleExtractor
from redismem.longterm.extraction.job import extract_pass
from redismem.longterm.memories import Knowledge
from redismem.longterm.records import Fact, MemoryRecord, Provenance, normalize_predicate
from redismem.longterm.slots import slot_key
from redismem.recall.index import catch_up

PROPERTY = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DAY0 = datetime(2024, 3, 1, 9, tzinfo=UTC)


def lives_in(city: str, **extra: Any) -> Fact:
    return Fact(
        text=f"The user lives in {city}.",
        subject="user",
        predicate="lives_in",
        object=city,
        **extra,
    )


def works_at(org: str, **extra: Any) -> Fact:
    return Fact(
        text=f"The user works at {org}.", subject="user", predicate="works_at", object=org, **extra
    )


async def every_record(mem: Any, user: str) -> list[MemoryRecord]:
    return [h.record for h in await mem.memories.search(user_id=user, status="any", limit=10_000)]


def assert_one_current_value(records: list[MemoryRecord]) -> None:
    """At most one active record per (subject, single-valued predicate); the
    links of a superseded record name records that exist (or were purged)."""
    active = Counter(
        (r.subject.casefold(), normalize_predicate(r.predicate))
        for r in records
        if isinstance(r, Fact) and r.is_single_valued() and r.status == "active"
    )
    assert all(n == 1 for n in active.values()), active
    for record in records:
        if record.status == "active":
            assert record.superseded_by is None and record.superseded_at is None


async def active_objects(mem: Any, user: str, predicate: str) -> list[str]:
    return [
        r.object
        for r in await every_record(mem, user)
        if isinstance(r, Fact) and r.predicate == predicate and r.status == "active"
    ]


# -- defect 5: restore -----------------------------------------------------------------


async def test_restoring_a_superseded_value_supersedes_the_current_one(make_memory):
    mem = await make_memory()
    lisbon = (await mem.memories.add(lives_in("Lisbon"), user_id="alice")).record
    porto = (await mem.memories.add(lives_in("Porto"), user_id="alice")).record
    assert await mem.memories.restore(lisbon.id, user_id="alice", reason="wrong move") is True
    assert await active_objects(mem, "alice", "lives_in") == ["Lisbon"]
    restored = await mem.memories.get(lisbon.id, user_id="alice")
    retired = await mem.memories.get(porto.id, user_id="alice")
    assert restored is not None and retired is not None
    assert (restored.status, restored.supersedes, restored.superseded_by) == (
        "active",
        porto.id,
        None,
    )
    assert (retired.status, retired.superseded_by) == ("superseded", lisbon.id)
    assert [c.change for c in await mem.memories.history(lisbon.id, user_id="alice")] == [
        "added",
        "superseded",
        "restored",
    ]
    porto_history = await mem.memories.history(porto.id, user_id="alice")
    assert [c.change for c in porto_history] == ["added", "superseded"]
    assert porto_history[-1].reason == f"superseded by {lisbon.id}"
    braga = await mem.memories.add(lives_in("Braga"), user_id="alice")
    assert braga.outcome == "superseded" and braga.other == lisbon.id
    assert await active_objects(mem, "alice", "lives_in") == ["Braga"]
    profile = await mem.memories.profile(user_id="alice")
    assert [f.object for f in profile] == ["Braga"]


async def test_restoring_a_deleted_employer_after_a_new_one_keeps_one(make_memory):
    mem = await make_memory()
    acme = (await mem.memories.add(works_at("Acme"), user_id="alice")).record
    assert await mem.memories.delete(acme.id, user_id="alice") is True
    globex = await mem.memories.add(works_at("Globex"), user_id="alice")
    assert globex.outcome == "added"
    assert await mem.memories.restore(acme.id, user_id="alice") is True
    assert await active_objects(mem, "alice", "works_at") == ["Acme"]
    gone = await mem.memories.get(globex.record.id, user_id="alice")
    assert gone is not None and (gone.status, gone.superseded_by) == ("superseded", acme.id)
    assert await mem.memories.restore(acme.id, user_id="alice") is False  # already current
    await mem.memories.add(works_at("Initech"), user_id="alice")
    assert await active_objects(mem, "alice", "works_at") == ["Initech"]


async def test_update_cannot_move_a_fact_to_another_value_slot(make_memory):
    mem = await make_memory()
    home = (await mem.memories.add(lives_in("Lisbon"), user_id="alice")).record
    await mem.memories.add(works_at("Acme"), user_id="alice")
    for change in ({"predicate": "works_at"}, {"subject": "bob"}, {"single_valued": False}):
        with pytest.raises(InvalidInput):
            await mem.memories.update(home.id, user_id="alice", **change)
    with pytest.raises(InvalidInput):
        await mem.memories.update(home.id, user_id="alice", superseded_by="m-other")
    fixed = await mem.memories.update(
        home.id, user_id="alice", predicate="Lives in", object="Lisboa"
    )
    assert isinstance(fixed, Fact) and fixed.object == "Lisboa"
    assert len(await mem.memories.history(home.id, user_id="alice")) == 2


CITIES = ["Lisbon", "Porto", "Braga"]
ORGS = ["Acme", "Globex"]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(["lives_in", "works_at"]), st.integers(0, 2)),
        st.tuples(st.just("extract"), st.integers(0, 2), st.integers(0, 40)),
        st.tuples(st.just("update"), st.integers(0, 50), st.sampled_from(CITIES + ORGS)),
        st.tuples(st.just("delete"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("restore"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("purge"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("dated"), st.integers(0, 2), st.integers(0, 40)),
    ),
    min_size=1,
    max_size=14,
)


@PROPERTY
@given(ops=operations)
async def test_random_histories_keep_at_most_one_current_value(make_memory, ops):
    """Random sequences of extraction (messages written with a time, indexed
    and extracted by the rule extractor), adds (now or dated), corrections,
    deletes, restores and purges: after every step, at most one active record
    per (subject, single-valued predicate); a value added now or restored is
    the current one."""
    mem = await make_memory(index=True)
    user = "u" + format(random.getrandbits(48), "x")
    known: list[str] = []
    try:
        for step, (op, a, b) in enumerate(ops):
            if op == "add":
                value = (CITIES if a == "lives_in" else ORGS)[b % 2 if a == "works_at" else b]
                fact = lives_in(value) if a == "lives_in" else works_at(value)
                added = await mem.memories.add(fact, user_id=user)
                known.append(added.record.id)
                # Said now, after every dated statement: it is the current value.
                assert await active_objects(mem, user, a) == [value]
            elif op == "dated":
                fact = lives_in(CITIES[a], created_at=DAY0 + timedelta(days=b))
                known.append((await mem.memories.add(fact, user_id=user)).record.id)
            elif op == "extract":
                said = random.choice(["I live in", "I moved to"])
                content = f"{said} {CITIES[a]}. I work at {ORGS[b % 2]}."
                sid = f"s{b % 3}"
                await mem.write(
                    [{"role": "user", "content": content}],
                    session_id=sid,
                    user_id=user,
                    created_at=DAY0 + timedelta(days=b, minutes=step),
                )
                await catch_up(mem.backend, user_id=user, session_id=sid)
                await extract_pass(
                    mem.backend, RuleExtractor(), user_id=user, session_id=sid, quiet=0
                )
                known = [r.id for r in await every_record(mem, user)]
            elif known:
                target = known[a % len(known)]
                if op == "update" and await mem.memories.get(target, user_id=user) is not None:
                    await mem.memories.update(target, user_id=user, object=b, text=f"User: {b}.")
                elif op == "delete":
                    await mem.memories.delete(target, user_id=user)
                elif op == "restore" and await mem.memories.restore(target, user_id=user):
                    again = await mem.memories.get(target, user_id=user)
                    assert again is not None and again.status == "active"
                elif op == "purge":
                    await mem.memories.purge(target, user_id=user)
            assert_one_current_value(await every_record(mem, user))
    finally:
        await mem.clear_user(user)


# -- defect 6: the value said last is current ---------------------------------------

#: 21 dated days of a user's life: home and employer change back and forth.
DAYS = [
    ("Lisbon", "Acme"),
    ("Porto", "Acme"),
    ("Porto", "Globex"),
    ("Faro", "Globex"),
    ("Coimbra", "Initech"),
    ("Porto", "Initech"),
    ("Lisbon", "Acme"),
    ("Faro", "Acme"),
    ("Faro", "Globex"),
    ("Braga", "Globex"),
    ("Porto", "Umbrella"),
    ("Coimbra", "Umbrella"),
    ("Lisbon", "Acme"),
    ("Evora", "Acme"),
    ("Porto", "Initech"),
    ("Faro", "Globex"),
    ("Coimbra", "Globex"),
    ("Porto", "Acme"),
    ("Lisbon", "Initech"),
    ("Braga", "Umbrella"),
    ("Setubal", "Hooli"),
]


@pytest.mark.parametrize("seed", range(4))
async def test_dated_statements_added_in_any_order_leave_the_last_said_current(make_memory, seed):
    mem = await make_memory()
    statements = []
    for day, (city, org) in enumerate(DAYS):
        at = DAY0 + timedelta(days=day)
        statements.append(lives_in(city, created_at=at))
        statements.append(works_at(org, created_at=at))
    random.Random(seed).shuffle(statements)
    outcomes = Counter()
    for fact in statements:
        outcomes[(await mem.memories.add(fact, user_id="alice")).outcome] += 1
    assert await active_objects(mem, "alice", "lives_in") == ["Setubal"]
    assert await active_objects(mem, "alice", "works_at") == ["Hooli"]
    records = await every_record(mem, "alice")
    assert_one_current_value(records)
    # Every older statement is in the history, linked to a later value.
    by_id = {r.id: r for r in records}
    for record in records:
        if record.status == "superseded":
            assert record.superseded_by in by_id
    assert seed != 0 or outcomes["outdated"] > 0


async def test_an_older_statement_goes_straight_into_history(make_memory):
    mem = await make_memory()
    now = (await mem.memories.add(lives_in("Porto", created_at=DAY0), user_id="alice")).record
    old = await mem.memories.add(
        lives_in("Lisbon", created_at=DAY0 - timedelta(days=3)), user_id="alice"
    )
    assert old.outcome == "outdated" and old.other == now.id
    assert (old.record.status, old.record.superseded_by) == ("superseded", now.id)
    assert [c.change for c in await mem.memories.history(old.record.id, user_id="alice")] == [
        "added"
    ]
    assert await active_objects(mem, "alice", "lives_in") == ["Porto"]
    # The same old statement again, in the same words: one more source, no copy.
    again = await mem.memories.add(
        lives_in("Lisbon", created_at=DAY0 - timedelta(days=2)), user_id="alice"
    )
    assert again.outcome == "outdated" and again.record.id == old.record.id
    assert again.other == now.id
    assert len(again.record.sources) == 2 and again.record.status == "superseded"
    # Said at the same time: the message id decides.
    same = DAY0 + timedelta(days=1)
    first = Provenance(message_ids=["000000000004"], at=same)
    second = Provenance(message_ids=["000000000005"], at=same)
    await mem.memories.add(lives_in("Faro"), user_id="alice", source=second)
    late = await mem.memories.add(lives_in("Evora"), user_id="alice", source=first)
    assert late.outcome == "outdated"
    assert await active_objects(mem, "alice", "lives_in") == ["Faro"]


async def test_extraction_out_of_order_leaves_the_last_said_current(make_memory):
    """Two sessions of dated messages, extracted newest session first (as two
    workers may): the active home is the one said last."""
    mem = await make_memory(index=True)
    for sid, days in (("early", range(0, 10)), ("late", range(10, 21))):
        for day in days:
            city, org = DAYS[day]
            await mem.write(
                [{"role": "user", "content": f"I live in {city}. I work at {org}."}],
                session_id=sid,
                user_id="alice",
                created_at=DAY0 + timedelta(days=day),
            )
        await catch_up(mem.backend, user_id="alice", session_id=sid)
    for sid in ("late", "early"):
        done = await extract_pass(
            mem.backend, RuleExtractor(), user_id="alice", session_id=sid, quiet=0
        )
        assert done.status == "extracted"
    assert await active_objects(mem, "alice", "lives_in") == ["Setubal"]
    assert await active_objects(mem, "alice", "works_at") == ["Hooli"]


# -- defect 7: found by the question it answers ----------------------------------------


async def test_a_fact_is_found_by_the_question_its_predicate_answers(make_memory):
    mem = await make_memory(index=True)
    await mem.write(
        [{"role": "user", "content": "I live in Lisbon."}], session_id="s1", user_id="alice"
    )
    await mem.write(
        [{"role": "user", "content": "I moved to Porto."}], session_id="s1", user_id="alice"
    )
    await catch_up(mem.backend, user_id="alice", session_id="s1")
    await extract_pass(mem.backend, RuleExtractor(), user_id="alice", session_id="s1", quiet=0)
    [porto] = [
        r for r in await every_record(mem, "alice") if isinstance(r, Fact) and r.status == "active"
    ]
    assert porto.text == "User moved to Porto." and porto.predicate == "lives_in"
    hits = await mem.memories.search("where do I live", user_id="alice")
    assert [h.record.id for h in hits] == [porto.id]
    await mem.memories.add(works_at("Acme"), user_id="alice")
    for question, wanted in (
        ("Where do I work?", "Acme"),
        ("Who is my employer?", "Acme"),
        ("What is my home address?", "Porto"),
    ):
        found = await mem.memories.search(question, user_id="alice")
        assert found and found[0].record.object == wanted, question  # type: ignore[union-attr]
    built = await mem.build_context(
        session_id="s2", user_id="alice", request="Where do I live?", max_tokens=2000, memories=5
    )
    assert built.memories_included >= 1
    assert "User moved to Porto." in built.messages[0].content
    assert "Lisbon" not in built.messages[0].content


@pytest.mark.parametrize("seed", range(3))
async def test_racing_adds_restores_and_deletes_settle_to_one_current_value(make_memory, seed):
    """Adds (now and dated), restores and deletes of one slot all at once:
    once they are done, at most one value is active, every superseded one
    leads to a record that exists, and a later add supersedes the survivor."""
    mem = await make_memory()
    rng = random.Random(seed)
    first = [(await mem.memories.add(lives_in(c), user_id="alice")).record.id for c in CITIES]

    async def one(n: int) -> None:
        choice = rng.random()
        if choice < 0.5:
            at = DAY0 + timedelta(days=rng.randrange(40)) if rng.random() < 0.5 else None
            await mem.memories.add(lives_in(f"City{n}", created_at=at), user_id="alice")
        elif choice < 0.8:
            await mem.memories.restore(rng.choice(first), user_id="alice")
        else:
            await mem.memories.delete(rng.choice(first), user_id="alice")

    await asyncio.gather(*(one(n) for n in range(16)))
    records = await every_record(mem, "alice")
    assert_one_current_value(records)
    by_id = {r.id: r for r in records}
    for record in records:
        if record.status == "superseded" and record.superseded_by is not None:
            assert record.superseded_by in by_id
    last = await mem.memories.add(lives_in("Setubal"), user_id="alice")
    assert await active_objects(mem, "alice", "lives_in") == ["Setubal"]
    assert last.outcome in ("added", "superseded")


@pytest.mark.parametrize("dies_at", ["settled", "stored"])
async def test_an_add_that_died_midway_finishes_when_re_sent(make_memory, dies_at):
    """An add dies after deciding the slot: before its record is stored
    (after superseding the old value) or after it. Meanwhile at most one
    value is active; re-sent with its write id, it finishes, once."""
    mem = await make_memory()
    old = (await mem.memories.add(lives_in("Lisbon"), user_id="alice")).record
    memories = Knowledge(mem)
    items = memories._items  # the records' store items, where every put goes
    real_put = items.put

    async def dying_put(uid: str, record: MemoryRecord, **kwargs: Any) -> bool:
        if record.id != old.id and dies_at == "settled":
            raise BackendUnavailable("connection lost")
        done = await real_put(uid, record, **kwargs)
        if record.id != old.id:
            raise BackendUnavailable("connection lost")
        return done

    items.put = dying_put  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        await memories.add(lives_in("Porto"), user_id="alice", write_id="op-porto")
    assert_one_current_value(await every_record(mem, "alice"))
    again = await mem.memories.add(lives_in("Porto"), user_id="alice", write_id="op-porto")
    assert again.outcome == "superseded" and again.other == old.id
    assert await active_objects(mem, "alice", "lives_in") == ["Porto"]
    retired = await mem.memories.get(old.id, user_id="alice")
    assert retired is not None and retired.superseded_by == again.record.id
    assert len(await every_record(mem, "alice")) == 2
    assert len(await mem.memories.history(again.record.id, user_id="alice")) == 1
    same = await mem.memories.add(lives_in("Porto"), user_id="alice", write_id="op-porto")
    assert same.record.id == again.record.id
    assert len(await mem.memories.history(again.record.id, user_id="alice")) == 1


async def test_settling_a_slot_reads_what_may_be_active_not_the_whole_history(make_memory):
    """After 30 values, the slot lists only the current value and the one it
    replaced as possibly active: an add reads those, not the history (and
    the slot's own versions stay small)."""
    mem = await make_memory()
    for n in range(30):
        await mem.memories.add(lives_in(f"City{n}"), user_id="alice")
    key = slot_key(lives_in("x"))
    slot = await mem.store.get(("alice", "memories-keys"), key)
    assert slot is not None
    current = await active_objects(mem, "alice", "lives_in")
    assert current == ["City29"]
    assert slot.value["id"] in slot.value["open"] and len(slot.value["open"]) <= 2
    assert slot.value["prev"] is not None and "members" not in slot.value


async def test_a_slot_written_before_it_listed_its_records_is_repaired(make_memory):
    """Data left by the old restore (two active homes, a slot naming one):
    the next value supersedes both."""
    mem = await make_memory()
    lisbon = (await mem.memories.add(lives_in("Lisbon"), user_id="alice")).record
    porto = (await mem.memories.add(lives_in("Porto"), user_id="alice")).record
    namespace, key = ("alice", "memories-keys"), slot_key(lives_in("x"))
    await mem.store.put(namespace, key, {"id": porto.id}, index=False)  # the old layout
    old = await mem.store.get(("alice", "memories"), lisbon.id)
    assert old is not None
    await mem.store.put(("alice", "memories"), lisbon.id, {**old.value, "status": "active"})
    assert sorted(await active_objects(mem, "alice", "lives_in")) == ["Lisbon", "Porto"]
    await mem.memories.add(lives_in("Braga"), user_id="alice")
    assert await active_objects(mem, "alice", "lives_in") == ["Braga"]
    assert_one_current_value(await every_record(mem, "alice"))


async def test_a_restore_raced_by_a_settle_still_returns_true_with_its_reason(make_memory):
    """Another writer settles the slot while a restore runs and, finding the
    restored record current, makes it active first: the restore still says
    True and records its reason."""
    mem = await make_memory()
    memories = Knowledge(mem)
    lisbon = (await memories.add(lives_in("Lisbon"), user_id="alice")).record
    await memories.add(lives_in("Porto"), user_id="alice")
    slots = memories._slots  # the helper that settles single-valued facts' slots
    real_settle = slots.settle

    async def raced(uid: str, slot: Any, guard: Any, **kwargs: Any) -> Any:
        if kwargs.get("arriving") == lisbon.id:
            await real_settle(uid, slot, guard)  # a concurrent add's settle
        return await real_settle(uid, slot, guard, **kwargs)

    slots.settle = raced  # type: ignore[method-assign]
    assert await memories.restore(lisbon.id, user_id="alice", reason="never moved") is True
    assert await active_objects(mem, "alice", "lives_in") == ["Lisbon"]
    history = await mem.memories.history(lisbon.id, user_id="alice")
    assert history[-1].change == "restored" and history[-1].reason == "never moved"


@pytest.mark.parametrize("seed", range(3))
async def test_no_two_values_are_ever_active_at_once_while_adds_race(make_memory, raw, seed):
    """Issue 19, defect 5, "at every moment": while adds, restores and
    deletes of one slot race, an atomic look (one MGET of every record)
    never finds two active values: a value is made current only while its
    slot, settled, holds still (``store.put_guarded(while_at=...)``)."""
    import msgpack

    from redismem.core.keys import store_namespace_ref

    mem = await make_memory()
    rng = random.Random(seed)
    first = [(await mem.memories.add(lives_in(c), user_id="alice")).record.id for c in CITIES]
    store_keys = mem.layout.store("alice", mem.backend.epochs.get("alice"))
    pattern = store_keys.item(store_namespace_ref(("alice", "memories")) + "#") + "*"
    done = asyncio.Event()
    worst = [0]

    async def sampler() -> None:
        while not done.is_set():
            keys = [k async for k in raw.scan_iter(match=pattern, count=1000)]
            values = await raw.mget(keys) if keys else []
            active = 0
            for value in values:
                if value is None:
                    continue
                head = value.split(b",", 4)
                if head[3] != b"p":
                    continue
                fields = msgpack.unpackb(head[4], raw=False)[1]
                if fields.get("status") == "active" and fields.get("predicate") == "lives_in":
                    active += 1
            worst[0] = max(worst[0], active)
            await asyncio.sleep(0)

    async def one(n: int) -> None:
        choice = rng.random()
        if choice < 0.6:
            await mem.memories.add(lives_in(f"City{n}"), user_id="alice")
        elif choice < 0.85:
            await mem.memories.restore(rng.choice(first), user_id="alice")
        else:
            await mem.memories.delete(rng.choice(first), user_id="alice")

    watcher = asyncio.create_task(sampler())
    try:
        for _ in range(6):
            await asyncio.gather(*(one(n) for n in range(8)))
    finally:
        done.set()
        await watcher
    assert worst[0] <= 1
    assert_one_current_value(await every_record(mem, "alice"))
