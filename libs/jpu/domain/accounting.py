"""What accounting still owes the log (SPEC F4, F5, O1): the charges no UsageCharged settled yet.
Pure.

What an event owes is decided by the fold (`ClusterState.owed`, the rule is jpu.policy.charging)
before it may drop the job (SPEC O6); this module says which of it is still to append (and the
labs' initial charges); the UsageCharged each becomes is jpu.policy.charging.usage_charged.
jpu_services.accounting.charger appends them, exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable

from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.policy.charging import Charge, charge_id


def initial_charges(config: Config, at: float) -> list[Charge]:
    """A lab's configured starting usage (`labs[].usage`), charged once ever (`init-<lab>`)."""
    return [
        Charge(f"init-{lab.name}", lab.name, lab.usage, at, None, "initial")
        for lab in config.labs
        if lab.usage > 0
    ]


def unsettled(state: ClusterState, charges: Iterable[Charge]) -> list[Charge]:
    """F5: the charges no UsageCharged in the log settled yet."""
    return [c for c in charges if c.charge_id not in state.charged_ids]


def owed_by(state: ClusterState, event_id: str) -> Charge | None:
    """The charge the event `event_id` made the log owe, if it is not settled yet (F4, F5)."""
    c = state.owed.get(charge_id(event_id))
    return c if c is not None and c.charge_id not in state.charged_ids else None
