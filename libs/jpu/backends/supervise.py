"""SPEC U6/U7 at execution: a small bash supervisor between the job's loader and its script.

It runs as the job's account (after the drop, inside the container when there is one), in the
job's working directory, so every file it opens is opened by that account (never by root):

    /bin/bash -c SUPERVISE jpu-run OUT ERR MODE SIG DELAY BATCH FORWARD -- /bin/bash SCRIPT

  * `srun` becomes a shell function exported to the script (U7): `srun [opts] CMD…` runs CMD
    once, in the job (the local backend and containers have no Slurm of their own);
  * with no `-o/-e/--signal` it only execs the script (the process tree stays as it was);
  * OUT/ERR (sbatch -o/-e, expanded by jpu.domain.slurm_io, relative to the working directory):
    truncated unless MODE is `append`, then the job's stdout/stderr are copied there by `tee`,
    and still reach the platform's per-attempt logs; a file it cannot open is one line on the
    job's stderr, not a failed job;
  * SIG (a number) DELAY s after the start: to the batch shell (BATCH=1, `B:`) or to every
    process below it (Slurm's steps);
  * FORWARD=1 (in a container, whose init signals only its one child) passes a cancel's TERM or
    INT on to the batch shell; otherwise the process group already carries it.
Nothing of the user's is interpolated: file names and the script travel as arguments (X3).
"""

from __future__ import annotations

from jpu.backends.base import LaunchSpec
from jpu.domain import slurm_env, slurm_io

SRUN_FUNCTION = r"""srun() {  # U7: runs CMD once, in the job: srun's own options are skipped
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --) shift; break ;;
      --*=*) shift ;;
      --account|--cpus-per-task|--cpus-per-gpu|--nodes|--ntasks|--ntasks-per-node|\
--ntasks-per-gpu|--tasks-per-node|--gres|--gpus|--gpus-per-node|--gpus-per-task|--mem|\
--mem-per-cpu|--mem-per-gpu|--time|--partition|--job-name|--output|--error|--input|\
--export|--mpi|--cpu-bind|--gpu-bind|--distribution|--nodelist|--exclude|--chdir|\
--constraint|--qos|--signal|--dependency|--reservation|--container|--network|--time-min|\
--kill-on-bad-exit|--wait|--overlap-mem) shift 2 ;;
      --*) shift ;;
      -[ACDGJLNTWcdeimnopqtwx]) shift 2 ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  "$@"
}
export -f srun
"""

