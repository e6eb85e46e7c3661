"""SPEC U6: a script that runs under sbatch runs here unchanged. The one table of sbatch options
(each in one class), the corpus of real-world GPU scripts accepted as written (with the warnings
their class says), the impossible ones refused naming line, option and fix, and the policy's
tier constraints, partitions, accounts, features and strictness. Pure: the default
configuration's tiers (rtx4090: 8 CPUs and 32 GB per GPU, rtx3080ti: 6 and 24, 2 GPUs each)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jpu.cli.main import build_parser
from jpu.cli.rest.client import RestError
from jpu.cli.rest.submit import request
from jpu.config import load_config
from jpu.policy import sbatch as policy
from jpu.policy.sbatch_options import BY_NAME, CLASSES, OPTIONS
from jpu.testing.sbatch import default_site, submit
from jpu.tools import sbatch_docs

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "sbatch"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
TIERS = load_config().tiers


def _submit(path: Path, *flags: str, site: policy.Site | None = None):  # type: ignore[no-untyped-def]
    """`jpu submit`'s request, decided as intake decides it (jpu.domain.submission)."""
    args = build_parser().parse_args(["submit", str(path), *flags])
    return submit(args, site=site)


def _script(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "job.sh"
    p.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {line}\n" for line in lines) + "run\n")
    return p


def _site(**kw) -> policy.Site:  # type: ignore[no-untyped-def]
    base = default_site()
    return policy.Site(
        tiers=base.tiers,
        partition_aliases=kw.get("aliases", base.partition_aliases),
        compat=kw.get("compat", "lenient"),
        unknown_partition=kw.get("unknown", "warn"),
        lab=kw.get("lab"),
    )


def test_U6_every_sbatch_option_is_in_exactly_one_class() -> None:
    names = [n for o in OPTIONS for n in o.names]
    assert len(names) == len(set(names))  # one row per option (and per alias)
    assert {o.cls for o in OPTIONS} == set(CLASSES)
    for must in ("-o", "-e", "--open-mode", "--signal", "-c", "--mem", "--mem-per-cpu",
                 "--mem-per-gpu", "--cpus-per-gpu", "--gpus-per-node", "--gpus-per-task",
                 "--gres", "-p", "-A", "-C", "--time", "--tasks", "--export", "--mail-type",
                 "--array", "--dependency", "--hold", "-J", "-D"):  # fmt: skip
        assert BY_NAME[must].cls == "honoured", must
    for bookkeeping in ("--qos", "--exclusive", "-w", "-x", "--comment", "--verbose", "-L",
                        "--gpu-bind", "--time-min", "--requeue", "--no-requeue"):  # fmt: skip
        assert BY_NAME[bookkeeping].cls == "warning", bookkeeping


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if not n.startswith("refused/")))
def test_U6_real_world_gpu_scripts_are_accepted_unchanged(name: str) -> None:
    want = EXPECTED[name]
    body, d = _submit(CORPUS / name)
    assert (body["num_gpus"], body.get("tiers")) == (want["num_gpus"], want["tiers"])
    warned = [re.match(r"^\S+ #SBATCH (\S+?)(?:=|\s|:)", w).group(1) for w in d.warnings]  # type: ignore[union-attr]
    assert warned == want["warn"]  # one line per option of the warning class, naming its line
    assert d.kept == [w for w in d.warnings if "time=0" not in w]  # kept on the job


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.startswith("refused/")))
def test_U6_impossible_scripts_are_refused_naming_line_option_and_fix(name: str) -> None:
    want = EXPECTED[name]
    with pytest.raises(RestError) as e:
        _submit(CORPUS / name)
    first = str(e.value).splitlines()[0]
    assert first.startswith(f"{Path(name).name}:{want['line']}: #SBATCH {want['option']}=")
    assert re.search(r"use|ask for|name one|drop", first), first  # the fix


def test_U6_output_error_open_mode_and_signal_are_parsed_for_the_backends() -> None:
    body, _ = _submit(CORPUS / "checkpoint_signal.sh")
    assert (body["output"], body["open_mode"], body["signal"]) == (
        "slurm-%j.out", "append", "B:USR1@90",
    )  # fmt: skip
    assert policy.signal("USR1") == "USR1@60" and policy.signal("R:10@30") == "USR1@30"
    assert policy.signal("SIGTERM@5") == "TERM@5" and policy.signal("NOPE@5") is None


