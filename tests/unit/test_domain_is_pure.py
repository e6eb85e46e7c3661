"""The pure packages are pure ("One truth"): no I/O, no clock, `now` is passed in.

The domain, the policy core and the explanations (with the start estimate) are read from the source
(what each module imports); they and the simulator are checked at run time (what importing every
module loads, in a fresh interpreter), so a pure-looking module cannot pull the bus, the database,
the web framework or telemetry in through another. The simulator reads and writes trace files and
times its own runs, so only the run-time check applies to it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jpu.domain

LIBS = Path(jpu.domain.__file__).parents[1]
DOMAIN = LIBS / "domain"
MODULES = sorted(p for p in DOMAIN.glob("*.py"))
# every module of the pure packages, by file
STATIC = {"domain", "policy", "explain"}
PURE = {pkg: sorted((LIBS / pkg).glob("*.py")) for pkg in (*sorted(STATIC), "sim")}

# I/O, clocks and randomness: a domain module imports none of them itself.
NOT_IMPORTED = (
    "asyncio",
    "asyncpg",
    "datetime",
    "fastapi",
    "nats",
    "opentelemetry",
    "os",
    "pathlib",
    "random",
    "socket",
    "subprocess",
    "threading",
    "time",
    "uuid",
    "jpu.backends",
    "jpu.bus",
    "jpu.runtime.clock",
    "jpu.runtime.edges",
    "jpu.embedded",
    "jpu.runtime.service",
    "jpu.stack",
    "jpu.store",
    "jpu.runtime.telemetry",
    "jpu_services",
)
# Nor does anything they import load these.
NOT_LOADED = (
    "nats",
    "asyncpg",
    "fastapi",
    "opentelemetry",
    "jpu.backends",
    "jpu.bus",
    "jpu.runtime.clock",
    "jpu.store",
    "jpu.runtime.telemetry",
    "jpu_services",
)


def _is(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _type_checking_only(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def _imports(path: Path) -> list[str]:
    """Every module `path` imports at run time (imports for the type checker only are left out)."""
    names: list[str] = []
    for top in ast.parse(path.read_text()).body:
        if _type_checking_only(top):
            continue
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


@pytest.mark.parametrize("package", sorted(STATIC))
def test_pure_modules_import_no_io_or_clock(package: str) -> None:
    assert len(PURE[package]) > 3, PURE[package]
    found = {
        p.name: bad
        for p in PURE[package]
        if (bad := [n for n in _imports(p) if _is(n, NOT_IMPORTED)])
    }
    assert found == {}


def _module(path: Path) -> str:
    parts = path.relative_to(LIBS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("package", sorted(PURE))
def test_importing_a_pure_package_loads_no_bus_database_web_or_telemetry(package: str) -> None:
    """Importing every module of the package, in a fresh interpreter: nats, asyncpg, fastapi,
    opentelemetry and the platform's edges stay unloaded."""
    names = [_module(p) for p in PURE[package]]
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    ).stdout.split()
    assert set(names) <= set(out)  # the modules were imported, so the check saw them
    assert [m for m in out if _is(m, NOT_LOADED)] == []


def test_every_domain_module_is_on_the_package_map() -> None:
    """The package docstring maps SPEC sections to modules; a module missing from it is lost."""
    doc = jpu.domain.__doc__ or ""
    missing = [p.name for p in MODULES if p.stem != "__init__" and p.name not in doc]
    assert missing == []
