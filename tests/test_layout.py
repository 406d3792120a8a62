"""The packages' layout: no module of edgeseq, export or firmware_sim is part of an import
cycle, and training, tuning and reports import one another one way only (tune -> report ->
train, tune -> train). Read from the source with `ast`, nothing imported: an import inside a
function or under `TYPE_CHECKING` counts as much as one at the top of a module, and so does a
package's `__init__` that a module names (`from edgeseq.runtime import native` imports
edgeseq.runtime too)."""

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("edgeseq", "export", "firmware_sim")     # edgeseq.tune imports export and firmware_sim, which import edgeseq
WATCHED = ("edgeseq.train", "edgeseq.tune", "edgeseq.report")


def modules(root: Path) -> dict:
    """{dotted name: path} of every module of PACKAGES under `root`."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if all(p.isidentifier() for p in parts):
                out[".".join(parts)] = path
    return out


def compiled(root: Path) -> set:
    """Dotted names of the C extension modules built in PACKAGES (a `<name>.c` that defines
    `PyInit_<name>`): they import nothing of ours, so importing one is an import of it alone,
    not of the package it lies in."""
    out = set()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.c")):
            if f"PyInit_{path.stem}(" in path.read_text(encoding="utf-8", errors="replace"):
                out.add(".".join(path.relative_to(root).with_suffix("").parts))
    return out


def imports(name: str, path: Path, known: dict, root: Path) -> dict:
    """{module of `known` that `name` imports: 'file:line' of its first import}, from every import
    statement in the file, wherever it stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    rel = path.relative_to(root).as_posix()
    found = {}

    def add(target: str, line: int):
        while target and target not in known:          # `import a.b.c` of a package without c's file
            target = target.rpartition(".")[0]
        if target and target != name:
            found.setdefault(target, f"{rel}:{line}")

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base in known:
                add(base, node.lineno)
            for alias in node.names:                   # `from pkg import submodule`
                if f"{base}.{alias.name}" in known:
                    add(f"{base}.{alias.name}", node.lineno)
    return found


def import_graph(root: Path) -> dict:
    """{module: {imported module: where}} over every module of PACKAGES under `root` (an import
    of a compiled module is an edge to it; it has none of its own)."""
    known = modules(root)
    targets = {**known, **dict.fromkeys(compiled(root))}
    return {name: imports(name, path, targets, root) for name, path in known.items()}


def group(name: str) -> str:
    """The WATCHED package a module belongs to, else the module itself."""
    return next((w for w in WATCHED if name == w or name.startswith(w + ".")), name)


def by_package(graph: dict) -> dict:
    """The graph with each WATCHED package's modules as one node (imports inside one dropped)."""
    out = {}
    for name, targets in graph.items():
        edges = out.setdefault(group(name), {})
        for target, where in targets.items():
            if group(target) != group(name):
                edges.setdefault(group(target), where)
    return out


def cycle_through(graph: dict, start: str) -> list | None:
    """A shortest import path from `start` back to `start`, as [(module, where it imports the next)], or None."""
    prev = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in graph.get(node, {}):
            if nxt in prev:
                continue
            prev[nxt] = node
            if nxt == start:
                path, at = [], start
                while True:
                    before = prev[at]
                    path.append((before, graph[before][at]))
                    at = before
                    if at == start:
                        return path[::-1]
            queue.append(nxt)
    return None


def cycles(graph: dict, watched: tuple | None = WATCHED) -> list:
    """One line per node on a cycle, of the `watched` groups (None: every node): 'a -> b (a's
    file:line) -> a (b's file:line)', a shortest cycle through it."""
    out = set()
    for start in sorted(graph):
        path = cycle_through(graph, start) if watched is None or group(start) in watched else None
        if path:
            names = [m for m, _ in path] + [start]
            out.add(" -> ".join([names[0]] + [f"{n} ({w})" for n, (_, w) in zip(names[1:], path)]))
    return sorted(out)


def test_no_module_is_on_an_import_cycle():
    """Every module of edgeseq, export and firmware_sim: a shared name lives in the module
    below both that use it, and a package's __init__ re-exports from its submodules, which
    import one another, never the __init__."""
    graph = import_graph(ROOT)
    found = cycles(graph, watched=None)
    assert not found, "import cycles (one shortest cycle through each module on one):\n" + "\n".join(found)
    assert len(graph) > 100 and "edgeseq.runtime.native._es_native" in graph["edgeseq.runtime.native.extension"]


