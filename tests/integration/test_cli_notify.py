"""`jpu notify` and `jpu submit --mail-type/--mail-user` as a user runs them (real processes)
against the real gateway and intake (SPEC Q10)."""

from __future__ import annotations

import json
from pathlib import Path

from jpu.events import JobSubmitted
from jpu.testing.api import Api
from jpu.testing.cli import failed, jpu, ok


async def test_jpu_notify_changes_only_what_it_names_Q10(
    server: str,
    api: Api,
) -> None:
    assert "Notify on:   NONE" in ok(await jpu(server, "alice", "notify"))
    ok(await jpu(server, "alice", "notify", "--email", "a@lab.example", "--mail-type", "END"))
    ok(await jpu(server, "alice", "notify", "--webhook", "https://hooks.example/T/x"))
    got = json.loads(ok(await jpu(server, "alice", "notify", "--json")))
    assert (got["email"], got["webhook_url"], got["mail_type"]) == (
        "a@lab.example", "https://hooks.example/T/x", ["END"],
    )  # fmt: skip
    assert "Notify on:   NONE" in ok(await jpu(server, "alice", "notify", "--off"))
    err = failed(await jpu(server, "alice", "notify", "--webhook", "ftp://x"), "VALIDATION_ERROR")
    assert "webhook_url" in err


async def test_jpu_submit_sbatch_mail_lines_reach_the_log_Q10(
    server: str,
    api: Api,
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --mail-type=END,FAIL\n#SBATCH --mail-user=me@lab.example\ntrue\n"
    )
    ok(await jpu(server, "alice", "submit", str(script)))
    ok(await jpu(server, "alice", "submit", "--wrap", "true", "--mail-type", "BEGIN"))
    bad = await jpu(server, "alice", "submit", "--wrap", "x", "--mail-type", "SOMETIMES")
    err = failed(bad, "VALIDATION_ERROR")
    assert "--mail-type" in err  # the flag the user gave, not the body's mail_type
    subs = [d.event async for d in api.bus.replay() if isinstance(d.event, JobSubmitted)]
    assert [(s.mail_type, s.mail_user) for s in subs] == [
        (["END", "FAIL"], "me@lab.example"), (["BEGIN"], None),
    ]  # fmt: skip


async def test_Q10_mail_user_on_a_site_without_smtp_is_warned_and_kept_on_the_job(
    server: str,
    api: Api,
    tmp_path: Path,
) -> None:
    """This server's site has no smtp_host: the address is accepted, never dropped unsaid — a
    warning on stderr at submit, kept on the job (JobSubmitted.sbatch_warnings) as U6's are,
    and shown by `jpu show`."""
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --mail-type=END\n#SBATCH --mail-user=me@lab.example\n"
                      "true\n")  # fmt: skip
    for argv, who, where in (
        ([str(script)], "me@lab.example", "train.sh:3: #SBATCH --mail-user=me@lab.example"),
        (["--wrap", "true", "--mail-user", "you@lab.example"], "you@lab.example",
         "command line: --mail-user=you@lab.example"),
    ):  # fmt: skip
        rc, out, err = await jpu(server, "alice", "submit", "--parsable", *argv)
        assert rc == 0, err
        said = [line for line in err.splitlines() if "--mail-user" in line]
        assert said == [
            f"jpu submit: warning: {where}: this site sends no e-mail (no SMTP server "
            f"configured: smtp_host), so none will reach {who}; `jpu notify --webhook URL` "
            "sends them to a webhook instead"
        ], err
        job_id = out.strip()
        subs = [d.event async for d in api.bus.replay() if isinstance(d.event, JobSubmitted)]
        kept = next(s for s in subs if s.job_id == job_id)
        assert (kept.mail_user, kept.sbatch_warnings) == (who, [said[0].split("warning: ", 1)[1]])
        shown = ok(await jpu(server, "alice", "show", job_id))
        assert f"Warning: {where}: this site sends no e-mail" in shown
    rc, _, err = await jpu(server, "alice", "submit", "--wrap", "true", "--mail-type", "END")
    assert rc == 0 and "e-mail" not in err  # no address named: the user's defaults decide
