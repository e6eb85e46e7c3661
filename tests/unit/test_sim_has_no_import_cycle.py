"""The simulator's modules import in one direction: the engine plays its parts (backend,
backfill_service, cycles, summary), the parts know only what they are passed
(`jpu.sim.world.World`).

Read from the source, every `import` and `from` line counted (those under TYPE_CHECKING too:
a circle a type checker needs is a circle a reader follows).
"""

from __future__ import annotations

import ast
from pathlib import Path

import jpu.sim

SIM = Path(jpu.sim.__file__).parent
PKG = "jpu.sim"


def sim_imports(path: Path) -> set[str]:
    """The `jpu.sim` modules one module of it imports (by module name)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith(PKG + ".")}
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if node.module == PKG:  # from jpu.sim import backend: the submodule
                out |= {f"{PKG}.{a.name}" for a in node.names if (SIM / f"{a.name}.py").exists()}
            elif node.module.startswith(PKG + "."):
                out.add(node.module)
    return out


def graph() -> dict[str, set[str]]:
    return {
        f"{PKG}.{p.stem}": sim_imports(p) for p in sorted(SIM.glob("*.py")) if p.stem != "__init__"
    }


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (as the path that closes it), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        if m in path:
            return [*path[path.index(m) :], m]
        if m in done:
            return None
        path.append(m)
        for n in sorted(edges.get(m, ())):
            found = visit(n)
            if found is not None:
                return found
        path.pop()
        done.add(m)
        return None

    for m in sorted(edges):
        found = visit(m)
        if found is not None:
            return found
    return None


def test_the_check_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle(edges) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_reads_every_kind_of_import_line():
    edges = graph()
    assert f"{PKG}.engine" in edges["jpu.sim.run"]  # from jpu.sim.engine import ...
    parts = {f"{PKG}.backend", f"{PKG}.backfill_service"}
    assert parts <= edges["jpu.sim.cycles"]  # from jpu.sim import backend, backfill_service


def test_sim_modules_import_without_a_circle():
    found = cycle(graph())
    assert found is None, "import circle inside jpu.sim: " + " -> ".join(found or [])
