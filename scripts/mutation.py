"""A small mutation-testing driver for redismem's core modules.

It applies one classic mutation at a time to a copy of a module, runs the
test files that exercise that module (``pytest -x -q``, each run with a time
limit) and records whether the tests noticed. See ``docs/mutation-testing.md``
for the operators, the module/test map and the last results.

Run it on a checkout that nobody edits (e.g. a git worktree), from the
repository's virtualenv::

    python scripts/mutation.py list   --root /tmp/mut
    python scripts/mutation.py run    --root /tmp/mut --jobs 2 --out /tmp/mut-results.jsonl
    python scripts/mutation.py report /tmp/mut-results.jsonl
    python scripts/mutation.py show   --root /tmp/mut keys 12      # the diff of one mutant
    python scripts/mutation.py apply  --root /tmp/mut keys 12 --into /tmp/copy

Each worker copies ``redismem/``, ``workers/``, ``tests/`` and
``pyproject.toml`` of ``--root`` into a scratch directory and runs pytest
there with ``PYTHONPATH`` pointing at it, so the installed (editable) package
is never used and nothing under ``--root`` is modified.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

# -- what is mutated and which tests judge it ----------------------------------

#: module -> (file, functions to mutate (None: every function and module
#: constant), test files in the order they run).
MODULES: dict[str, tuple[str, tuple[str, ...] | None, tuple[str, ...]]] = {
    "keys": (
        "redismem/core/keys.py",
        None,
        ("tests/test_keys.py", "tests/test_memory_input.py", "tests/test_memory_clear.py"),
    ),
    "codec": (
        "redismem/core/codec.py",
        None,
        (
            "tests/test_memory_basic.py",
            "tests/test_memory_faults.py",
            "tests/test_summarize_pass.py",
            "tests/test_stored_formats.py",
        ),
    ),
    "strategies": (
        "redismem/context/strategies.py",
        None,
        ("tests/test_strategies.py", "tests/test_providers.py", "tests/test_strategy_options.py"),
    ),
    "summarize": (
        "redismem/summarization/job.py",
        None,
        (
            "tests/test_summarize_pass.py",
            "tests/test_faults_sessions.py",
            "tests/test_summarize_outcomes.py",
        ),
    ),
    "scripts": (
        "redismem/core/scripts.py",
        None,
        (
            "tests/test_memory_basic.py",
            "tests/test_faults_server.py",
            "tests/test_faults_sessions.py",
        ),
    ),
    "connection": (
        "redismem/core/connection.py",
        ("_reply_code", "map_error", "RetryPolicy"),
        (
            "tests/test_connection.py",
            "tests/test_memory_faults.py",
            "tests/test_faults_server.py",
            "tests/test_memory_basic.py",
            "tests/test_error_mapping_and_retries.py",
        ),
    ),
    "models": (
        "redismem/models.py",
        ("input_message", "written_entry", "stamp_written"),
        ("tests/test_memory_input.py", "tests/test_memory_basic.py"),
    ),
    "waiter": (
        "redismem/core/replies.py",
        None,
        ("tests/test_waiter.py", "tests/test_transport.py"),
    ),
    "lua": (
        "redismem/core/lua.py",
        None,
        ("tests/test_lua_sources.py", "tests/test_memory_basic.py"),
    ),
    "backend": (
        "redismem/core/backend.py",
        None,
        ("tests/test_backend.py", "tests/test_memory_basic.py", "tests/test_memory_clear.py"),
    ),
    "epochs": (
        "redismem/core/epochs.py",
        None,
        ("tests/test_backend.py", "tests/test_memory_clear.py", "tests/test_seams.py"),
    ),
}

#: Backend-parametrized tests run on real Redis only (the Python code under
#: test is the same on both backends); tests without the parameter all run.
PYTEST_ARGS = (
    "-x",
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:langsmith_plugin",
    "--timeout",
    "60",
    "-k",
    "not embedded",
)

# -- mutants -------------------------------------------------------------------

_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_ARITH: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Pow: ast.Mult,
}
_DELETABLE = (
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Raise,
    ast.If,
    ast.For,
    ast.While,
    ast.Break,
    ast.Continue,
)
_LOG_NAMES = frozenset({"logger", "logging", "warnings"})


@dataclass(frozen=True)
class Mutant:
    module: str
    index: int  # position in generation order within the module
    node: int  # position of the mutated node in ast.walk order
    op: str
    variant: int
    line: int
    where: str  # qualified name of the enclosing function ("<module>" at top level)
    text: str  # the changed source line after mutation (for reports)


def _annotate(tree: ast.Module) -> None:
    """Give every node ``_parent`` and ``_scope`` (qualified function name)."""

    def visit(node: ast.AST, parent: ast.AST | None, scope: str) -> None:
        node._parent = parent  # type: ignore[attr-defined]
        node._scope = scope  # type: ignore[attr-defined]
        inner = scope
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            inner = node.name if scope == "<module>" else f"{scope}.{node.name}"
        for child in ast.iter_child_nodes(node):
            visit(child, node, inner)

    visit(tree, None, "<module>")


def _ancestors(node: ast.AST) -> Iterator[ast.AST]:
    parent = getattr(node, "_parent", None)
    while parent is not None:
        yield parent
        parent = getattr(parent, "_parent", None)


def _is_docstring(node: ast.AST) -> bool:
    parent = getattr(node, "_parent", None)
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Constant):
        return False
    if not isinstance(node.value.value, str):
        return False
    body = getattr(parent, "body", None)
    return bool(body) and body[0] is node


def _in_annotation_or_decorator(node: ast.AST) -> bool:
    child = node
    for parent in _ancestors(node):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
            child in parent.decorator_list or child is getattr(parent, "returns", None)
        ):
            return True
        if isinstance(parent, ast.arg) and child is parent.annotation:
            return True
        if isinstance(parent, ast.AnnAssign) and child is parent.annotation:
            return True
        if (
            isinstance(parent, ast.Subscript)
            and isinstance(parent.value, ast.Name)
            and parent.value.id in {"Literal", "TypeVar"}
        ):
            return True
        child = parent
    return False


def _in_message(node: ast.AST) -> bool:
    """Inside the text of a raised error or a log/warning call, or ``__all__``."""
    for parent in _ancestors(node):
        if isinstance(parent, ast.Raise):
            return True
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Attribute)
            and isinstance(parent.func.value, ast.Name)
            and parent.func.value.id in _LOG_NAMES
        ):
            return True
        if isinstance(parent, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in parent.targets
        ):
            return True
    return False


def _selected(node: ast.AST, functions: tuple[str, ...] | None) -> bool:
    scope: str = getattr(node, "_scope", "<module>")
    if functions is None:
        return True
    return any(scope == f or scope.startswith(f + ".") for f in functions)


def _in_function(node: ast.AST) -> bool:
    return any(isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef) for p in _ancestors(node))


def _module_level_constant(node: ast.AST) -> bool:
    """Inside the value of a module-level or class-level assignment."""
    for parent in _ancestors(node):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return False
        if isinstance(parent, ast.Assign | ast.AnnAssign):
            return True
    return False


def _str_operand(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)


Apply = Callable[[ast.AST], None]


def _operations(node: ast.AST) -> list[tuple[str, Apply]]:
    """The mutations applicable to ``node``: (operator name, apply in place)."""
    ops: list[tuple[str, Apply]] = []
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _FLIP:

                def flip(n: ast.AST, i: int = i) -> None:
                    assert isinstance(n, ast.Compare)
                    n.ops[i] = _FLIP[type(n.ops[i])]()

                ops.append(("compare-flip", flip))
            if type(op) in _BOUNDARY:

                def boundary(n: ast.AST, i: int = i) -> None:
                    assert isinstance(n, ast.Compare)
                    n.ops[i] = _BOUNDARY[type(n.ops[i])]()

                ops.append(("compare-boundary", boundary))
    elif isinstance(node, ast.BoolOp):

        def swap(n: ast.AST) -> None:
            assert isinstance(n, ast.BoolOp)
            n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()

        ops.append(("and-or-swap", swap))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        ops.append(("drop-not", lambda n: _replace(n, n.operand)))  # type: ignore[attr-defined]
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        if not (_str_operand(node.left) or _str_operand(node.right)):

            def arith(n: ast.AST) -> None:
                assert isinstance(n, ast.BinOp)
                n.op = _ARITH[type(n.op)]()

            ops.append(("arith-swap", arith))
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            ops.append(("constant", lambda n: setattr(n, "value", not n.value)))
        elif isinstance(value, int):
            ops.append(("constant+1", lambda n: setattr(n, "value", n.value + 1)))
            ops.append(("constant-1", lambda n: setattr(n, "value", n.value - 1)))
        elif isinstance(value, float):
            ops.append(("constant", lambda n: setattr(n, "value", n.value * 2 + 1)))
        elif isinstance(value, str) and not isinstance(
            getattr(node, "_parent", None), ast.JoinedStr
        ):
            ops.append(("constant", lambda n: setattr(n, "value", n.value + "X")))
        elif isinstance(value, bytes):
            ops.append(("constant", lambda n: setattr(n, "value", n.value + b"X")))
    elif (
        isinstance(node, ast.JoinedStr)
        and not isinstance(getattr(node, "_parent", None), ast.FormattedValue)
        and any(isinstance(v, ast.Constant) for v in node.values)
    ):

        def fstring(n: ast.AST) -> None:
            assert isinstance(n, ast.JoinedStr)
            for v in n.values:
                if isinstance(v, ast.Constant):
                    v.value = v.value + "X"
                    return

        ops.append(("constant", fstring))
    if (
        isinstance(node, ast.Return)
        and node.value is not None
        and not (isinstance(node.value, ast.Constant) and node.value.value is None)
    ):
        ops.append(("return-none", lambda n: setattr(n, "value", ast.Constant(None))))
    if isinstance(node, _DELETABLE) and _in_function(node) and not _is_docstring(node):
        ops.append(("delete-statement", lambda n: _replace(n, ast.Pass())))
    return ops


def _replace(node: ast.AST, new: ast.AST) -> None:
    """Put ``new`` where ``node`` is in its parent."""
    parent = node._parent  # type: ignore[attr-defined]
    for field, value in ast.iter_fields(parent):
        if value is node:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is node:
                    value[i] = new
                    return
    raise AssertionError("node not found in its parent")


def _candidate(node: ast.AST, functions: tuple[str, ...] | None) -> bool:
    if _in_annotation_or_decorator(node) or _is_docstring(node):
        return False
    if isinstance(node, ast.Constant | ast.JoinedStr) and _in_message(node):
        return False
    if isinstance(node, ast.Constant) and isinstance(getattr(node, "_parent", None), ast.Expr):
        return False  # a bare string statement
    if not _selected(node, functions):
        return False
    if _in_function(node):
        return True
    # Outside functions only constants count (module constants, field defaults).
    return isinstance(node, ast.Constant | ast.JoinedStr) and _module_level_constant(node)


def generate(root: Path, module: str) -> list[Mutant]:
    path, functions, _ = MODULES[module]
    source = (root / path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    _annotate(tree)
    mutants: list[Mutant] = []
    for node_index, node in enumerate(ast.walk(tree)):
        if not _candidate(node, functions):
            continue
        for variant, (op, _) in enumerate(_operations(node)):
            mutants.append(
                Mutant(
                    module=module,
                    index=0,
                    node=node_index,
                    op=op,
                    variant=variant,
                    line=getattr(node, "lineno", 0),
                    where=getattr(node, "_scope", "<module>"),
                    text="",
                )
            )
    mutants.sort(key=lambda m: (m.line, m.node, m.variant))
    out = []
    for i, m in enumerate(mutants):
        mutated = mutate_source(source, m)
        changed = _changed_line(source, mutated)
        out.append(Mutant(**{**asdict(m), "index": i, "text": changed}))
    return out


def mutate_source(source: str, mutant: Mutant) -> str:
    tree = ast.parse(source)
    _annotate(tree)
    node = next(n for i, n in enumerate(ast.walk(tree)) if i == mutant.node)
    _, apply = _operations(node)[mutant.variant]
    apply(node)
    for n in ast.walk(tree):  # drop helper attributes before unparsing
        for attr in ("_parent", "_scope"):
            if hasattr(n, attr):
                delattr(n, attr)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _changed_line(original: str, mutated: str) -> str:
    base = ast.unparse(ast.parse(original)).splitlines()
    after = mutated.splitlines()
    changed = [
        line[1:].strip()
        for line in difflib.unified_diff(base, after, lineterm="", n=0)
        if line.startswith("+") and not line.startswith("+++")
    ]
    return " | ".join(changed)[:200]


def diff(root: Path, mutant: Mutant) -> str:
    path = MODULES[mutant.module][0]
    source = (root / path).read_text(encoding="utf-8")
    base = ast.unparse(ast.parse(source)).splitlines()
    after = mutate_source(source, mutant).splitlines()
    return "\n".join(difflib.unified_diff(base, after, path, path + " (mutant)", lineterm=""))


# -- running -------------------------------------------------------------------

_COPIED = ("redismem", "workers", "tests", "docs", "README.md", "pyproject.toml")


def _scratch_copy(root: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for name in _COPIED:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, into / name)


def _pytest(workdir: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    env = dict(os.environ, PYTHONPATH=str(workdir), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends its redis-server too
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", time.monotonic() - started, ""
    elapsed = time.monotonic() - started
    failed = next(
        (line for line in stdout.splitlines() if line.startswith(("FAILED", "ERROR"))), ""
    )
    if proc.returncode == 0:
        return "survived", elapsed, ""
    if proc.returncode == 1:
        return "killed", elapsed, failed
    # 2: interrupted/collection error (e.g. the module no longer imports),
    # 3/4: internal/usage error, 5: no tests. A mutant that breaks import is
    # caught by the tests, so it counts as killed; others are reported.
    if proc.returncode == 2:
        return "killed", elapsed, failed or "collection/import error"
    return f"error{proc.returncode}", elapsed, stdout[-300:] + stderr[-300:]


class Worker:
    def __init__(self, root: Path, scratch: Path, extra_tests: list[str]) -> None:
        self.root = root
        self.dir = scratch
        _scratch_copy(root, scratch)
        self.extra = extra_tests
        for extra in extra_tests:  # new test files from elsewhere
            src = Path(extra)
            if src.is_absolute():
                shutil.copy2(src, scratch / "tests" / src.name)

    def tests_for(self, module: str) -> list[str]:
        tests = list(MODULES[module][2])
        for extra in self.extra:
            name = f"tests/{Path(extra).name}"
            if name not in tests:
                tests.insert(0, name)  # new tests are the cheapest: run them first
        return tests

    def run(self, mutant: Mutant | None, module: str, timeout: float) -> tuple[str, float, str]:
        path = MODULES[module][0]
        target = self.dir / path
        original = (self.root / path).read_text(encoding="utf-8")
        try:
            if mutant is not None:
                target.write_text(mutate_source(original, mutant), encoding="utf-8")
            return _pytest(self.dir, self.tests_for(module), timeout)
        finally:
            target.write_text(original, encoding="utf-8")


def _sample(mutants: list[Mutant], count: int | None) -> list[Mutant]:
    """``count`` mutants spread evenly over the generation order."""
    if count is None or count >= len(mutants):
        return mutants
    step = len(mutants) / count
    return [mutants[int(i * step)] for i in range(count)]


def cmd_list(args: argparse.Namespace) -> None:
    root = Path(args.root)
    total = 0
    for module in args.modules or MODULES:
        mutants = generate(root, module)
        total += len(mutants)
        by_op = Counter(m.op for m in mutants)
        print(f"{module:12} {len(mutants):5}  {dict(sorted(by_op.items()))}")
        if args.verbose:
            for m in mutants:
                print(f"   {m.index:4} L{m.line:<4} {m.op:17} {m.where}: {m.text}")
    print(f"{'total':12} {total:5}")


def cmd_run(args: argparse.Namespace) -> None:
    root = Path(args.root).resolve()
    modules = args.modules or list(MODULES)
    scratch = Path(tempfile.mkdtemp(prefix="redismem-mutation-"))
    workers = [Worker(root, scratch / f"w{i}", args.extra_tests) for i in range(args.jobs)]
    free: list[Worker] = list(workers)
    lock = threading.Condition()
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 - shared by the threads

    def with_worker(fn: Callable[[Worker], tuple[str, float, str]]) -> tuple[str, float, str]:
        with lock:
            while not free:
                lock.wait()
            worker = free.pop()
        try:
            return fn(worker)
        finally:
            with lock:
                free.append(worker)
                lock.notify()

    plan: list[tuple[Mutant, float]] = []
    for module in modules:
        status, baseline, detail = with_worker(lambda w, m=module: w.run(None, m, 900))
        print(f"[baseline] {module}: {status} in {baseline:.1f}s {detail}", flush=True)
        if status != "survived":
            sys.exit(f"the unmutated tests of {module} do not pass: {detail}")
        mutants = generate(root, module)
        if args.ids and module in args.ids:
            mutants = [m for m in mutants if m.index in args.ids[module]]
        else:
            mutants = _sample(mutants, args.sample.get(module) if args.sample else None)
        timeout = max(30.0, baseline * args.timeout_factor)
        plan += [(m, timeout) for m in mutants]
    print(f"{len(plan)} mutants to run on {args.jobs} worker(s)", flush=True)

    def one(item: tuple[Mutant, float]) -> None:
        mutant, timeout = item
        status, elapsed, detail = with_worker(lambda w: w.run(mutant, mutant.module, timeout))
        record = {**asdict(mutant), "status": status, "seconds": round(elapsed, 1)}
        record["detail"] = detail
        with lock:
            out.write(json.dumps(record) + "\n")
            out.flush()
        print(
            f"{status:9} {mutant.module}#{mutant.index} L{mutant.line} {mutant.op} "
            f"{elapsed:.0f}s  {mutant.text[:90]}",
            flush=True,
        )

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, plan))
    out.close()
    shutil.rmtree(scratch, ignore_errors=True)


def cmd_report(args: argparse.Namespace) -> None:
    latest: dict[tuple[str, int], dict[str, object]] = {}
    for path in args.results:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            latest[(record["module"], record["index"])] = record
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for record in latest.values():
        per[str(record["module"])][str(record["status"])] += 1
    print("| module | run | killed | timeout | survived | other | score |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    totals: Counter[str] = Counter()
    for module in MODULES:
        if module not in per:
            continue
        c = per[module]
        totals.update(c)
        _row(module, c)
    _row("**all**", totals)
    if args.survivors:
        for record in sorted(latest.values(), key=lambda r: (str(r["module"]), int(r["index"]))):  # type: ignore[call-overload]
            if record["status"] == "survived":
                print(
                    f"{record['module']}#{record['index']} L{record['line']} "
                    f"{record['op']} {record['where']}: {record['text']}"
                )


def _row(name: str, c: Counter[str]) -> None:
    run = sum(c.values())
    other = run - c["killed"] - c["timeout"] - c["survived"]
    detected = c["killed"] + c["timeout"]
    score = f"{100 * detected / (run - other):.0f}%" if run - other else "-"
    print(
        f"| {name} | {run} | {c['killed']} | {c['timeout']} | {c['survived']} | {other} | {score} |"
    )


def _find(root: Path, module: str, index: int) -> Mutant:
    return next(m for m in generate(root, module) if m.index == index)


def cmd_show(args: argparse.Namespace) -> None:
    root = Path(args.root)
    for index in args.index:
        print(diff(root, _find(root, args.module, index)))


def cmd_apply(args: argparse.Namespace) -> None:
    root = Path(args.root)
    mutant = _find(root, args.module, args.index)
    path = MODULES[args.module][0]
    source = (root / path).read_text(encoding="utf-8")
    (Path(args.into) / path).write_text(mutate_source(source, mutant), encoding="utf-8")
    print(f"wrote {Path(args.into) / path}: {mutant.op} at L{mutant.line}: {mutant.text}")


def _pairs(values: list[str]) -> dict[str, int]:
    return {k: int(v) for k, v in (item.split("=") for item in values)}


def _ids(values: list[str]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for item in values:
        module, _, index = item.partition("#")
        out[module].add(int(index))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("list", help="count (or with -v list) the mutants")
    p.add_argument("--root", default=".")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("modules", nargs="*")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("run", help="run mutants and append results (JSON lines) to --out")
    p.add_argument("--root", default=".")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument(
        "--sample",
        type=lambda s: _pairs(s.split(",")),
        default=None,
        help="module=count,... : run count mutants spread evenly",
    )
    p.add_argument(
        "--ids",
        type=lambda s: _ids(s.split(",")),
        default=None,
        help="module#index,... : run only these mutants",
    )
    p.add_argument(
        "--extra-tests",
        nargs="*",
        default=[],
        help="test files (absolute paths) copied in and run first",
    )
    p.add_argument("--timeout-factor", type=float, default=3.0)
    p.add_argument("modules", nargs="*")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("report", help="markdown table of the latest result per mutant")
    p.add_argument("results", nargs="+")
    p.add_argument("--survivors", action="store_true")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("show", help="diff of mutants")
    p.add_argument("--root", default=".")
    p.add_argument("module")
    p.add_argument("index", type=int, nargs="+")
    p.set_defaults(fn=cmd_show)

    p = sub.add_parser("apply", help="write one mutant's module into another checkout")
    p.add_argument("--root", default=".")
    p.add_argument("module")
    p.add_argument("index", type=int)
    p.add_argument("--into", required=True)
    p.set_defaults(fn=cmd_apply)

    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
