"""P2 / X9: a configured node the backend does not know is reported down, never offered to a job."""

from jpu.backends import NodeInventory
from jpu.domain.holdings import with_missing

SLURM = [NodeInventory(node="gpu-4090x2-01", gpus={"rtx4090": 2})]


def test_P2_configured_node_missing_from_the_backend_is_reported_down() -> None:
    configured = {"gpu-4090x2-01": {"rtx4090": 2}, "gpu-3080tix2-02": {"rtx3080ti": 2}}
    out = with_missing(SLURM, configured)
    assert out[0] == SLURM[0]  # what the backend sees is kept as it is
    (missing,) = out[1:]
    assert (missing.node, missing.state, missing.gpus) == (
        "gpu-3080tix2-02", "down", {"rtx3080ti": 2},
    )  # fmt: skip
    assert missing.down == {"rtx3080ti": [0, 1]}  # every GPU down: no capacity (P2)


def test_P1_backend_node_not_in_the_configuration_is_kept() -> None:
    extra = [*SLURM, NodeInventory(node="gpu-new-01", gpus={"rtx4090": 4})]
    assert with_missing(extra, {"gpu-4090x2-01": {"rtx4090": 2}}) == extra
