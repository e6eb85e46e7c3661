"""A stand-in `apptainer` executable for the SPEC X4 tests.

Apptainer is outside the system (an external runtime) and cannot be installed on the test
machine (not in Debian 12; its sources are unreachable), so the tests write this program in its
place. It is strict about what JPU-Share must pass (`exec --containall --net --network none
--no-eval --bind OUT --pwd OUT … IMAGE CMD…`, an existing image, never run as root) and then
does what the real runtime does for those options: a clean environment (LANG=C, HOME, the
default PATH) plus the APPTAINERENV_<NAME> variables unprefixed and never evaluated, the working
directory, and a new network namespace with only a loopback that is down (`unshare --net`; run
as is, and says so, where the kernel refuses one). It reports itself on stderr as one line:
`apptainer-standin {json}`.
"""

from __future__ import annotations

import json
from pathlib import Path

PROGRAM = r"""#!/usr/bin/python3
import json, os, pwd, subprocess, sys

def fail(why):
    print(f"apptainer-standin error: {why}", file=sys.stderr)
    sys.exit(255)

args = sys.argv[1:]
head = ["exec", "--containall", "--net", "--network", "none"]
if args[: len(head)] != head:
    fail(f"expected {head}, got {args}")
opts, rest = {}, args[len(head):]
while rest and rest[0].startswith("-"):
    flag = rest.pop(0)
    if flag in ("--bind", "--pwd"):
        opts.setdefault(flag, []).append(rest.pop(0))
    else:
        opts.setdefault(flag, []).append(True)
if "--no-eval" not in opts:
    fail("--no-eval missing: the runtime would evaluate the job's variables")
if len(rest) < 2:
    fail("no image or command")
image, command = rest[0], rest[1:]
if not os.path.exists(image):
    fail(f"image {image} does not exist")
if os.getuid() == 0:
    fail("apptainer must run as the user's account, not root")
pwd_dir = opts.get("--pwd", ["/"])[-1]
if pwd_dir not in opts.get("--bind", []):
    fail(f"--pwd {pwd_dir} is not bound")

# --containall implies --cleanenv: nothing of the caller's environment but APPTAINERENV_*
env = {"LANG": "C", "HOME": pwd.getpwuid(os.getuid()).pw_dir,
       "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
for key, value in os.environ.items():
    if key.startswith("APPTAINERENV_"):
        name = key[len("APPTAINERENV_"):]
        if name in ("HOME", "UID", "GID") or not name:
            continue
        env[name] = value  # with --no-eval, verbatim

netns = None
userns = ["unshare", "--user", "--map-current-user", "--net", "--"]
for prefix in (["unshare", "--net", "--"], userns):
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
    except OSError:
        ok = False
    if ok:
        netns = prefix
        break
report = {"argv": sys.argv[1:], "uid": os.getuid(), "netns": netns is not None, "image": image}
print("apptainer-standin " + json.dumps(report), file=sys.stderr, flush=True)
os.chdir(pwd_dir)
argv = [*(netns or []), *command]
os.execvpe(argv[0], argv, env)
"""


def write_standin(directory: Path) -> Path:
    """Write the stand-in as DIRECTORY/apptainer (world-executable: jobs run as other users)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    path = directory / "apptainer"
    path.write_text(PROGRAM)  # /usr/bin/python3: the venv's may not be readable by the job
    path.chmod(0o755)
    return path


def standin_report(stderr: str) -> dict[str, object]:
    """The stand-in's report line from a job's stderr."""
    for line in stderr.splitlines():
        if line.startswith("apptainer-standin {"):
            report: dict[str, object] = json.loads(line.split(" ", 1)[1])
            return report
    raise AssertionError(f"the stand-in apptainer never ran; stderr: {stderr!r}")
