#!/usr/bin/env python3
"""The import graph of the ``dynoqueue`` package, checked against its layering.

Lists every import edge between dynoqueue modules (an import inside a function or method is
marked ``lazy``; one under ``if TYPE_CHECKING:`` is marked ``typing`` and never runs), gives
each module a layer, and prints:

* upward edges: a module importing one of a higher layer;
* sideways edges: a product layer importing another product layer;
* cycles: modules that import each other, directly or through others (lazy and ``typing``
  edges included: either still couples the two modules both ways).

``--check`` exits 1 if an upward or sideways edge, or a cycle, is not in the allowlists below.

Layers, bottom to top (what the code does, not only the design notes: the façades build
their clients with ``connect.builders``, so ``connect/`` sits below them; ``worker/`` is
re-exported by the package's front doors, ``dynoqueue`` and ``dynoqueue.asyncio``, so it sits
below them):

0 base      errors, scripts (Lua files loaded by the core), cli_args (argparse types)
1 model     model/
2 core      core/ (sans-IO operations)
3 io        io/ (sync and asyncio drivers)
4 connect   connect/ (client builders)
5 facade    queue.py, queues.py, asyncio/queue.py, asyncio/queues.py
6 worker    worker/ (driven by any queue object; the front doors re-export Worker)
7 api       dynoqueue/__init__.py, dynoqueue/asyncio/__init__.py (the public names)
8 product   metrics/, conductor/, server/, ops/, cli.py, __main__.py, embedded/, flights/,
            demo/, spark/, tracing/: each on the public API; sideways edges between them are listed and
            must be allowlisted.

An edge goes to the module named: ``from . import x`` is an edge to ``pkg.x`` when that is a
module, else to ``pkg`` (its ``__init__``). The parent packages Python imports on the way are
not counted as edges.

Run: ``python tools/import_graph.py [--check] [--edges]``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "dynoqueue"

LAYERS = ["base", "model", "core", "io", "connect", "facade", "worker", "api", "product"]

#: Module (or package prefix) -> layer; the longest matching prefix wins.
LAYER_OF = {
    "dynoqueue.errors": "base",
    "dynoqueue.scripts": "base",
    "dynoqueue.cli_args": "base",
    "dynoqueue.model": "model",
    "dynoqueue.core": "core",
    "dynoqueue.io": "io",
    "dynoqueue.connect": "connect",
    "dynoqueue.queue": "facade",
    "dynoqueue.queues": "facade",
    "dynoqueue.asyncio.queue": "facade",
    "dynoqueue.asyncio.queues": "facade",
    "dynoqueue.worker": "worker",
    "dynoqueue": "api",
    "dynoqueue.asyncio": "api",
    "dynoqueue.metrics": "product",
    "dynoqueue.conductor": "product",
    "dynoqueue.server": "product",
    "dynoqueue.ops": "product",
    "dynoqueue.cli": "product",
    "dynoqueue.__main__": "product",
    "dynoqueue.embedded": "product",
    "dynoqueue.demo": "product",
    "dynoqueue.spark": "product",
    "dynoqueue.tracing": "product",
    "dynoqueue.kombu": "product",
    "dynoqueue.dramatiq": "product",
}

#: The product a product-layer module belongs to (for sideways edges): its first part below
#: ``dynoqueue``; ``cli`` and ``__main__`` belong to ``ops`` (the CLI layer).
CLI_LAYER = {"cli", "__main__"}

#: Upward edges allowed: (importer, imported) -> why.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

#: Sideways edges between products allowed: (importer's product, imported product) -> why.
ALLOWED_SIDEWAYS: dict[tuple[str, str], str] = {
    # The CLI layer is the one front end: it dispatches to each product's subcommands.
    ("ops", "demo"): "the CLI runs 'dynoqueue demo'",
    ("ops", "server"): "'dynoqueue serve' starts the HTTP server",
    ("ops", "metrics"): "'dynoqueue stats' prints the metrics' read",
    ("ops", "embedded"): "'dynoqueue dev' runs a local topology in the foreground",
    # Built on another product:
    ("metrics", "worker"): "WorkerMetrics is a WorkerHooks (metrics/counters.py)",
    ("server", "metrics"): "the server serves the metrics' reads and Prometheus endpoint",
    ("demo", "embedded"): "the demos start their own redis-servers",
    ("demo", "spark"): "the Spark demo runs on the dynoqueue data source",
    ("kombu", "tracing"): "a traced publish carries Celery's trace context as the message's "
                          "creation context (only when dynoqueue.tracing is instrumented)",
}

#: Cycles allowed: frozenset of the modules in the cycle -> why.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    kind: str  # "top", "lazy" or "typing"

    def __str__(self) -> str:
        mark = "" if self.kind == "top" else f" ({self.kind})"
        return (f"{self.importer} [{layer(self.importer)}] -> {self.imported} "
                f"[{layer(self.imported)}]{mark}  line {self.line}")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    out: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer(module: str) -> str:
    """The layer of ``module`` (the longest matching prefix of :data:`LAYER_OF`)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = LAYER_OF.get(".".join(parts[:end]))
        if found is not None:
            return found
    raise KeyError(f"no layer for {module}: add it to LAYER_OF")