def test_U6_cpus_and_memory_admit_only_the_tiers_that_cover_them(tmp_path: Path) -> None:
    assert "tiers" not in _submit(_script(tmp_path, "--gres=gpu:1", "-c 6", "--mem=24G"))[0]
    body = _submit(_script(tmp_path, "--gres=gpu:1", "-c 8"))[0]
    assert body["tiers"] == ["rtx4090"]  # the 3080 Ti brings 6 CPUs per GPU
    body = _submit(_script(tmp_path, "--gres=gpu:1", "--mem-per-gpu=30G"))[0]
    assert body["tiers"] == ["rtx4090"]
    body = _submit(_script(tmp_path, "-G 2", "--cpus-per-gpu=7"))[0]
    assert body["tiers"] == ["rtx4090"]
    body = _submit(_script(tmp_path, "-G 1", "-c 4", "--mem-per-cpu=7G"))[0]
    assert body["tiers"] == ["rtx4090"]  # 28 GB
    body = _submit(_script(tmp_path, "-G 1"), "--mem", "30G")[0]  # on the command line too
    assert body["tiers"] == ["rtx4090"]
    with pytest.raises(RestError, match=r"^job\.sh:2: #SBATCH --mem=65G: .*the most: rtx4090, 64G"):
        _submit(_script(tmp_path, "--mem=65G", "--gres=gpu:2"))
    with pytest.raises(RestError, match=r"^command line: -c 9: 9 CPUs: .*ask for at most 8"):
        _submit(_script(tmp_path, "-G 1"), "-c", "9")


def test_U6_gpus_per_task_and_per_node_with_one_node(tmp_path: Path) -> None:
    assert _submit(_script(tmp_path, "--gpus-per-node=2", "-N 1"))[0]["num_gpus"] == 2
    assert _submit(_script(tmp_path, "--gpus-per-task=1", "-n 1"))[0]["num_gpus"] == 1
    assert _submit(_script(tmp_path, "--gpus-per-task=1", "--ntasks=2"))[0]["num_gpus"] == 2
    with pytest.raises(RestError, match="a job runs on one node"):
        _submit(_script(tmp_path, "-G 1", "-N 2"))


def test_U6_partitions_the_sites_aliases_and_unknown_ones(tmp_path: Path) -> None:
    assert "tiers" not in _submit(_script(tmp_path, "-p gpu"))[0]  # the default alias
    site = _site(aliases={"small": ["rtx3080ti"], "gpu": []})
    assert _submit(_script(tmp_path, "-p small"), site=site)[0]["tiers"] == ["rtx3080ti"]
    assert _submit(_script(tmp_path, "-p rtx4090"), site=site)[0]["tiers"] == ["rtx4090"]
    body, d = _submit(_script(tmp_path, "-p gpu_p100"), site=site)
    assert "tiers" not in body and "partition gpu_p100 is not one of this site's" in d.warnings[0]
    with pytest.raises(RestError, match=r"job\.sh:2: #SBATCH -p gpu_p100: partition gpu_p100"):
        _submit(_script(tmp_path, "-p gpu_p100"), site=_site(unknown="refuse"))


def test_U6_account_naming_the_lab_is_honoured_another_warns(tmp_path: Path) -> None:
    assert _submit(_script(tmp_path, "-A bcg"), site=_site(lab="bcg"))[1].warnings == []
    (w,) = _submit(_script(tmp_path, "-A other"), site=_site(lab="bcg"))[1].warnings
    assert w.startswith("job.sh:2: #SBATCH -A other: jobs are charged to your lab bcg")


def test_U6_constraint_names_a_tier_or_gpu_model(tmp_path: Path) -> None:
    for feature in ("rtx4090", "RTX4090", "'NVIDIA RTX 4090'", "rtx_4090"):
        assert _submit(_script(tmp_path, f"-C {feature}"))[0]["tiers"] == ["rtx4090"], feature
    body = _submit(_script(tmp_path, "--constraint=rtx4090|rtx3080ti"))[0]
    assert "tiers" not in body  # either: every tier of this site
    body, d = _submit(_script(tmp_path, "-C ib"))
    assert "tiers" not in body and "feature ib is not a tier or GPU model" in d.warnings[0]
    assert _submit(_script(tmp_path, "--gres=gpu:RTX_4090:1"))[0]["tiers"] == ["rtx4090"]


