"""LangGraph long-term store on plain Redis (``redismem[langgraph]``).

``RedisMemStore(memory, index=None, ttl=None)`` is a
``langgraph.store.base.BaseStore`` over ``memory.store`` (``redismem.longterm.store``):
pass it as the ``store`` of ``StateGraph.compile`` (nodes reach it with
``get_store()`` or a ``store`` argument). Like the store below it, it needs no
Redis module: Redis 7, Valkey and the embedded ``memory://`` backend.

Mapping.

* **Namespaces** are ours as they are: a LangGraph namespace is a tuple of
  labels and its first label is redismem's *tenant*. LangGraph's rules are
  checked first (``validate_op_namespace``: no empty label, no ``"."``, no NUL;
  ``put`` also refuses an empty namespace and the root ``"langgraph"``), then
  ours (``validate_id``: at most 4096 UTF-8 bytes a label). Nothing is mapped
  or rewritten: a label either passes both checks or raises
  ``InvalidNamespaceError`` / ``InvalidInput`` (both ``ValueError``). An
  empty namespace, which LangGraph lets ``get`` ask for, raises
  ``InvalidInput`` (nothing can live there). Keys must be non-empty strings.
  A *list* is taken as the tuple where ``InMemoryStore`` takes one: the
  prefix of ``search`` (which ``InMemoryStore`` compares with its tuples, so
  it finds nothing there; this store finds what the tuple finds) and the
  prefix and suffix of ``list_namespaces``. The namespace of an item
  (``get``, ``put``, ``delete``) must be a tuple (``InMemoryStore`` cannot
  hash a list there either): ``InvalidInput``.

  The tenant matters on Cluster: every item of a tenant shares one hash slot.
  LangGraph's habit ``("users", user_id)`` works but puts every user under the
  tenant ``"users"``, one slot; prefer namespaces that start with the user id,
  ``(user_id, "memories")``, which also makes ``Memory.clear_user(user_id)``
  remove the user's items.
* **Values** are JSON objects (dict with str keys, lists, str, finite numbers,
  bool, None); anything else raises ``InvalidInput`` before anything is
  written. They round-trip exactly (unicode, nesting). ``Item.created_at`` /
  ``updated_at`` are the store's (server time; ``created_at`` survives
  updates).
* **Batches** run their ops one after another, in order: a ``GetOp`` after a
  ``PutOp`` of the same item sees the put. Every op is checked first, and the
  batch's texts are embedded in one call, before anything is written; each
  put or delete is atomic, the batch as a whole is not.
* **Search without** ``index``: a ``query`` is ranked by redismem's BM25
  keyword ranking (only items holding a query term are found; ``score`` is
  the BM25 score); no query: newest ``updated_at`` first, ``score`` None.
* **Filters**: LangGraph's operators ``$eq $ne $gt $gte $lt $lte`` map one to
  one onto the store's (which adds ``$in``). A filter key names a top-level
  field; a nested dict without operators matches the fields it names
  (``{"a": {"b": 1}}`` is ``a.b == 1``, as in ``InMemoryStore``). A key with
  a ``"."`` or an empty nested dict raises ``InvalidInput``. Differences from
  ``InMemoryStore`` (which compares with Python's ``==`` and ``float()``): a
  missing field matches only ``$ne``; ``$gt``-style operators order two
  numbers or two strings and are false otherwise (never an exception);
  ``True`` never equals ``1``; lists compare exactly. Bounds no stored value
  holds, which ``InMemoryStore`` takes (``float("inf")``, ``-inf``, NaN,
  ints beyond 64 bits), find what they find there: ``{"$gt": -inf}`` any
  number, ``{"$gt": inf}`` nothing, NaN nothing under any operator but
  ``$ne`` (everything), an int beyond 64 bits is compared as its float (as
  ``InMemoryStore`` compares), and ``$eq``/``$ne`` with a number no value
  can equal match nothing/everything (``$in`` skips it). An int beyond a
  float's range, where ``InMemoryStore`` raises ``OverflowError``, counts
  as an infinity.
* **Search with** ``index={"dims": D, "embed": E, "fields": [...]}``: ``E``
  is a redismem ``Embedder`` (``HashingEmbedder``, ``MiniLMEmbedder``: any
  object with ``async embed(texts)``), a LangChain ``Embeddings``, a sync or
  async function of a list of texts, or a provider string, as
  ``ensure_embeddings`` takes them. A put embeds the text at each of the
  ``fields`` (default ``["$"]``: the whole value as JSON), or at the put's own
  ``index`` list; ``index=False`` stores no vector. Paths follow LangGraph's
  syntax (``get_text_at_path``: ``a.b``, ``a[0]``, ``a[-1]``, ``a[*].b``);
  a path matching several texts gives several vectors. The vectors, int8
  quantized (``redismem.recall.embeddings.quantize``), are stored *inside the item's
  value* under the reserved key ``"\\x00vectors"`` (a list of int lists;
  integers, so the keyword index never sees them), which the adapter strips
  on every read: a put replaces them and a delete or expiry removes them with
  the item, atomically. A value holding that key raises ``InvalidInput``.
  A query is embedded, then the newest ``MAX_VECTOR_CANDIDATES`` items under
  the prefix that match the filter are read and ranked by cosine similarity
  (an item's best vector), then the items without a vector, newest first,
  score None; ``limit``/``offset`` page that order. This is linear in the
  prefix's size (reads every candidate): fine for a user's memories, not for
  millions of items under one prefix. The keyword index is kept too (every
  string of the value), so a store opened without ``index`` can still rank
  by keywords.
* **TTL** (``supports_ttl`` is True): LangGraph counts in *minutes*; a put's
  ``ttl`` or ``TTLConfig["default_ttl"]`` of ``m`` minutes is a store ttl of
  ``60 * m`` seconds; the item and its history expire together and reads
  never return an expired item (``omit_expired`` always holds; expired index
  entries are cleaned up by the store, so ``sweep_interval_minutes`` is
  accepted and unused). Reads do **not** refresh a TTL: the store has no
  cheap, atomic "touch" and re-putting would change ``updated_at`` and add a
  version. So ``refresh_on_read=True`` raises ``InvalidInput``, the store's
  ``ttl_config`` says ``refresh_on_read: False`` (so ``get``/``search``
  default to no refresh), and an op's ``refresh_ttl`` is ignored, as LangGraph
  allows for stores that cannot refresh.
* **list_namespaces** (``prefix``, ``suffix``, ``max_depth``, ``limit``,
  ``offset``) is LangGraph's: ``"*"`` matches any one label, ``max_depth``
  cuts longer namespaces (merged), the result is sorted, and only namespaces
  holding live items count. A prefix whose first label is not ``"*"`` reads
  one tenant; otherwise every tenant is scanned (SCAN, never KEYS).

Retention is LangGraph's: an item is kept until it is deleted, unless it is
put with a ``ttl`` or the store has a ``default_ttl`` (the ``Memory``'s ``ttl``
is for sessions, not items).

Sync methods (``batch``, ``get``, ``put``, ``search``...) run on a background
event loop through a twin of the ``Memory`` (see ``redismem.adapters``), from
any thread, inside a running event loop too (a notebook cell), which they
block while they run; LangGraph uses the async ones (``abatch``, ``aget``...)
in ``ainvoke``/``astream``. Call ``close()`` (or ``await aclose()``) when
done with them.
"""

