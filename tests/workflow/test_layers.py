"""The package's layers (docs/design.md#layers): every import, function-local ones included, goes to
the module's own layer or below, never between siblings, and closes no cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from blindspot.paths import CHECKOUT

PACKAGE = CHECKOUT / "src" / "blindspot"
DESIGN = CHECKOUT / "docs" / "design.md"
TABLE_START = "<!-- layers:"


def layer_table(text: str) -> list[list[list[str]]]:
    """The layers, highest first: each a list of sibling groups, each group a list of patterns."""
    lines = text[text.index(TABLE_START) :].splitlines()[3:]
    layers = []
    for line in lines:
        if not line.startswith("|"):
            break
        modules = line.strip("|").split("|")[-1]
        layers.append([re.findall(r"`([^`]+)`", group) for group in modules.split("·")])
    return layers


def matches(relative: str, pattern: str) -> bool:
    """Whether a file (relative to the package) matches a pattern whose `*` stays within one folder."""
    return re.fullmatch("[^/]*".join(map(re.escape, pattern.split("*"))), relative) is not None


def place(relative: str, layers: list[list[list[str]]]) -> tuple[int, int] | None:
    """(layer from the bottom, sibling group) of a file; a pattern without `*` wins over a glob."""
    exact = [
        (depth, group)
        for depth, layer in enumerate(reversed(layers))
        for group, patterns in enumerate(layer)
        for pattern in patterns
        if "*" not in pattern and pattern == relative
    ]
    if exact:
        return exact[0]
    globbed = {
        (depth, group)
        for depth, layer in enumerate(reversed(layers))
        for group, patterns in enumerate(layer)
        for pattern in patterns
        if matches(relative, pattern)
    }
    if len(globbed) > 1:
        raise AssertionError(f"{relative} matches patterns of two layers or groups: {sorted(globbed)}")
    return next(iter(globbed), None)


def module_name(path: Path) -> str:
    parts = ("blindspot", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, package: str, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module of the package) of every import in a module's source, the module as precise as
    the name allows (`from blindspot.metrics import hpsv2` imports blindspot.metrics.hpsv2); relative
    imports start at `package`, the module's own package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "blindspot"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "blindspot":
                continue
            for alias in node.names:
                found.append((node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base))
    return [(line, name) for line, name in found if name in modules]


def import_graph() -> tuple[dict[str, Path], dict[str, list[tuple[int, str]]]]:
    modules = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = imports(path.read_text(), package, modules)
    return modules, graph


def cycles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for _, target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer():
    layers = layer_table(DESIGN.read_text())
    unplaced = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if place(path.relative_to(PACKAGE).as_posix(), layers) is None
    ]
    assert not unplaced, f"no row of docs/design.md#layers names {', '.join(unplaced)}"


def crossings(
    layers: list[list[list[str]]], files: dict[str, str], graph: dict[str, list[tuple[int, str]]]
) -> list[str]:
    """One line per import that goes a layer up or to a sibling; `files` gives each module's file."""
    wrong = []
    for name, targets in graph.items():
        here = place(files[name], layers)
        for line, target in targets:
            there = place(files[target], layers)
            if here is None or there is None:
                continue
            if there[0] > here[0]:
                wrong.append(f"src/blindspot/{files[name]}:{line} imports {target}, a layer up")
            elif there[0] == here[0] and there[1] != here[1]:
                wrong.append(f"src/blindspot/{files[name]}:{line} imports {target}, a sibling of its layer")
    return wrong


def test_imports_go_down_and_never_between_siblings():
    modules, graph = import_graph()
    files = {name: path.relative_to(PACKAGE).as_posix() for name, path in modules.items()}
    wrong = crossings(layer_table(DESIGN.read_text()), files, graph)
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    modules, graph = import_graph()
    found = cycles(graph)
    where = []
    for component in found:
        members = set(component)
        where += [
            f"src/blindspot/{modules[name].relative_to(PACKAGE).as_posix()}:{line} imports {target}"
            for name in component
            for line, target in graph[name]
            if target in members
        ]
    assert not found, f"{len(found)} cycle(s):\n" + "\n".join(where)


@pytest.mark.parametrize(
    ("source", "wanted"),
    [
        ("from blindspot.metrics import hpsv2\n", "blindspot.metrics.hpsv2"),
        ("from blindspot.metrics import Score\n", "blindspot.metrics"),
        ("def f():\n    from ..io import write_json\n", "blindspot.io"),
        ("import blindspot.tables as t\n", "blindspot.tables"),
    ],
)
def test_imports_are_read_as_the_module_they_load(source, wanted):
    modules = dict.fromkeys(
        ["blindspot.metrics", "blindspot.metrics.hpsv2", "blindspot.io", "blindspot.tables"], Path()
    )
    assert [name for _, name in imports(source, "blindspot.protobias", modules)] == [wanted]


def test_a_cycle_and_an_upward_import_are_found():
    graph = {"a": [(1, "b")], "b": [(3, "c")], "c": [(2, "a")], "d": [(1, "a")]}
    assert cycles(graph) == [["a", "b", "c"]]
    layers = layer_table(
        TABLE_START + " x -->\n| layer | w | modules |\n|---|---|---|\n| top | t | `cli.py` |\n"
        "| mid | m | `protobias/*.py` · `humblebench/*.py` |\n| low | l | `*.py` |\n"
    )
    assert place("cli.py", layers) == (2, 0)
    assert place("humblebench/x.py", layers) == (1, 1)
    assert place("io.py", layers) == (0, 0)
    files = {"cli": "cli.py", "pb": "protobias/a.py", "hb": "humblebench/b.py", "io": "io.py"}
    graph = {"io": [(4, "pb")], "pb": [(7, "hb"), (8, "io")], "hb": [], "cli": [(1, "io")]}
    assert crossings(layers, files, graph) == [
        "src/blindspot/io.py:4 imports pb, a layer up",
        "src/blindspot/protobias/a.py:7 imports hb, a sibling of its layer",
    ]
