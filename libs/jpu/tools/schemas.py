"""The language-neutral event contract in proto-schemas/ (SPEC E1).

`python -m jpu.tools.schemas write` regenerates `proto-schemas/events/<Type>.json` from the msgspec
structs and freezes a copy per schema version in `proto-schemas/history/<Type>.v<N>.json`.
`python -m jpu.tools.schemas check` fails when code and files drift, or when the code breaks an
evolution rule against any frozen version: a field never disappears or changes type, and a field
that is new since that version must have a default (not be required).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from jpu.events import EVENT_TYPES, Event

ROOT = Path(__file__).resolve().parents[3] / "proto-schemas"


def tag_of(cls: type[Event]) -> str:
    return str(cls.__struct_config__.tag)


def schema_of(cls: type[Event]) -> dict[str, Any]:
    """JSON Schema of one event, with its definitions inlined under $defs."""
    (ref,), components = msgspec.json.schema_components([cls])
    name = ref["$ref"].split("/")[-1]
    body = dict(components.pop(name))
    if components:
        body["$defs"] = components
    body["title"] = tag_of(cls)
    return body


def current() -> dict[str, dict[str, Any]]:
    return {tag_of(cls): schema_of(cls) for cls in EVENT_TYPES}


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def evolution_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Breaking changes from a frozen version `old` to the code's `new` schema."""
    errors = []
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    old_required = set(old.get("required", []))
    for field, spec in old_props.items():
        if field not in new_props:
            errors.append(f"field {field!r} removed")
        elif field == "schema_version" and _bumped(spec, new_props[field]):
            continue  # bumped when the struct gains fields (jpu.events): the one allowed change
        elif _widened(spec, new_props[field]):
            continue  # an enum gained values: every recorded event still decodes
        elif new_props[field] != spec:
            errors.append(f"field {field!r} changed type: {spec} -> {new_props[field]}")
    for field in set(new.get("required", [])) - old_required:
        errors.append(f"new field {field!r} has no default")
    return errors


def _widened(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The same field with an enum that only gained values (a Literal with one more member)."""
    if "enum" not in old or "enum" not in new:
        return False
    rest_old = {k: v for k, v in old.items() if k != "enum"}
    rest_new = {k: v for k, v in new.items() if k != "enum"}
    return rest_old == rest_new and set(old["enum"]) <= set(new["enum"])


def _bumped(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """`schema_version` kept its type and its default only went up."""
    rest_old = {k: v for k, v in old.items() if k != "default"}
    rest_new = {k: v for k, v in new.items() if k != "default"}
    return rest_old == rest_new and int(new.get("default", 0)) >= int(old.get("default", 0))


def write(root: Path = ROOT) -> None:
    (root / "events").mkdir(parents=True, exist_ok=True)
    (root / "history").mkdir(parents=True, exist_ok=True)
    for cls in EVENT_TYPES:
        tag, schema = tag_of(cls), schema_of(cls)
        (root / "events" / f"{tag}.json").write_text(_dump(schema))
        frozen = root / "history" / f"{tag}.v{_version(cls)}.json"
        if not frozen.exists():
            frozen.write_text(_dump(schema))


def _version(cls: type[Event]) -> int:
    """The struct's `schema_version` default: the version its current shape is frozen as."""
    field = next(f for f in msgspec.structs.fields(cls) if f.name == "schema_version")
    return int(field.default)


def check(root: Path = ROOT) -> list[str]:
    problems = []
    now = current()
    for tag, schema in now.items():
        path = root / "events" / f"{tag}.json"
        if not path.exists() or json.loads(path.read_text()) != schema:
            problems.append(f"{path.name}: differs from the code (run `make schemas`)")
    for frozen in sorted((root / "history").glob("*.json")):
        tag = frozen.name.split(".v")[0]
        if tag not in now:
            problems.append(f"{frozen.name}: event type {tag!r} was removed or its tag renamed")
            continue
        for err in evolution_errors(json.loads(frozen.read_text()), now[tag]):
            problems.append(f"{frozen.name}: {err}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jpu.tools.schemas", description=__doc__)
    parser.add_argument("action", choices=["write", "check"])
    args = parser.parse_args(argv)
    if args.action == "write":
        write()
        print(f"wrote {len(EVENT_TYPES)} event schemas to {ROOT}")
        return 0
    problems = check()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