from __future__ import annotations

import asyncio
import math
import struct
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from redismem.adapters._sync import aclose_twin, close_twin, run_sync
from redismem.checks import (
    MAX_INT,
    check_int,
    check_plain_json,
    check_text,
    check_ttl,
)
from redismem.errors import InvalidInput, MissingDependency
from redismem.recall.embeddings import Embedder, cosine, quantize
from redismem.surface import check_memory
from redismem.values import INT_MAX, INT_MIN

try:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise MissingDependency("langgraph-checkpoint", "langgraph") from exc

if TYPE_CHECKING:
    from redismem.longterm.store import Item as StoredItem
    from redismem.surface import SessionMemory

__all__ = ["MAX_VECTOR_CANDIDATES", "VECTORS_KEY", "RedisMemStore"]

#: The reserved value key holding an item's vectors (stripped on read).
VECTORS_KEY = "\x00vectors"
#: Items read and ranked by one vector search (the newest under the prefix).
MAX_VECTOR_CANDIDATES = 10_000
#: A limit that is no limit, for the store's ``list_namespaces`` (the largest int it takes).
_ALL = MAX_INT
_TTL_KEYS = frozenset({"refresh_on_read", "default_ttl", "omit_expired", "sweep_interval_minutes"})
_INDEX_KEYS = frozenset({"dims", "embed", "fields"})
#: Longest ttl accepted, in minutes (100 years, the store's limit).
_MAX_TTL_MINUTES = 100 * 365 * 24 * 60
#: The largest float: every number a value holds lies within plus or minus it.
_FLOAT_MAX = sys.float_info.max
#: Conditions on a field: "is a number", and "never" (the store's ordering
#: operators hold only between two numbers or two strings).
_ANY_NUMBER: dict[str, Any] = {"$gte": -_FLOAT_MAX}
_NEVER: dict[str, Any] = {"$gt": _FLOAT_MAX}
_ORDERING = ("$gt", "$gte", "$lt", "$lte")

