"""`jpu simulate` / `jpu philly-convert` end to end on files (SPEC §10, U1, U3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jpu.cli.main import main
from jpu.config import DEFAULT_PATH
from jpu.sim.audit import audit_dir

CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 00:00:10,600.0,1,600.0,aaa111
2017-10-01 00:00:00,300.0,2,600.0,bbb222
2017-10-01 00:01:00,60.0,16,960.0,aaa111
"""


def test_convert_then_simulate_then_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_text(CSV)
    jobs = tmp_path / "jobs.jsonl"
    assert main(["philly-convert", "--trace", str(tmp_path / "t.csv"), "--out", str(jobs),
                 "--max-gpus", "2"]) == 0  # fmt: skip
    assert "wrote 3 jobs" in capsys.readouterr().err
    out = tmp_path / "out"
    rc = main(["simulate", "--cluster", str(DEFAULT_PATH), "--workload", str(jobs),
               "--out", str(out), "--policy", "jpu", "--half-life-s", "3600", "--cycle-s", "1",
               "--backfill", "on", "--audit"])  # fmt: skip
    assert rc == 0
    cap = capsys.readouterr()
    assert "sim: 100.0% (3/3 jobs)" in cap.err  # U3 progress
    assert "jpu: 3 jobs" in cap.out
    assert "audit: OK" in cap.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parameters"]["half_life_s"] == 3600 and summary["parameters"]["cycle_s"] == 1
    assert summary["job_states"] == {"COMPLETED": 3}
    assert set(summary["wait_s_by_num_gpus"]) == {"1", "2"}
    assert audit_dir(out).ok


def test_simulate_bad_workload_line_exits_1_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "w.jsonl"
    w.write_text('{"id": "a", "lab": "L", "user": "u", "submit_s": 0, "num_gpus": 1, '
                 '"duration_s": 5}\nnot json\n')  # fmt: skip
    rc = main(["simulate", "--cluster", str(DEFAULT_PATH), "--workload", str(w),
               "--out", str(tmp_path / "o"), "--quiet"])  # fmt: skip
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jpu simulate: error:") and "w.jsonl:2:" in err[0]


def test_simulate_missing_cluster_file_exits_1(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    w.write_text("")
    assert main(["simulate", "--cluster", str(tmp_path / "nope.yaml"), "--workload", str(w),
                 "--out", str(tmp_path / "o")]) == 1  # fmt: skip


def test_SIM_identical_logs_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    """Reproducible runs: no dependence on set/dict hash order (PYTHONHASHSEED)."""
    w = tmp_path / "w.jsonl"
    w.write_text(
        "".join(
            json.dumps({"id": f"j{i}", "lab": f"L{i % 3}", "user": f"u{i % 4}",
                        "submit_s": i * 3, "num_gpus": 1 + i % 2, "duration_s": 50 + i,
                        "tiers": ["rtx4090", "rtx3080ti"] if i % 3 else None,
                        "peak_vram_gb": 16 if i % 7 == 0 else None}) + "\n"
            for i in range(40)
        )
    )  # fmt: skip
    logs = []
    for seed in ("1", "2"):
        out = tmp_path / f"o{seed}"
        subprocess.run(
            [sys.executable, "-m", "jpu.cli.main", "simulate", "--cluster", str(DEFAULT_PATH),
             "--workload", str(w), "--out", str(out), "--quiet"],
            check=True, env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
        )  # fmt: skip
        logs.append((out / "events.jsonl").read_bytes())
    assert logs[0] == logs[1] and logs[0].count(b"\n") > 100


def test_R6_simulate_reads_reservation_demotion_from_flag_or_cluster_file(tmp_path: Path) -> None:
    """The simulator runs the mode the services would: the cluster file's key, or the flag."""
    w = tmp_path / "w.jsonl"
    w.write_text('{"id": "a", "lab": "L", "user": "u", "submit_s": 0, "num_gpus": 2, '
                 '"duration_s": 5}\n')  # fmt: skip
    cluster = tmp_path / "c.yaml"
    cluster.write_text(DEFAULT_PATH.read_text() + "\nreservation_demotion: damped\n"
                       "reservation_demotion_margin: 0.25\n")  # fmt: skip

    def params(*extra: str) -> dict[str, object]:
        out = tmp_path / f"o{len(extra)}"
        assert main(["simulate", "--cluster", str(cluster), "--workload", str(w),
                     "--out", str(out), "--quiet", *extra]) == 0  # fmt: skip
        return json.loads((out / "summary.json").read_text())["parameters"]

    p = params()
    assert (p["reservation_demotion"], p["reservation_demotion_margin"]) == ("damped", 0.25)
    p = params("--reservation-demotion", "useful")
    assert (p["reservation_demotion"], p["reservation_demotion_margin"]) == ("useful", 0.25)
    with pytest.raises(SystemExit):  # argparse refuses an unknown mode, naming the choices
        main(["simulate", "--cluster", str(cluster), "--workload", str(w), "--out",
              str(tmp_path / "x"), "--reservation-demotion", "never"])  # fmt: skip
