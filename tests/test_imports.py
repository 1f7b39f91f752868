"""The package's import graph: no cycles, and imports run down the data flow (DESIGN.md).

The graph is drawn from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` of ``offline_prelearner`` modules, relative or absolute, wherever it stands --
at the top, inside a function, under ``TYPE_CHECKING``. ``from . import x`` is an edge to the
module ``x`` when ``x`` is a module, else to the package. A package's ``__init__`` is a node of its
own; the implicit import of parent packages is not an edge.

Every module of the package falls under one rule (a test fails for a module that none covers):

* **Layers**, from the bottom: ``episodes/`` -> ``io/`` -> ``replay/`` -> ``connectors/`` ->
  ``prelearner`` -> ``jobs/`` -> ``report/`` -> ``cli/``; a layer imports only from the layers
  below it (and the leaves).
* **Sides**: ``testing/`` (the contract checks users run on their own prelearner, sampler or
  connector) and ``rllib`` (the adapter to RLlib) stand beside the layers: each may import the
  layers it checks or adapts, up to ``prelearner``, and no layer imports them.
* **Leaves**: ``errors``, ``spaces``, ``config``, ``plugins`` and ``_version`` are shared by every
  layer, and import nothing above them: ``errors`` and ``_version`` nothing of the package,
  ``spaces`` and ``plugins`` only ``errors``, ``config`` (module or package) only ``errors`` and
  ``spaces`` -- wherever the import stands, inside a function too.
* **Entry points**: ``python -m offline_prelearner`` (``__main__``) imports only ``cli``; the
  package root (``__init__``: the public API) imports the library but neither ``cli`` nor the
  sides, and nothing imports the root.

Ray is imported only in ``jobs/``, ``replay/shards/`` and ``rllib``; RLlib (``ray.rllib``) only in
``rllib``, which no module of the package imports.
"""

from __future__ import annotations

import ast
import functools
import itertools
from pathlib import Path

import pytest

import offline_prelearner

PKG = "offline_prelearner"
ROOT = Path(offline_prelearner.__file__).resolve().parent

#: The layers, from the bottom: each imports only from those below it (and the leaves).
LAYERS = ("episodes", "io", "replay", "connectors", "prelearner", "jobs", "report", "cli")
#: Beside the layers: what each must not import. No layer imports them (see FORBIDDEN).
SIDES = {
    "testing": ("jobs", "report", "cli", "rllib"),
    "rllib": ("jobs", "report", "cli", "testing"),
}
#: What each folder must not import (dotted prefixes under the package): a layer, every layer
#: above it and the sides; a side, what SIDES says.
FORBIDDEN = {
    **{layer: (*LAYERS[i + 1 :], *SIDES) for i, layer in enumerate(LAYERS)},
    **SIDES,
}
#: The leaves: what each may import of the package (besides itself).
LEAVES = {
    "errors": (),
    "_version": (),
    "spaces": ("errors",),
    "plugins": ("errors",),
    "config": ("errors", "spaces"),
}
#: ``python -m offline_prelearner``: what it may import of the package.
MAIN = ("cli",)
#: What the package root (the public API) must not import.
ROOT_FORBIDDEN = ("cli", "__main__", *SIDES)
#: Where ``ray`` may be imported.
RAY_ALLOWED = ("jobs", "replay.shards", "rllib")
#: The one module that imports RLlib (the ``rllib`` extra); nothing in the package imports it.
RLLIB_MODULE = "rllib"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's ``__init__``)."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PKG, *path.relative_to(ROOT).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_pkg)
    return out


MODULES = _modules()


@functools.cache
def _imports(name: str) -> tuple[tuple[str, int], ...]:
    """``(imported name, line)`` for every import in module ``name``: package modules resolved
    to the module (or package) they load; other top-level names (``ray``) as they are. Parsed
    once a session: every test reads the same files (26 tests parsed the whole package each)."""
    path, is_pkg = MODULES[name]
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((sub if sub in MODULES else mod, node.lineno))
    return tuple(out)


