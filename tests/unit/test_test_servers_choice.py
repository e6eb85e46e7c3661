"""How the test servers' backend is chosen (jpu.testing.servers, docs/testing.md): once, from the
variable; `auto` follows whether an engine answers; `containers` with no engine is an error at
start, never a quiet fall-back to the embedded servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpu.testing import servers
from jpu.testing.servers import NoContainerEngine, ServerProvider, chosen


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman on it
    monkeypatch.setattr(servers, "ENGINE", servers.ContainerEngine())


def test_the_variable_names_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("embedded", "containers", " Containers "):
        monkeypatch.setenv("JPU_TEST_X", value)
        assert chosen("JPU_TEST_X", "auto") == value.strip().lower()
    monkeypatch.delenv("JPU_TEST_X")
    assert chosen("JPU_TEST_X", "embedded") == "embedded"


def test_an_unknown_value_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JPU_TEST_X", "docker")
    with pytest.raises(ValueError, match="JPU_TEST_X='docker'"):
        chosen("JPU_TEST_X", "auto")


def test_auto_without_an_engine_is_embedded(
    monkeypatch: pytest.MonkeyPatch, no_engine: None
) -> None:
    monkeypatch.setenv("JPU_TEST_X", "auto")
    assert chosen("JPU_TEST_X", "embedded") == "embedded"


def test_containers_without_an_engine_fails_at_start(no_engine: None) -> None:
    with pytest.raises(NoContainerEngine, match="podman is not installed"):
        ServerProvider("containers")