def test_U6_strict_compat_refuses_the_warning_class(tmp_path: Path) -> None:
    strict = _site(compat="strict")
    with pytest.raises(RestError, match=r"--qos=normal: .*sbatch_compat: strict"):
        _submit(_script(tmp_path, "--qos=normal", "-G 1"), site=strict)
    assert _submit(_script(tmp_path, "-c 4", "-G 1"), site=strict)[1].warnings == []


def test_U6_time_zero_export_and_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body, d = _submit(_script(tmp_path, "--time=0"))
    assert "time_limit_s" not in body and "the site's maximum" in d.warnings[0]
    assert "time_limit_s" not in _submit(_script(tmp_path, "-t 1:00"), "-t", "0")[0]
    monkeypatch.setenv("SEED", "7")
    body = _submit(_script(tmp_path, "--export=ALL,SEED,LR=0.1"))[0]
    assert body["env"] == {"SEED": "7", "LR": "0.1"}
    assert "env" not in _submit(_script(tmp_path, "--export=NONE"))[0]
    assert _submit(_script(tmp_path, "--tasks=1"))[1].warnings == []


def test_U6_the_command_line_accepts_every_option_an_sbatch_line_does(tmp_path: Path) -> None:
    plain = _script(tmp_path, "-G 1")
    for o in OPTIONS:
        name = o.long
        flag = [name] if o.value != "required" else [f"{name}=1"]
        if o.key in ("wrap", "parsable") or name in ("--gpus", "--time", "--job-name"):
            continue  # jpu submit's own flags (tested with their values elsewhere)
        args = build_parser().parse_args(["submit", str(plain), *flag])  # no usage error
        if o.cls == "refused":
            with pytest.raises(RestError, match=re.escape(name)):
                request(args)


def test_U6_the_sbatch_doc_is_generated_from_the_table() -> None:
    assert sbatch_docs.DOC.read_text() == sbatch_docs.render(), (
        "run `python -m jpu.tools.sbatch_docs`"
    )
    assert all(o.long in sbatch_docs.render() for o in OPTIONS)


def test_U6_slurm_only_mail_kinds_and_any_job_name_are_accepted(tmp_path: Path) -> None:
    body, d = _submit(_script(tmp_path, "--mail-type=BEGIN,END,TIME_LIMIT_80", '-J "my run/1"'))
    assert body["mail_type"] == ["BEGIN", "END"] and body["name"] == "my_run_1"
    assert "TIME_LIMIT_80 mail is not sent here" in d.warnings[0]
    assert _submit(_script(tmp_path, "-A BCG"), site=_site(lab="bcg"))[1].warnings == []


def test_U6_gpus_type_and_count_on_the_command_line(tmp_path: Path) -> None:
    body = _submit(_script(tmp_path), "-G", "rtx4090:2")[0]
    assert (body["num_gpus"], body["tiers"]) == (2, ["rtx4090"])
    assert _submit(_script(tmp_path, "-G 2"), "--gpus", "1")[0]["num_gpus"] == 1
    with pytest.raises(RestError, match=r"command line: --gpus=a100:1: no tier offers"):
        _submit(_script(tmp_path), "--gpus", "a100:1")


def test_U6_the_submit_fields_for_the_backends_are_checked_by_Q1() -> None:
    from jpu.domain.validation import validate_submit

    qos = {"source": "run.sh", "options": [{"option": "--qos", "value": "x"}]}
    good = {"command": "run", "num_gpus": 1, "output": "o-%j.out", "error": "e-%j.err",
            "open_mode": "append", "signal": "B:USR1@90", "sbatch": qos}  # fmt: skip
    assert validate_submit(good, ["rtx4090"]) == []
    bad = {**good, "output": "", "open_mode": "w", "signal": "USR1", "sbatch": {"x": []}}
    fields = sorted(e.field for e in validate_submit(bad, ["rtx4090"]))
    assert fields == ["open_mode", "output", "sbatch", "signal"]
    # the warnings are intake's to decide: a body's own is refused, naming it
    (forged,) = validate_submit({**good, "sbatch_warnings": []}, ["rtx4090"])
    assert forged.field == "sbatch_warnings" and "set by the platform" in forged.message


def test_U6_memory_units_as_slurm_reads_them() -> None:
    assert [policy.mem_mb(v) for v in ("4096", "4G", "4gb", "4096M", "1T", "x")] == [
        4096.0, 4096.0, 4096.0, 4096.0, 1048576.0, None,
    ]  # fmt: skip
