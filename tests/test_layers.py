"""The package's layers: engines that know no family, family folders above them, models and experiments on top.

The import graph is read from the source (every ``import`` statement, those inside functions
included), so a lazy import that closes a cycle is found as surely as one at the top of a file.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "conslaw_lite"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(name: str) -> str | None:
    """The package module ``name`` names, or the deepest package module above it (``a.b.C`` → ``a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The package modules ``module`` imports anywhere in its source (``from p import m`` → ``p.m`` if a module)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..a import b
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {t for t in map(_resolve, targets) if t and t.startswith("conslaw_lite") and t != module}
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle ``[a, b, ..., a]`` of ``graph`` (node → successors), or ``None`` when it is acyclic."""
    state: dict[str, str] = {}  # "open" while on the DFS stack, "done" after
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == "open":
                return [*stack[stack.index(succ) :], succ]
            if succ not in state and (cycle := visit(succ)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_a_lazy_cycle_and_passes_a_tree() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_of_sees_imports_inside_functions() -> None:
    assert "conslaw_lite.models.tiny" in imports_of("conslaw_lite.families.network.archs")
    assert "conslaw_lite.laws" in imports_of("conslaw_lite.counting.problem")


def test_package_import_graph_has_no_cycle() -> None:
    graph = {m: imports_of(m) for m in MODULES}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def _reachable(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for succ in graph[todo.pop()] - seen:
            seen.add(succ)
            todo.append(succ)
    return seen


ENGINES = ("conslaw_lite.laws", "conslaw_lite.counting", "conslaw_lite.symbolic", "conslaw_lite.find_laws",
           "conslaw_lite.law_search", "conslaw_lite.flows", "conslaw_lite.monitor",
           "conslaw_lite.exact_linalg", "conslaw_lite.watch_conditions")  # fmt: skip
FAMILY = "conslaw_lite.families."  # a family's own modules; the registry (conslaw_lite.families) is no family


def test_engines_import_no_family() -> None:
    graph = {m: imports_of(m) for m in MODULES}
    upper = (FAMILY, "conslaw_lite.archs", "conslaw_lite.models", "conslaw_lite.experiments")
    for module in [m for m in MODULES if m.startswith(ENGINES)]:
        assert not {m for m in _reachable(module, graph) if m.startswith(upper)}, module


def test_no_private_name_is_imported_from_another_module() -> None:
    imported = [
        (module, node.module, alias.name)
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("conslaw_lite")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert imported == []


def test_no_module_is_over_600_lines() -> None:
    lengths = {module: len(path.read_text().splitlines()) for module, path in MODULES.items()}
    assert {m: n for m, n in lengths.items() if n > 600} == {}


@pytest.mark.parametrize("engine", ["conslaw_lite.counting", "conslaw_lite.laws", "conslaw_lite"])
def test_importing_an_engine_loads_no_family(engine: str) -> None:
    code = (
        f"import sys, {engine}\n"
        f"upper = ({FAMILY!r}, 'conslaw_lite.archs', 'conslaw_lite.models', 'conslaw_lite.experiments')\n"
        "print(sorted(m for m in sys.modules if m.startswith(upper)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip() == "[]"


def test_the_certify_command_loads_no_experiment() -> None:
    code = (
        "import sys\n"
        "from conslaw_lite.cli import main\n"
        "try:\n    main(['certify', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'conslaw_lite.cli.certify' in sys.modules\n"
        "print(sorted(m for m in sys.modules if m.startswith('conslaw_lite.experiments')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip().splitlines()[-1] == "[]"
