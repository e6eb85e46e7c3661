"""SPEC U4: the "why" sentences live in one catalog, jpu/explain/why.json, English and Korean,
read by `jpu why` (jpu.cli.why) and served to the console (/console/why.json, why.js): every
pending reason (D7), every cause (jpu.explain.wait.CauseKind), every way a reservation ends and
every job state has a sentence in both languages, with the same placeholders."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from jpu.cli.why import _T
from jpu.domain.promotion import PersonalReason
from jpu.domain.states import STATES
from jpu.events import ReleaseReason
from jpu.explain.wait import CAUSE_KINDS
from jpu.policy.model import PendingReason
from jpu_services.gateway.routes import console

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "libs" / "jpu" / "explain" / "why.json"
CONSOLE = ROOT / "libs" / "jpu_services" / "gateway" / "console"
WHY_JS = CONSOLE / "why.js"
STRINGS_JS = CONSOLE / "strings.js"  # the console's own words; it merges the catalog
REASONS = sorted(set(typing.get_args(PendingReason)) | set(typing.get_args(PersonalReason)))


def _catalog() -> dict[str, dict[str, str]]:
    loaded: dict[str, dict[str, str]] = json.loads(CATALOG.read_text(encoding="utf-8"))
    return loaded


def _fields(text: str) -> set[str]:
    return set(re.findall(r"\{(\w+)\}", text))


def test_U4_both_languages_have_every_sentence_with_the_same_placeholders() -> None:
    catalog = _catalog()
    assert set(catalog) == {"en", "ko"}
    assert set(catalog["en"]) == set(catalog["ko"])
    for key, en in catalog["en"].items():
        ko = catalog["ko"][key]
        assert en.strip() and ko.strip(), key
        # Korean has no plural: it may leave out English's `{s}`, and nothing else
        assert _fields(ko) <= _fields(en) and _fields(en) - _fields(ko) <= {"s"}, (key, en, ko)


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_U4_D7_every_pending_reason_cause_release_and_state_has_a_sentence(lang: str) -> None:
    words = _catalog()[lang]
    missing = [r for r in REASONS if f"reason.{r}" not in words]
    missing += [k for k in CAUSE_KINDS if not any(w.split(".")[:2] == ["cause", k] for w in words)]
    missing += [r for r in typing.get_args(ReleaseReason) if f"release.{r}" not in words]
    missing += [s for s in STATES if f"state.{s}" not in words]
    assert not missing, missing
    assert "ArrayThrottle" in REASONS and "Held" in REASONS  # the personal queue's too (Q7, Q9)


def test_U4_the_cli_reads_the_catalog_and_the_console_has_no_sentence_of_its_own() -> None:
    assert _catalog() == _T
    assert 'fetch("/console/why.json"' in STRINGS_JS.read_text(encoding="utf-8")
    assert "Object.assign(STRINGS" not in WHY_JS.read_text(encoding="utf-8")
    for module in sorted(CONSOLE.glob("*.js")):  # no second copy of a sentence in any module
        js = module.read_text(encoding="utf-8")
        for lang in ("en", "ko"):
            for sentence in _T[lang].values():
                if len(sentence) > 12:  # a whole sentence as a string of the page's own
                    assert f'"{sentence}"' not in js, (module.name, sentence)


def test_U4_U2_a_state_has_one_name_the_catalogs() -> None:
    """The console names a state (in Korean; English shows its code) with the catalog's
    `state.NAME`, as `jpu why` does: its own strings have only what a state means (`.t`)."""
    own = re.findall(r'"state\.([A-Z_]+)(\.t)?":', STRINGS_JS.read_text(encoding="utf-8"))
    assert own and all(t == ".t" for _, t in own), own
    assert {name for name, _ in own} == set(STATES)
    core = (CONSOLE / "core.js").read_text(encoding="utf-8")
    assert "`why.state.${base}`" in core  # codeText's key for a state


async def test_U4_the_gateway_serves_the_catalog_the_cli_reads() -> None:
    app = FastAPI()
    app.include_router(console.router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        got = await c.get("/console/why.json")
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("application/json")
    assert got.json() == _T
