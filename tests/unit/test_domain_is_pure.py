"""The domain package is pure (issue 10, "One truth"): no I/O, no clock, `now` is passed in.

Read from the source (what each module imports) and checked at run time (what importing the whole
package loads), so a pure-looking module cannot pull the bus or the database in through another.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import jpu.domain

DOMAIN = Path(jpu.domain.__file__).parent
MODULES = sorted(p for p in DOMAIN.glob("*.py"))

# I/O, clocks and randomness: a domain module imports none of them itself.
NOT_IMPORTED = (
    "asyncio",
    "asyncpg",
    "datetime",
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
    "jpu.bus",
    "jpu.clock",
    "jpu.edges",
    "jpu.embedded",
    "jpu.service",
    "jpu.stack",
    "jpu.store",
    "jpu.telemetry",
    "jpu_services",
)
# Nor does anything they import load these.
NOT_LOADED = (
    "nats",
    "asyncpg",
    "opentelemetry",
    "jpu.bus",
    "jpu.clock",
    "jpu.store",
    "jpu.telemetry",
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


def test_domain_modules_import_no_io_or_clock() -> None:
    assert len(MODULES) > 5, MODULES
    found = {
        p.name: bad for p in MODULES if (bad := [n for n in _imports(p) if _is(n, NOT_IMPORTED)])
    }
    assert found == {}


def test_importing_the_domain_loads_no_bus_database_or_telemetry() -> None:
    names = [f"jpu.domain.{p.stem}" for p in MODULES if p.stem != "__init__"]
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