_DocsFn = Callable[[list[str]], Awaitable[list[list[float]]]]
_QueryFn = Callable[[str], Awaitable[list[float]]]


# -- argument checks --------------------------------------------------------------------


def _ttl_minutes(value: object, name: str) -> float | None:
    return check_ttl(name, value, maximum=_MAX_TTL_MINUTES, unit="minutes")


def _check_ttl_config(ttl: object) -> TTLConfig:
    if ttl is None:
        return {"refresh_on_read": False}
    if not isinstance(ttl, Mapping):
        raise InvalidInput(f"ttl must be a TTLConfig dict or None, not {type(ttl).__name__}")
    unknown = set(ttl) - _TTL_KEYS
    if unknown:
        raise InvalidInput(f"unknown ttl config key(s): {', '.join(sorted(map(str, unknown)))}")
    if ttl.get("refresh_on_read"):
        raise InvalidInput(
            "refresh_on_read=True is not supported: redismem's store does not refresh "
            "a ttl on reads (set it to False, or leave it out)"
        )
    config: TTLConfig = {"refresh_on_read": False}
    default = _ttl_minutes(ttl.get("default_ttl"), "ttl['default_ttl']")
    if default is not None:
        config["default_ttl"] = default
    if "omit_expired" in ttl:
        config["omit_expired"] = bool(ttl["omit_expired"])
    sweep = ttl.get("sweep_interval_minutes")
    if sweep is not None:
        config["sweep_interval_minutes"] = check_int(
            "ttl['sweep_interval_minutes']", sweep, minimum=1
        )
    return config


def _check_namespace(namespace: object, name: str, *, allow_empty: bool = False) -> None:
    if not isinstance(namespace, tuple):
        raise InvalidInput(f"{name} must be a tuple of str labels, not {type(namespace).__name__}")
    if not namespace and not allow_empty:
        raise InvalidInput(f"{name} must not be empty: its first label is the tenant")


def _check_put_namespace(namespace: tuple[str, ...]) -> None:
    """LangGraph's own rules for a put (``BaseStore.put`` checks them too)."""
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if namespace[0] == "langgraph":
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {namespace}'
        )


def _check_value(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"value must be a dict or None, not {type(value).__name__}")
    plain = dict(value)
    if VECTORS_KEY in plain:
        raise InvalidInput(f"value uses the reserved key {VECTORS_KEY!r}")
    check_plain_json("value", plain)
    return plain


def _translate_filter(flt: object) -> dict[str, Any] | None:
    """LangGraph's filter (top-level fields, nested dicts matching nested
    fields) as the store's (dotted paths)."""
    if flt is None:
        return None
    if not isinstance(flt, dict):
        raise InvalidInput(f"filter must be a dict or None, not {type(flt).__name__}")
    out: dict[str, Any] = {}

    def walk(prefix: str, conditions: dict[Any, Any]) -> None:
        for field, condition in conditions.items():
            if not isinstance(field, str) or not field:
                raise InvalidInput(f"filter fields must be non-empty str, got {field!r}")
            if "." in field:
                raise InvalidInput(
                    f"filter field {field!r} contains '.': a LangGraph filter names "
                    "top-level fields; nest dicts to match nested fields"
                )
            path = f"{prefix}.{field}" if prefix else field
            if isinstance(condition, dict) and not any(
                isinstance(k, str) and k.startswith("$") for k in condition
            ):
                if not condition:
                    raise InvalidInput(f"filter on {path!r} is an empty dict")
                walk(path, condition)
            else:
                out[path] = condition

    walk("", flt)
    return out