def test_no_module_of_train_tune_or_report_is_on_an_import_cycle():
    graph = import_graph(ROOT)
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(found)
    assert "edgeseq.tune.pages" in graph["edgeseq.tune"], "the graph misses imports inside functions"


def test_train_tune_and_report_import_one_another_one_way():
    graph = by_package(import_graph(ROOT))
    found = cycles(graph)
    assert not found, "packages that import one another:\n" + "\n".join(found)
    assert {"edgeseq.train", "edgeseq.report"} <= set(graph["edgeseq.tune"])
    assert "edgeseq.train" in graph["edgeseq.report"]


OLD = {   # the shape of the modules before edgeseq.train and edgeseq.tune were packages
    "edgeseq/__init__.py": "",
    "edgeseq/train.py": "from edgeseq.train_plan import plan_epoch\n",
    "edgeseq/train_plan.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from edgeseq.train import TrainConfig\n",
    "edgeseq/tune.py": "def tune():\n    from edgeseq.report.tune_pages import write_pages\n",
    "edgeseq/report/__init__.py": "",
    "edgeseq/report/tune_pages.py": "from edgeseq.tune import OBJECTIVES\nfrom . import edge\n",
    "edgeseq/report/edge.py": "def run():\n    from ..train import train\n",
}


def graph_of(root: Path, files: dict) -> dict:
    """`import_graph` of the tree {relative path: text} written under `root`."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return import_graph(root)


def test_the_check_finds_the_cycles_of_the_old_layout(tmp_path):
    graph = graph_of(tmp_path, OLD)
    assert graph["edgeseq.report.edge"] == {"edgeseq.train": "edgeseq/report/edge.py:2"}     # relative imports
    assert "edgeseq.report.edge" in graph["edgeseq.report.tune_pages"]
    assert cycles(graph) == [
        "edgeseq.report.tune_pages -> edgeseq.tune (edgeseq/report/tune_pages.py:1) -> "
        "edgeseq.report.tune_pages (edgeseq/tune.py:2)",
        "edgeseq.train -> edgeseq.train_plan (edgeseq/train.py:1) -> edgeseq.train (edgeseq/train_plan.py:3)",
        "edgeseq.tune -> edgeseq.report.tune_pages (edgeseq/tune.py:2) -> edgeseq.tune (edgeseq/report/tune_pages.py:1)",
    ]
    assert cycles(by_package(graph)) == [
        "edgeseq.report -> edgeseq.tune (edgeseq/report/tune_pages.py:1) -> edgeseq.report (edgeseq/tune.py:2)",
        "edgeseq.train -> edgeseq.train_plan (edgeseq/train.py:1) -> edgeseq.train (edgeseq/train_plan.py:3)",
        "edgeseq.tune -> edgeseq.report (edgeseq/tune.py:2) -> edgeseq.tune (edgeseq/report/tune_pages.py:1)",
    ]


NESTED = {   # a package __init__ that re-exports from a submodule which names the package back
    "edgeseq/__init__.py": "",
    "edgeseq/runtime/__init__.py": "from edgeseq.runtime.session import StreamSession\n",
    "edgeseq/runtime/session.py": "class StreamSession:\n    def open(self):\n        from edgeseq.runtime import native\n",
    "edgeseq/runtime/native/__init__.py": "from edgeseq.runtime.native.extension import _ext\n",
    "edgeseq/runtime/native/extension.py": "import edgeseq.runtime.native._es_native as _ext\n",
    "edgeseq/runtime/native/_es_native.c": "PyMODINIT_FUNC PyInit__es_native(void) { return 0; }\n",
}


def test_the_check_finds_a_cycle_through_a_package_init(tmp_path):
    graph = graph_of(tmp_path, NESTED)
    assert graph["edgeseq.runtime.session"] == {"edgeseq.runtime": "edgeseq/runtime/session.py:3",
                                                "edgeseq.runtime.native": "edgeseq/runtime/session.py:3"}
    assert graph["edgeseq.runtime.native.extension"] == {      # the compiled module, not its package
        "edgeseq.runtime.native._es_native": "edgeseq/runtime/native/extension.py:1"}
    assert cycles(graph) == []                                  # no WATCHED module on it
    assert cycles(graph, watched=None) == [
        "edgeseq.runtime -> edgeseq.runtime.session (edgeseq/runtime/__init__.py:1) -> "
        "edgeseq.runtime (edgeseq/runtime/session.py:3)",
        "edgeseq.runtime.session -> edgeseq.runtime (edgeseq/runtime/session.py:3) -> "
        "edgeseq.runtime.session (edgeseq/runtime/__init__.py:1)",
    ]