def _owner(target: str) -> str | None:
    """The package module ``target`` loads (its longest known prefix), or None if outside."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def import_graph() -> dict[str, dict[str, int]]:
    """Module -> {imported package module: first line importing it}."""
    graph: dict[str, dict[str, int]] = {}
    for name in MODULES:
        edges: dict[str, int] = {}
        for target, line in _imports(name):
            mod = _owner(target) if target.split(".")[0] == PKG else None
            if mod is not None and mod != name:
                edges.setdefault(mod, line)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component with more than one
    module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    components.append(comp)
    return [_cycle_in(graph, set(c)) for c in components]


def _cycle_in(graph: dict[str, dict[str, int]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in comp:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in prev:
                    prev[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError("a strongly connected component without a cycle")


def _show(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join([*steps, cycle[-1]])


def _short(name: str) -> str:
    return name.removeprefix(PKG).removeprefix(".")


def _under(short: str, prefixes: tuple[str, ...] | dict[str, object]) -> str | None:
    """The prefix (a folder or module) that the dotted name ``short`` is or lies in, if any."""
    return next((p for p in prefixes if short == p or short.startswith(p + ".")), None)


def _layer(name: str) -> str | None:
    return _under(_short(name), FORBIDDEN)


def rule_of(short: str) -> str | None:
    """Which rule covers the module ``short`` (a dotted name under the package, ``""`` for the
    root): a layer or side, a leaf, an entry point; None when no rule does."""
    if short in ("", "__main__"):
        return short or "the package root"
    return _under(short, FORBIDDEN) or _under(short, LEAVES)


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert len(graph) > 60
    # Imports of every kind are found: relative, absolute, inside functions.
    assert (
        "offline_prelearner.replay.storage.ring" in graph["offline_prelearner.replay.replay_buffer"]
    )
    assert "offline_prelearner.jobs.session.ray_session" in graph["offline_prelearner.cli.app"]
    assert "offline_prelearner.cli" in graph["offline_prelearner.__main__"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_show(c, graph) for c in cycles)


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}, "e": {"e2": 1}}
    graph["e2"] = {"e": 1}
    assert sorted(map(tuple, find_cycles(graph))) == [("a", "b", "c", "a"), ("e", "e2", "e")]


def test_every_module_falls_under_a_rule() -> None:
    bare = sorted(
        f"{path.relative_to(ROOT.parent)}"
        for name, (path, _) in MODULES.items()
        if rule_of(_short(name)) is None
    )
    assert not bare, (
        "modules that no import rule covers (add the folder to LAYERS, SIDES or LEAVES):\n"
        + "\n".join(bare)
    )


def test_the_rules_cover_a_new_folder_only_once_it_is_named() -> None:
    assert rule_of("storage.staging") is None and rule_of("newleaf") is None
    assert rule_of("jobs.batch.run") == "jobs" and rule_of("report") == "report"
    assert rule_of("plugins") == "plugins" and rule_of("config.sections") == "config"
    assert rule_of("rllib") == "rllib" and rule_of("testing.sampler") == "testing"
    assert rule_of("__main__") == "__main__" and rule_of("") == "the package root"
    assert FORBIDDEN["episodes"] == (*LAYERS[1:], "testing", "rllib")
    assert FORBIDDEN["cli"] == ("testing", "rllib")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_only_downward(layer: str) -> None:
    graph = import_graph()
    bad = []
    for name, edges in graph.items():
        if _layer(name) != layer:
            continue
        for target, line in edges.items():
            short = _short(target)
            if any(short == f or short.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{_short(name)}:{line} imports {short}")
            elif target == PKG:
                bad.append(f"{_short(name)}:{line} imports the package root")
    assert not bad, f"{layer} imports from above it:\n" + "\n".join(bad)


def test_nothing_imports_the_package_root() -> None:
    graph = import_graph()
    bad = [f"{_short(n)}:{e[PKG]}" for n, e in graph.items() if PKG in e]
    assert not bad, f"modules importing offline_prelearner itself (a cycle with __init__): {bad}"


def test_ray_is_imported_only_by_the_jobs_and_the_shards() -> None:
    bad = []
    for name in MODULES:
        short = _short(name)
        if any(short == a or short.startswith(a + ".") for a in RAY_ALLOWED):
            continue
        for target, line in _imports(name):
            if target.split(".")[0] == "ray":
                bad.append(f"{short}:{line} imports {target}")
    assert not bad, "Ray imported outside jobs/, replay/shards/ and rllib:\n" + "\n".join(bad)


def test_rllib_is_imported_only_at_the_edge() -> None:
    # RLlib only in offline_prelearner.rllib, and that module only on the user's request.
    graph = import_graph()
    assert f"{PKG}.{RLLIB_MODULE}" in MODULES
    bad = []
    for name in MODULES:
        short = _short(name)
        for target, line in _imports(name):
            if (target == "ray.rllib" or target.startswith("ray.rllib.")) and short != RLLIB_MODULE:
                bad.append(f"{short}:{line} imports {target}")
        if f"{PKG}.{RLLIB_MODULE}" in graph[name]:
            bad.append(f"{short}:{graph[name][f'{PKG}.{RLLIB_MODULE}']} imports {RLLIB_MODULE}")
    assert not bad, "RLlib reached outside offline_prelearner.rllib:\n" + "\n".join(bad)


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaves_import_only_leaves(leaf: str) -> None:
    graph = import_graph()
    mine = [n for n in graph if _short(n) == leaf or _short(n).startswith(leaf + ".")]
    assert mine, f"no module {leaf}"
    allowed = (leaf, *LEAVES[leaf])
    bad = []
    for name in mine:
        for target, line in graph[name].items():
            short = _short(target)
            if not any(short == a or short.startswith(a + ".") for a in allowed):
                bad.append(f"{_short(name)}:{line} imports {short or 'the package root'}")
    assert not bad, f"{leaf} is a leaf but imports:\n" + "\n".join(bad)


def test_the_leaf_check_sees_function_level_imports() -> None:
    # The config package's modules are walked, and an import inside a function is an edge.
    graph = import_graph()
    assert "offline_prelearner.config.sections" in graph
    assert "offline_prelearner.errors" in graph["offline_prelearner.config.checks"]


def test_main_imports_only_the_cli() -> None:
    graph = import_graph()
    edges = graph[f"{PKG}.__main__"]
    bad = [
        f"__main__:{line} imports {_short(t)}"
        for t, line in edges.items()
        if not _under(_short(t), MAIN)
    ]
    assert edges and not bad, "\n".join(bad)


def test_the_root_imports_the_library_but_not_the_cli_or_the_sides() -> None:
    graph = import_graph()
    edges = graph[PKG]
    assert f"{PKG}.errors" in edges and f"{PKG}.prelearner" in edges
    bad = [
        f"__init__:{line} imports {_short(t)}"
        for t, line in edges.items()
        if _under(_short(t), ROOT_FORBIDDEN)
    ]
    assert not bad, "the package root imports what it must not:\n" + "\n".join(bad)