def _is_number(value: object) -> bool:
    return type(value) is int or type(value) is float


class _Unstorable(Exception):
    """A value holds a number no stored value can equal."""


def _storable(value: Any) -> Any:
    """``value`` with each int beyond 64 bits that a float holds exactly as
    that float (what equals it); ``_Unstorable`` if some number (NaN, an
    infinity, another int beyond 64 bits) equals no stored value."""
    if type(value) is float:
        if not math.isfinite(value):
            raise _Unstorable
        return value
    if type(value) is int and not INT_MIN <= value <= INT_MAX:
        try:
            exact = float(value)
        except OverflowError:
            raise _Unstorable from None
        if exact != value:
            raise _Unstorable
        return exact
    if type(value) is list:
        return [_storable(item) for item in value]
    if type(value) is dict:
        return {key: _storable(item) for key, item in value.items()}
    return value


def _bound(op: str, operand: float | int) -> dict[str, Any] | None:
    """An ordering condition on a number no value holds (NaN, an infinity, an
    int beyond 64 bits) as one the store takes, as ``InMemoryStore`` compares
    (``float()`` of both sides); None when it is ``{op: operand}`` itself."""
    if type(operand) is float and math.isfinite(operand):
        return None
    if type(operand) is int and INT_MIN <= operand <= INT_MAX:
        return None
    if operand != operand:  # NaN: no comparison holds
        return _NEVER
    try:
        bound = float(operand)
    except OverflowError:
        bound = math.inf if operand > 0 else -math.inf
    if math.isfinite(bound):
        return {op: bound}
    above = bound > 0
    if (op in ("$gt", "$gte")) == above:
        return _NEVER  # above +inf, below -inf
    return _ANY_NUMBER  # below +inf, above -inf: any number


def _field_condition(condition: Any) -> Any:
    """One field's condition with its bounds beyond stored numbers rewritten
    (see ``_bound``; ``$eq``/``$ne``/``$in`` operands that no stored value can
    equal match nothing / everything); ``None`` when it always holds. Unknown
    operators are left for the store to refuse."""
    if type(condition) is not dict or not any(
        isinstance(k, str) and k.startswith("$") for k in condition
    ):
        condition = {"$eq": condition}
    kept: dict[str, Any] = {}
    number = False
    for op, operand in condition.items():
        if op in _ORDERING and _is_number(operand):
            rewritten = _bound(op, operand)
            if rewritten is _NEVER:
                return _NEVER
            if rewritten is _ANY_NUMBER:
                number = True
            else:
                kept.update(rewritten or {op: operand})
        elif op in ("$eq", "$ne"):
            try:
                kept[op] = _storable(operand)
            except _Unstorable:
                if op == "$eq":
                    return _NEVER
        elif op == "$in" and type(operand) is list:
            found = []
            for item in operand:
                try:
                    found.append(_storable(item))
                except _Unstorable:
                    continue
            kept[op] = found
        else:
            kept[op] = operand
    ordered = [kept[op] for op in _ORDERING if op in kept]
    if number and not any(_is_number(operand) for operand in ordered):
        if ordered:  # ordered against a non-number: never a number too
            return _NEVER
        kept.update(_ANY_NUMBER)
    return kept or None


def _store_filter(flt: dict[str, Any] | None) -> dict[str, Any] | None:
    """A translated LangGraph filter as the store takes it: bounds the stored
    values never hold (``±inf``, NaN, ints beyond 64 bits, which
    ``InMemoryStore`` takes) rewritten to conditions on the values they can
    hold, with the same result."""
    if flt is None:
        return None
    out: dict[str, Any] = {}
    for path, condition in flt.items():
        rewritten = _field_condition(condition)
        if rewritten is not None:
            out[path] = rewritten
    return out


