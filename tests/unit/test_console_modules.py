"""SPEC U2: the web console's ES modules, read as the browser links them (no build step).

Every name a module imports is one its source module exports, every module the page loads is
served (routes.console.MODULES), and no module imports itself through others: `core.js` is the
bottom every view uses, `main.js` the top that wires them (a view that needs the router asks
`core.rerender`, which main.js registers), as `make lint`'s `acyclic_siblings` asks of Python.
"""

from __future__ import annotations

import re
from graphlib import CycleError, TopologicalSorter

from jpu_services.gateway.routes import console

_IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([\w-]+\.js)";', re.MULTILINE)
_EXPORT_FUNCTION = re.compile(r"^export (?:async )?function\*? ([\w$]+)", re.MULTILINE)
_EXPORT_BINDINGS = re.compile(r"^export (?:const|let) (.*)$", re.MULTILINE)
_BINDING = re.compile(r"(?:^|,\s*)([\w$]+)\s*=(?![=>])")  # `export const A = 1, B = 2;`


def _modules() -> dict[str, str]:
    return {
        name: (console.CONSOLE_DIR / name).read_text(encoding="utf-8") for name in console.MODULES
    }


def _exports(source: str) -> set[str]:
    names = set(_EXPORT_FUNCTION.findall(source))
    for line in _EXPORT_BINDINGS.findall(source):
        names.update(_BINDING.findall(line))
    return names


def _imports(source: str) -> dict[str, set[str]]:
    got: dict[str, set[str]] = {}
    for names, module in _IMPORT.findall(source):
        got.setdefault(module, set()).update(n.strip() for n in names.split(",") if n.strip())
    return got


def test_U2_console_modules_import_only_what_they_serve_and_export() -> None:
    modules = _modules()
    served = set(modules)
    on_disk = {p.name for p in console.CONSOLE_DIR.glob("*.js")}
    assert on_disk == served, (
        f"modules on disk but not served, or served but missing: {on_disk ^ served}"
    )
    for name, source in modules.items():
        statements = len(re.findall(r"^import\b", source, re.MULTILINE))
        assert statements == len(_IMPORT.findall(source)), (
            f"{name}: an import this test cannot read"
        )
        for target, names in _imports(source).items():
            assert target in served, f"{name} imports {target}, which the gateway does not serve"
            missing = names - _exports(modules[target])
            assert not missing, f"{name} imports {sorted(missing)} that {target} does not export"


def test_U2_console_modules_have_no_import_circle() -> None:
    graph = {name: set(_imports(source)) for name, source in _modules().items()}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        raise AssertionError(
            f"the console's modules import each other in a circle: {e.args[1]}"
        ) from e
    assert order.index("core.js") < order.index("main.js")
    assert not graph["core.js"] - {"strings.js"}, graph["core.js"]  # the bottom: words only
