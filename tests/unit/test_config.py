"""SPEC O1: one config file, every key overridable by JPU_<KEY>; bad config names the key."""

from pathlib import Path

import pytest

from jpu.config import ConfigError, load_cluster, load_config


def test_O1_default_cluster_is_the_spec_table() -> None:
    c = load_config(env={})
    t = {x.name: x for x in c.tiers}
    assert (t["rtx4090"].tflops, t["rtx4090"].vram_gb, t["rtx4090"].sort_order) == (82.6, 24, 20)
    assert (t["rtx3080ti"].tflops, t["rtx3080ti"].vram_gb, t["rtx3080ti"].max_gpus) == (34.1, 12, 2)
    assert [n.name for n in c.nodes] == [
        "gpu-4090x2-01",
        "gpu-4090x2-02",
        "gpu-3080tix2-01",
        "gpu-3080tix2-02",
    ]
    assert c.half_life_s == 604800 and c.cycle_s == 5.0


def test_O1_env_overrides_any_key() -> None:
    c = load_config(env={"JPU_CYCLE_S": "0.5", "JPU_NODES": "[{name: n1, gpus: {rtx4090: 4}}]"})
    assert c.cycle_s == 0.5
    assert [(n.name, n.gpus) for n in c.nodes] == [("n1", {"rtx4090": 4})]


def test_O1_invalid_config_names_key_and_reason(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cycle_s"):
        load_config(env={"JPU_CYCLE_S": "fast"})
    bad = tmp_path / "c.yaml"
    bad.write_text("nodes: [{name: n, gpus: {h100: 1}}]\n")
    with pytest.raises(ConfigError, match=r"nodes\[0\].gpus: unknown tier 'h100'"):
        load_config(bad, env={})


def test_O1_cluster_file_with_lab_usage(tmp_path: Path) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_text(
        "tiers: [{name: a, model: A, vram_gb: 8, tflops: 10, sort_order: 1, max_gpus: 2,"
        " partition: a}]\n"
        "nodes: [{name: n1, gpus: {a: 2}}]\n"
        "labs: [{name: BCG, usage: 24000,"
        " users: [{name: alice, max_active_jobs: 3}, {name: bob}]}]\n"
    )
    c = load_cluster(f)
    assert c.labs[0].usage == 24000 and c.labs[0].users[1].max_active_jobs is None


def test_O1_data_dir_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs run with another working directory: a relative data_dir would break their paths."""
    monkeypatch.chdir(tmp_path)
    c = load_config(env={"JPU_DATA_DIR": ".jpu"})
    assert c.data_dir == str(tmp_path / ".jpu")