def _namespace_path(path: object) -> object:
    """A list given as a namespace prefix, suffix or match path, as the tuple
    (``InMemoryStore`` takes lists there)."""
    return tuple(path) if isinstance(path, list) else path


def _check_paths(paths: object, name: str) -> list[tuple[str, str | list[str]]]:
    """Field paths, tokenized (an empty list: no field, as in LangGraph)."""
    if not isinstance(paths, list | tuple):
        raise InvalidInput(f"{name} must be a list of field paths, got {paths!r}")
    out: list[tuple[str, str | list[str]]] = []
    for path in paths:
        if not isinstance(path, str) or not path:
            raise InvalidInput(f"{name} paths must be non-empty str, got {path!r}")
        out.append((path, path if path == "$" else tokenize_path(path)))
    return out


# -- embeddings ---------------------------------------------------------------------------


def _embedding_functions(embed: object) -> tuple[_DocsFn, _QueryFn]:
    """Async ``(documents, query)`` embedding functions for ``index["embed"]``."""
    if (
        not isinstance(embed, Embeddings)
        and isinstance(embed, Embedder)
        and asyncio.iscoroutinefunction(embed.embed)
    ):
        embedder = embed

        async def documents(texts: list[str]) -> list[list[float]]:
            return await embedder.embed(texts)

        async def query(text: str) -> list[float]:
            vectors = await embedder.embed([text])
            if len(vectors) != 1:
                raise InvalidInput(f"the embedder returned {len(vectors)} vectors for one text")
            return vectors[0]

        return documents, query
    if not (isinstance(embed, str | Embeddings) or callable(embed)):
        raise InvalidInput(
            "index['embed'] must be an Embedder, a LangChain Embeddings, a function of "
            f"a list of texts or a provider string, not {type(embed).__name__}"
        )
    try:
        embeddings = ensure_embeddings(cast(Any, embed))
    except ValueError as exc:
        raise InvalidInput(f"index['embed']: {exc}") from exc
    return embeddings.aembed_documents, embeddings.aembed_query


def _check_vector(vector: object, dims: int) -> list[float]:
    if not isinstance(vector, Sequence) or len(vector) != dims:
        size = len(vector) if isinstance(vector, Sequence) else type(vector).__name__
        raise InvalidInput(f"the embedder returned a vector of {size} dimensions, not {dims}")
    try:
        floats = [float(x) for x in vector]
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"the embedder returned a non-numeric vector: {exc}") from exc
    if not all(math.isfinite(x) for x in floats):
        raise InvalidInput("the embedder returned a vector with a non-finite component")
    return floats


def _pack_vector(vector: list[float]) -> list[int]:
    """int8 components as JSON ints (numbers: the keyword index skips them)."""
    packed = quantize(vector)
    return list(struct.unpack(f"{len(packed)}b", packed))


def _score(query: list[float], stored: object) -> float | None:
    """The best cosine similarity of ``query`` and the stored vectors, or
    None when the item has none (or they are not ours)."""
    if not isinstance(stored, list) or not stored:
        return None
    best: float | None = None
    for vector in stored:
        if not (
            isinstance(vector, list) and all(type(x) is int and -128 <= x <= 127 for x in vector)
        ):
            continue
        similarity = cosine(query, struct.pack(f"{len(vector)}b", *vector))
        best = similarity if best is None else max(best, similarity)
    return best


# -- results ------------------------------------------------------------------------------


def _split(value: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The user's value and the stored vectors (None when there are none)."""
    if VECTORS_KEY not in value:
        return value, None
    user = dict(value)
    return user, user.pop(VECTORS_KEY)


def _item(stored: StoredItem) -> Item:
    value, _ = _split(stored.value)
    return Item(
        value=value,
        key=stored.key,
        namespace=stored.namespace,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
    )


def _search_item(stored: StoredItem, score: float | None) -> SearchItem:
    value, _ = _split(stored.value)
    return SearchItem(
        namespace=stored.namespace,
        key=stored.key,
        value=value,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
        score=score,
    )


def _with_tuple_paths(op: Op) -> Op:
    """``op`` with a list as its namespace prefix or match path made a tuple
    (see ``_namespace_path``)."""
    if isinstance(op, SearchOp) and isinstance(op.namespace_prefix, list):
        return op._replace(namespace_prefix=_namespace_path(op.namespace_prefix))
    if isinstance(op, ListNamespacesOp) and op.match_conditions:
        conditions = tuple(
            MatchCondition(match_type=c.match_type, path=_namespace_path(c.path))  # type: ignore[arg-type]
            if isinstance(c, MatchCondition)
            else c
            for c in op.match_conditions
        )
        return op._replace(match_conditions=conditions)
    return op


def _matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    labels = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p == "*" or p == label for label, p in zip(labels, path, strict=False))


