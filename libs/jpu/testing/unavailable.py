"""The one rule for tests that need an optional outside thing (Prometheus, Slurm, root, a browser,
a container engine…): where it is missing the test skips, with the reason — unless the setting
that makes it required is in effect (JPU_TEST_<NAME>_REQUIRED=1; `.ci/run` sets them), where
missing is a failure that names that setting.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def required_variable(name: str) -> str:
    """JPU_TEST_<NAME>_REQUIRED for `name` ("prometheus" → JPU_TEST_PROMETHEUS_REQUIRED)."""
    return f"JPU_TEST_{name.upper()}_REQUIRED"


def required(name: str) -> bool:
    """`name` must be there: its JPU_TEST_<NAME>_REQUIRED is 1."""
    return os.environ.get(required_variable(name)) == "1"


def skip_or_fail(why: str, required_by: str | None) -> NoReturn:
    """Fail naming `required_by` (the setting in effect that makes the thing required, e.g.
    "JPU_TEST_CLUSTER_SERVERS=containers"), or skip with `why` when it is None. Also usable at
    module level (during collection)."""
    __tracebackhide__ = True  # the report names the caller's line, not this one
    if required_by is not None:
        pytest.fail(f"{required_by} but {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def skip_unless_required(name: str, why: str) -> NoReturn:
    """The missing `name`'s skip with `why`; a failure when JPU_TEST_<NAME>_REQUIRED=1."""
    __tracebackhide__ = True
    skip_or_fail(why, f"{required_variable(name)}=1" if required(name) else None)


def needs_root(what: str) -> None:
    """Returns as root; otherwise skips, or fails with JPU_TEST_ROOT_REQUIRED=1. `what` says
    what the test does that needs root."""
    __tracebackhide__ = True
    uid = os.geteuid()
    if uid != 0:
        skip_unless_required("root", f"needs root ({what}) and runs as uid {uid}")
