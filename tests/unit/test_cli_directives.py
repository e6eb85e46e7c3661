"""`#SBATCH` / `#JPU` directives of a submitted script (SPEC U5), pure: what
is honoured, what is refused with its line and the fix, what sbatch would ignore, and how they
combine with the command line (`jpu submit` flags win, as sbatch's do)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jpu.cli.directives import DirectiveError, Directives, header_lines, parse, partition_tiers
from jpu.cli.main import build_parser
from jpu.cli.rest.submit import submit_body
from jpu.testing.sbatch import decided

TRAIN = """#!/bin/bash
#SBATCH --job-name=resnet
#SBATCH --gres=gpu:rtx4090:2   # two cards
#SBATCH -t 1-02:00:00 --nodes=1 -n 1

# comments and blank lines do not end the block
python train.py
#SBATCH --gpus=8
"""


def test_U5_sbatch_directives_of_the_leading_block_are_read() -> None:
    d = parse(TRAIN, "train.sh")
    assert (d.name, d.gpus, d.tiers) == ("resnet", 2, ["rtx4090"])
    assert (d.time_limit_s, d.has_time) == (86400 + 2 * 3600, True)
    assert d.ignored == [8]  # after the first command: ignored, as sbatch ignores it


@pytest.mark.parametrize(
    ("line", "gpus", "tiers"),
    [
        ("#SBATCH --gres=gpu:2", 2, None),
        ("#SBATCH --gres=gpu", 1, None),
        ("#SBATCH --gres=gpu:rtx3080ti", 1, ["rtx3080ti"]),
        ("#SBATCH --gres gpu:rtx4090:2", 2, ["rtx4090"]),
        ("#SBATCH -G 2", 2, None),
        ("#SBATCH -G2", 2, None),
        ("#SBATCH --gpus=rtx4090:2", 2, ["rtx4090"]),
        ("#SBATCH --gpus-per-node=2", 2, None),
        ("#SBATCH --gpus=2 --gres=gpu:2", 2, None),  # both, saying the same
        ("#JPU --gpus 2 --tier rtx4090,rtx3080ti", 2, ["rtx4090", "rtx3080ti"]),
    ],
)
def test_U5_gpu_requests_in_every_sbatch_form(line: str, gpus: int, tiers: list | None) -> None:
    d = parse(f"#!/bin/bash\n{line}\nrun\n")
    assert (d.gpus, d.tiers) == (gpus, tiers)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("1:30", 90), ("02:00:00", 7200), ("1-0", 86400), ("UNLIMITED", None)],
)
def test_U5_time_in_slurm_formats(text: str, seconds: int | None) -> None:
    d = parse(f"#SBATCH --time={text}\n")
    assert (d.time_limit_s, d.has_time) == (seconds, True)


def test_U5_jpu_directives_take_jpu_submit_flags_and_win_over_sbatch() -> None:
    d = parse(
        "#!/bin/bash\n#JPU --gpus 1 --env SEED=7 --min-vram 20\n#SBATCH -J a -G 2 -D /data/x\n"
        "#JPU --name b --tier rtx4090 --env LR=0.1 -t 10\n#SBATCH -J c\necho\n"
    )
    assert (d.name, d.gpus, d.chdir, d.min_vram_gb) == ("b", 1, "/data/x", 20)
    assert d.tiers == ["rtx4090"] and d.env == {"SEED": "7", "LR": "0.1"}
    assert d.time_limit_s == 600


def test_Q8_Q9_dependency_and_hold_directives_are_honoured() -> None:
    d = parse("#!/bin/bash\n#SBATCH --dependency=afterok:a1:a2 -H\n#SBATCH -d singleton\nrun\n")
    assert (d.dependency, d.hold) == ("singleton", True)  # the last line wins, as in sbatch
    d = parse("#SBATCH -d afterany:x\n#JPU --dependency afterok:y --hold\n")
    assert (d.dependency, d.hold) == ("afterok:y", True)  # #JPU wins over #SBATCH
    assert (parse("#SBATCH -d after:z\n").dependency, parse("#SBATCH -J t\n").hold) == (
        "after:z",
        False,
    )


def test_U5_only_directives_at_the_start_of_a_line_count() -> None:
    lines, late = header_lines("  #SBATCH -G 2\n#SBATCHX\n#SBATCH\t-J t\n#JPU --gpus 1\n")
    assert [n for n, _ in lines] == [3, 4] and late == []
    assert parse("#SBATCH -J x\n").name == "x"
    assert parse("echo hi\n#SBATCH -J x\n") == Directives(ignored=[2])


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("--dependency=afterok:12?afterany:13", "'?' (any of) is refused"),
        ("--gres=gpu:2,shard:1", "one GPU request per job"),
        ("--gres=mps:100", "only GPUs can be requested"),
        ("--gpus=rtx4090:1,rtx3080ti:1", "one GPU type per job"),
        ("--mail-user=a@b", "must be one e-mail address"),  # Q10: honoured, when an address
        ("--mail-type=SOMETIMES", "unknown kind 'SOMETIMES'"),
        ("--time=soon", "time limit 'soon'"),
        ("--job-name", "needs a value"),
        ("--uid=0", "runs as its submitter's account"),  # U6: the refused class
        ("--frobnicate=1", "not an sbatch option"),
        ("--gres=gpu:0", "at least 1 GPU"),
    ],
)
def test_U5_directives_it_cannot_honour_are_refused_with_the_line_and_the_fix(
    line: str, says: str
) -> None:
    with pytest.raises(DirectiveError) as e:
        parse(f"#!/bin/bash\n#SBATCH -J ok\n#SBATCH {line}\nrun\n", "train.sh")
    (problem,) = e.value.problems
    assert problem.startswith(f"train.sh:3: #SBATCH {line.split()[0]}") and says in problem
    if "not supported" in says or "arrays" in says:
        assert "##SBATCH" in problem  # how to keep the line without it


def test_U5_every_refusal_is_reported_at_once_and_a_misspelt_jpu_option_is_named() -> None:
    with pytest.raises(DirectiveError) as e:
        parse("#SBATCH --uid 0 --input x\n#JPU --teir rtx4090\n#SBATCH -G 2 --gres=gpu:1\n")
    problems = e.value.problems
    assert len(problems) == 4, problems
    assert "did you mean --tier?" in problems[2]
    assert "--gpus and --gres ask for different GPUs" in problems[3]


def test_U5_partitions_map_to_the_tiers_of_that_partition() -> None:
    tiers = {"rtx4090": "rtx4090", "rtx3080ti": "small", "t4": "small"}
    assert partition_tiers(["small"], tiers) == ["rtx3080ti", "t4"]
    with pytest.raises(ValueError, match=r"partition gpu; partitions: rtx4090 \(tier rtx4090\)"):
        partition_tiers(["gpu"], tiers)


def _body(args: Any) -> dict[str, Any]:
    """`jpu submit`'s request as intake decides it (SPEC U6: the sbatch options are its)."""
    return decided(submit_body(args))[0]