# -- the store ----------------------------------------------------------------------------


class RedisMemStore(BaseStore):
    """A LangGraph store over a redismem ``Memory`` (see the module docstring).

    ``index``: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``)
    for vector search; None: keyword search. ``ttl``: LangGraph's
    ``TTLConfig`` (``default_ttl`` in minutes; ``refresh_on_read`` must not
    be True).
    """

    supports_ttl = True

    def __init__(
        self,
        memory: SessionMemory,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        self.memory = check_memory(memory)
        self.ttl_config = _check_ttl_config(ttl)
        self.index_config = index
        self._dims = 0
        self._fields: list[tuple[str, str | list[str]]] = []
        self._embed_documents: _DocsFn | None = None
        self._embed_query: _QueryFn | None = None
        if index is not None:
            if not isinstance(index, Mapping):
                raise InvalidInput(
                    f"index must be an IndexConfig dict or None, not {type(index).__name__}"
                )
            unknown = set(index) - _INDEX_KEYS
            if unknown:
                names = ", ".join(sorted(map(str, unknown)))
                raise InvalidInput(f"unknown index config key(s): {names}")
            self._dims = check_int("index['dims']", index.get("dims"), minimum=1)
            if index.get("embed") is None:
                raise InvalidInput(
                    "index['embed'] is required (an Embedder, Embeddings or function)"
                )
            self._embed_documents, self._embed_query = _embedding_functions(index["embed"])
            self._fields = _check_paths(index.get("fields") or ["$"], "index['fields']")

    # -- batches ---------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order (sync: on the background loop, see the module docstring)."""
        listed = list(ops)
        return run_sync(
            self.memory,
            lambda m: self._batch(m, listed),
            "RedisMemStore.batch()",
            "abatch() (or aget/aput/asearch/...)",
        )

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order on the ``Memory``."""
        return await self._batch(self.memory, list(ops))

    def _check(self, op: object) -> None:
        if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
            raise InvalidInput(f"unknown store operation: {type(op).__name__}")
        if isinstance(op, PutOp) and isinstance(op.namespace, tuple):
            _check_put_namespace(op.namespace)
        if isinstance(op, GetOp | PutOp):
            _check_namespace(op.namespace, "namespace")
            check_text("key", op.key)
        elif isinstance(op, SearchOp):
            _check_namespace(op.namespace_prefix, "namespace_prefix", allow_empty=True)
        else:
            for condition in op.match_conditions or ():
                _check_namespace(condition.path, "match condition path", allow_empty=True)
                if condition.match_type not in ("prefix", "suffix"):
                    raise InvalidInput(f"unknown match type {condition.match_type!r}")
        validate_op_namespace(op)
        if isinstance(op, PutOp) and op.value is not None:
            _check_value(op.value)
            _ttl_minutes(op.ttl, "ttl")
            if self._embed_documents is not None and op.index not in (None, False):
                _check_paths(op.index, "index")

    def _texts(self, op: PutOp) -> list[str]:
        """The texts of a put to embed (none without an index config)."""
        if self._embed_documents is None or op.value is None or op.index is False:
            return []
        fields = self._fields if op.index is None else _check_paths(op.index, "index")
        value = dict(op.value)
        return [text for _, path in fields for text in get_text_at_path(value, path)]

    async def _embed(
        self, ops: Sequence[Op]
    ) -> tuple[dict[str, list[int]], dict[str, list[float]]]:
        """The packed vectors of the puts' texts and the vectors of the queries."""
        texts = sorted({t for op in ops if isinstance(op, PutOp) for t in self._texts(op)})
        queries = sorted(
            {op.query for op in ops if isinstance(op, SearchOp) and op.query}
            if self._embed_query is not None
            else set()
        )
        documents: dict[str, list[int]] = {}
        if texts and self._embed_documents is not None:
            vectors = await self._embed_documents(texts)
            if len(vectors) != len(texts):
                raise InvalidInput(
                    f"the embedder returned {len(vectors)} vectors for {len(texts)} texts"
                )
            documents = {
                text: _pack_vector(_check_vector(vector, self._dims))
                for text, vector in zip(texts, vectors, strict=True)
            }
        found: dict[str, list[float]] = {}
        if queries and self._embed_query is not None:
            embed_query = self._embed_query
            vectors = await asyncio.gather(*(embed_query(q) for q in queries))
            found = {q: _check_vector(v, self._dims) for q, v in zip(queries, vectors, strict=True)}
        return documents, found

    async def _batch(self, memory: SessionMemory, ops: list[Op]) -> list[Result]:
        ops = [_with_tuple_paths(op) for op in ops]
        for op in ops:
            self._check(op)
        documents, queries = await self._embed(ops)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                stored = await memory.store.get(op.namespace, op.key)
                results.append(None if stored is None else _item(stored))
            elif isinstance(op, PutOp):
                await self._put(memory, op, documents)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(memory, op, queries))
            else:
                results.append(await self._list_namespaces(memory, op))
        return results

    async def _put(self, memory: SessionMemory, op: PutOp, documents: dict[str, list[int]]) -> None:
        if op.value is None:
            await memory.store.delete(op.namespace, op.key)
            return
        value = _check_value(op.value)
        vectors = [documents[text] for text in self._texts(op)]
        if vectors:
            value[VECTORS_KEY] = vectors
        minutes = _ttl_minutes(op.ttl, "ttl")
        ttl = None if minutes is None else minutes * 60
        await memory.store.put(op.namespace, op.key, value, ttl=ttl)

    async def _search(
        self, memory: SessionMemory, op: SearchOp, queries: dict[str, list[float]]
    ) -> list[SearchItem]:
        flt = _store_filter(_translate_filter(op.filter))
        limit = check_int("limit", op.limit)
        offset = check_int("offset", op.offset)
        query_vector = queries.get(op.query) if op.query else None
        if query_vector is None:
            found = await memory.store.search(
                op.namespace_prefix, query=op.query, filter=flt, limit=limit, offset=offset
            )
            return [_search_item(item, item.score) for item in found]
        candidates = await memory.store.search(
            op.namespace_prefix, filter=flt, limit=MAX_VECTOR_CANDIDATES
        )
        scored: list[tuple[float, StoredItem]] = []
        scoreless: list[StoredItem] = []
        for item in candidates:  # newest first: ties keep that order
            score = _score(query_vector, item.value.get(VECTORS_KEY))
            if score is None:
                scoreless.append(item)
            else:
                scored.append((score, item))
        scored.sort(key=lambda pair: -pair[0])
        ranked = [_search_item(item, score) for score, item in scored]
        ranked += [_search_item(item, None) for item in scoreless]
        return ranked[offset : offset + limit]

    async def _list_namespaces(
        self, memory: SessionMemory, op: ListNamespacesOp
    ) -> list[tuple[str, ...]]:
        max_depth = op.max_depth
        if max_depth is not None:
            check_int("max_depth", max_depth, minimum=1)
        limit = check_int("limit", op.limit)
        offset = check_int("offset", op.offset)
        conditions = list(op.match_conditions or ())
        # The first prefix condition narrows the read to one tenant when it can.
        prefix = next((c.path for c in conditions if c.match_type == "prefix"), None)
        found = await memory.store.list_namespaces(prefix=prefix, limit=_ALL)
        matching = {
            namespace if max_depth is None else namespace[:max_depth]
            for namespace in found
            if all(_matches(namespace, condition) for condition in conditions)
        }
        return sorted(matching)[offset : offset + limit]

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the background twin of the ``Memory`` the sync methods use
        (the next sync call opens another). The ``Memory`` stays open."""
        close_twin(self.memory)

    async def aclose(self) -> None:
        """``close()`` for async code."""
        await aclose_twin(self.memory)