SUPERVISE = (
    SRUN_FUNCTION
    + r"""out="$1" err="$2" mode="$3" sig="$4" delay="$5" batch="$6" fwd="$7"
shift 8
[ -n "$out$err$sig" ] || exec "$@"
opened() {  # truncate (unless appending) and create, as this account
  { [ "$mode" = append ] || : > "$1"; } 2>/dev/null && : >> "$1" 2>/dev/null && return 0
  echo "jpu: cannot open $2 $1 (as $(id -un) in $PWD); the job's output stays in its logs" >&2
  return 1
}
if [ -n "$out" ] && ! opened "$out" -o; then [ "$err" = "$out" ] && err=; out=; fi
if [ -n "$err" ] && [ "$err" != "$out" ] && ! opened "$err" -e; then err=; fi
exec 3>&1 4>&2
to= te=
if [ -n "$err" ]; then exec 2> >(trap '' TERM INT; exec /usr/bin/tee -a -- "$err" >&4); te=$!; fi
if [ -n "$out" ]; then exec 1> >(trap '' TERM INT; exec /usr/bin/tee -a -- "$out" >&3); to=$!; fi
forward() { [ "$fwd" = 1 ] && kill -s "$1" "$job" 2>/dev/null; }
trap 'forward TERM' TERM
trap 'forward INT' INT
"$@" 3>&- 4>&- &
job=$!
below() {  # every process under $1, from /proc (ps may not be in the image)
  local -A kids=()
  local f s pid ppid
  for f in /proc/[0-9]*/stat; do
    read -r s < "$f" 2>/dev/null || continue
    pid=${s%% *}; s=${s##*) }; s=${s#* }; ppid=${s%% *}
    kids[$ppid]+=" $pid"
  done
  local todo=" ${kids[$1]}" p
  while [ -n "${todo// /}" ]; do
    set -- $todo; todo=
    for p; do echo "$p"; todo+=" ${kids[$p]}"; done
  done
}
send() {
  if [ "$batch" = 1 ]; then kill -s "$sig" "$job" 2>/dev/null; return; fi
  local p
  for p in $(below "$job"); do kill -s "$sig" "$p" 2>/dev/null; done
}
timer=
if [ -n "$sig" ] && [ -n "$delay" ]; then
  /usr/bin/sleep "$delay" >/dev/null 2>&1 3>&- 4>&- &
  timer=$!
fi
rc=
while [ -z "$rc" ]; do
  done=
  if [ -n "$timer" ]; then wait -n -p done "$timer" "$job"; st=$?
  else wait -n -p done "$job"; st=$?; fi
  if [ "$done" = "$job" ]; then rc=$st
  elif [ -n "$timer" ] && [ "$done" = "$timer" ]; then timer=; send
  fi
done
[ -z "$timer" ] || kill "$timer" 2>/dev/null
exec 1>&3 2>&4 3>&- 4>&-
for p in $to $te; do  # the copies end with the job's last writer: wait a little, not forever
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    kill -0 "$p" 2>/dev/null || break
    /usr/bin/sleep 0.1
  done
done
exit "$rc"
"""
)


def argv(
    *,
    output: str | None = None,
    error: str | None = None,
    open_mode: str | None = None,
    signal: slurm_io.SignalSpec | None = None,
    delay_s: float | None = None,
    forward: bool = False,
) -> list[str]:
    """The supervisor's command line, to put before the job's own (`/bin/bash SCRIPT`)."""
    send = signal is not None and delay_s is not None
    return [
        "/bin/bash", "-c", SUPERVISE, "jpu-run",
        output or "", error or "", slurm_io.open_mode(open_mode),
        str(signal.signum) if send and signal else "",
        f"{delay_s:.3f}" if send and delay_s is not None else "",
        "1" if signal is not None and signal.batch_only else "0",
        "1" if forward else "0",
        "--",
    ]  # fmt: skip


def for_spec(spec: LaunchSpec, *, forward: bool) -> list[str]:
    """The supervisor of one attempt: its -o/-e expanded (U6), its signal's delay from the
    time limit. `forward`: the job runs in a container (see the module's docstring)."""
    facts = slurm_io.PatternFacts(
        job_id=spec.job_id, name=spec.name, user=spec.user, node=spec.node,
        array_job_id=spec.array_job_id, array_task_id=spec.array_task_id,
    )  # fmt: skip
    out, err = slurm_io.files(spec.output, spec.error, facts)
    sig = slurm_io.parse_signal(spec.signal) if spec.signal else None
    delay = slurm_io.signal_delay(sig, spec.time_limit_s) if sig else None
    return argv(
        output=out, error=err, open_mode=spec.open_mode, signal=sig, delay_s=delay,
        forward=forward,
    )  # fmt: skip


def env_for_spec(spec: LaunchSpec) -> dict[str, str]:
    """U7: the SLURM_* variables of one attempt (the array's come with its submit's env)."""
    facts = slurm_env.JobFacts(
        job_id=spec.job_id, name=spec.name, user=spec.user, submit_dir=spec.workdir,
        node=spec.node, tier=spec.tier, gpus=spec.gpus, cpus=spec.cpus, mem_gb=spec.mem_gb,
        attempt=spec.attempt, time_limit_s=spec.time_limit_s,
    )  # fmt: skip
    return slurm_env.slurm_env(facts)