def rank(module: str) -> int:
    return LAYERS.index(layer(module))


def product(module: str) -> str:
    part = module.split(".")[1]
    return "ops" if part in CLI_LAYER else part


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with its kind (top, lazy, typing)."""

    def walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, kind
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, "typing" if kind == "typing" else "lazy")
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), "typing")
                for sub in child.orelse:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), kind)
            else:
                yield from walk(child, kind)

    yield from walk(tree, "top")


def edges(known: dict[str, Path]) -> list[Edge]:
    """Every import edge between modules of the package."""
    out: set[Edge] = set()
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, kind in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".")
                    drop = node.level - 1 if is_package else node.level
                    base = base[:len(base) - drop] if drop else base
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in known else source)
            for target in targets:
                while target and target not in known:  # "import a.b.c" of a name: its module
                    target = target.rpartition(".")[0]
                if target and target != name and target.split(".")[0] == PACKAGE:
                    out.add(Edge(name, target, node.lineno, kind))
    return sorted(out, key=lambda e: (e.importer, e.imported, e.line))


def cycles(all_edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), every edge."""
    graph: dict[str, set[str]] = {}
    for edge in all_edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 on an upward or sideways edge or a cycle not allowlisted")
    parser.add_argument("--edges", action="store_true", help="print every edge too")
    args = parser.parse_args(argv)

    known = modules()
    all_edges = edges(known)
    runtime = [e for e in all_edges if e.kind != "typing"]
    upward = [e for e in runtime if rank(e.imported) > rank(e.importer)]
    sideways = [e for e in runtime if layer(e.importer) == layer(e.imported) == "product"
                and product(e.importer) != product(e.imported)]
    loops = cycles(all_edges)

    if args.edges:
        print(f"edges ({len(all_edges)}):")
        for edge in all_edges:
            print(f"  {edge}")
    bad: list[str] = []
    print(f"upward edges: {len(upward)}")
    for edge in upward:
        why = ALLOWED_UPWARD.get((edge.importer, edge.imported))
        print(f"  {edge}" + (f"  [allowed: {why}]" if why else ""))
        if why is None:
            bad.append(f"upward: {edge}")
    print(f"sideways edges between products: {len(sideways)}")
    for edge in sideways:
        why = ALLOWED_SIDEWAYS.get((product(edge.importer), product(edge.imported)))
        print(f"  {edge}" + (f"  [allowed: {why}]" if why else ""))
        if why is None:
            bad.append(f"sideways: {edge}")
    print(f"cycles: {len(loops)}")
    for loop in loops:
        why = ALLOWED_CYCLES.get(frozenset(loop))
        print("  " + " <-> ".join(loop) + (f"  [allowed: {why}]" if why else ""))
        if why is None:
            bad.append("cycle: " + " <-> ".join(loop))
    if args.check and bad:
        print(f"\n{len(bad)} not allowed:", file=sys.stderr)
        for line in bad:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
