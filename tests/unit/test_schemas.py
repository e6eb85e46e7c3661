"""SPEC E1: proto-schemas/ is the language-neutral contract; code and files never drift,
and every change keeps the evolution rules (new fields have defaults, types never change)."""

import copy

from jpu.tools import schemas


def test_E1_proto_schemas_match_the_code() -> None:
    assert schemas.check() == [], "run `make schemas` and review the diff"


def test_E1_evolution_rejects_removed_field_and_changed_type() -> None:
    old = schemas.schema_of(schemas.EVENT_TYPES[0])
    new = copy.deepcopy(old)
    field = next(f for f in new["required"] if f not in ("type",))
    del new["properties"][field]
    assert any("removed" in e for e in schemas.evolution_errors(old, new))
    new = copy.deepcopy(old)
    new["properties"][field] = {"type": "boolean"}
    assert any("changed type" in e for e in schemas.evolution_errors(old, new))


def test_E1_evolution_requires_defaults_for_new_fields() -> None:
    old = schemas.schema_of(schemas.EVENT_TYPES[0])
    new = copy.deepcopy(old)
    new["properties"]["added"] = {"type": "integer"}
    new["required"] = [*new["required"], "added"]
    assert schemas.evolution_errors(old, new) == ["new field 'added' has no default"]
    new["required"] = old["required"]
    new["properties"]["added"]["default"] = 0
    assert schemas.evolution_errors(old, new) == []


def test_E1_evolution_lets_an_enum_gain_values_only() -> None:
    old = {"properties": {"kind": {"enum": ["a", "b"]}}, "required": ["kind"]}
    wider = {"properties": {"kind": {"enum": ["a", "b", "c"]}}, "required": ["kind"]}
    assert schemas.evolution_errors(old, wider) == []
    narrower = {"properties": {"kind": {"enum": ["a"]}}, "required": ["kind"]}
    assert any("changed type" in e for e in schemas.evolution_errors(old, narrower))
    other = {"properties": {"kind": {"enum": ["a", "b"], "type": "integer"}}, "required": ["kind"]}
    assert any("changed type" in e for e in schemas.evolution_errors(old, other))