def _args(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["submit", *argv])


def test_U5_command_line_flags_win_over_the_script_like_sbatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -J resnet --gres=gpu:rtx4090:2 -t 30 -D data\n"
        "#JPU --env A=1 --env B=2\npython train.py\n"
    )
    assert _body(_args(str(script))) == {
        "name": "resnet", "command": script.read_text(), "num_gpus": 2, "tiers": ["rtx4090"],
        "time_limit_s": 1800, "env": {"A": "1", "B": "2"}, "chdir": str(tmp_path / "data"),
    }  # fmt: skip
    body = _body(
        _args(str(script), "-G", "1", "--tier", "rtx3080ti", "-t", "5", "-J", "mine",
              "--env", "B=3", "-D", "/abs")
    )  # fmt: skip
    assert (body["name"], body["num_gpus"], body["tiers"], body["time_limit_s"]) == (
        "mine", 1, ["rtx3080ti"], 300,
    )  # fmt: skip
    assert body["env"] == {"A": "1", "B": "3"} and body["chdir"] == "/abs"


def test_mail_directives_are_honoured_and_the_flags_win_Q10(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --mail-type=END,FAIL\n#SBATCH --mail-user=me@lab.example\nrun\n"
    )
    d = parse(script.read_text())
    assert (d.mail_type, d.mail_user) == (["END", "FAIL"], "me@lab.example")
    body = _body(_args(str(script)))
    assert (body["mail_type"], body["mail_user"]) == (["END", "FAIL"], "me@lab.example")
    body = _body(_args(str(script), "--mail-type", "ALL", "--mail-user", "x@lab.example"))
    assert (body["mail_type"], body["mail_user"]) == ("ALL", "x@lab.example")
    assert parse("#JPU --mail-type NONE\n#SBATCH --mail-type=ALL\n").mail_type == []
    assert "mail_type" not in _body(_args("--wrap", "true"))  # the user's defaults


def test_U6_wrap_has_no_directives_and_partitions_are_the_sites(tmp_path: Path) -> None:
    body = _body(_args("--wrap", "#SBATCH --array=1-3"))
    assert body["num_gpus"] == 1 and body["chdir"] == os.getcwd()
    script = tmp_path / "p.sh"
    script.write_text("#SBATCH -p rtx3080ti\nrun\n")
    assert _body(_args(str(script)))["tiers"] == ["rtx3080ti"]
    script.write_text("#SBATCH -p gpu\nrun\n")  # the default config's alias: any tier
    assert "tiers" not in _body(_args(str(script)))


def test_X4a_workspace_from_the_flag_then_JPU_directive_then_the_users_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#JPU --workspace torch\npython -c 'import torch'\n")
    assert _body(_args(str(script)))["workspace"] == "torch"
    assert _body(_args(str(script), "--workspace", "six"))["workspace"] == "six"
    monkeypatch.setenv("JPU_WORKSPACE", "mine")
    assert _body(_args("--wrap", "true"))["workspace"] == "mine"
    monkeypatch.delenv("JPU_WORKSPACE")
    assert "workspace" not in _body(_args("--wrap", "true"))


def test_X4a_jpu_workspace_verbs_have_help() -> None:
    parser = build_parser()
    for verb in ("build", "list", "show", "logs", "rm"):
        with pytest.raises(SystemExit) as done:
            parser.parse_args(["workspace", verb, "--help"])
        assert done.value.code == 0
    args = parser.parse_args(["workspace", "build", "six", "-r", "req.txt", "--lab"])
    assert (args.name, args.requirements, args.lab) == ("six", "req.txt", True)


def test_Q7_array_from_sbatch_jpu_and_the_command_line_like_sbatch(tmp_path: Path) -> None:
    script = tmp_path / "sweep.sh"
    script.write_text("#!/bin/bash\n#SBATCH --array=0-99%8\npython sweep.py\n")
    assert _body(_args(str(script)))["array"] == "0-99%8"
    script.write_text("#SBATCH -a 0-99%8\n#JPU --array 1,5,9\nrun\n")  # #JPU wins
    assert _body(_args(str(script)))["array"] == "1,5,9"
    assert _body(_args(str(script), "--array", "0-9:2"))["array"] == "0-9:2"
    assert "array" not in _body(_args("--wrap", "true"))
