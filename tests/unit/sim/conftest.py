"""Fixtures for simulator tests (builders live in jpu.testing.simkit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpu.testing.simkit import Simulate, make_simulate


@pytest.fixture
def simulate(tmp_path: Path) -> Simulate:
    return make_simulate(tmp_path)
