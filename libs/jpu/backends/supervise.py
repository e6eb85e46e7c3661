"""SPEC U6/U7 at execution: a small bash supervisor between the job's loader and its script,
the same on both backends and in every container (it runs inside, after the drop).

It runs as the job's account, in the job's working directory, so every file it opens is opened
by that account (never by root). Its command line is constant (ARGV, then `/bin/bash SCRIPT`);
what it does for one attempt comes in the job's environment (run_env), which it removes first:

  * JPU_RUN_SRUN `always` (no Slurm of ours here) or `absent` (only where Slurm's own srun is
    not on PATH, e.g. a container in a Slurm allocation): `srun` becomes a shell function
    exported to the script (U7): `srun [opts] CMD…` runs CMD once, in the job;
  * JPU_SLURM_<NAME> become SLURM_<NAME> (U7: the platform's values over Slurm's own, which the
    batch step sets after the export file); Slurm's own `srun` is then called with Slurm's own
    job id (JPU_OWN_SLURM_JOB_ID), which it needs to find its allocation;
  * with no -o/-e/--signal it then execs the script (the process tree stays as it was);
  * JPU_RUN_OUT/ERR (sbatch -o/-e, expanded by jpu.domain.slurm_io, relative to the working
    directory): truncated unless JPU_RUN_MODE is `append`, then the job's stdout/stderr are
    copied there by `tee` and still reach the platform's per-attempt logs; a file it cannot
    open is one line on the job's stderr, not a failed job;
  * JPU_RUN_SIG (a number) JPU_RUN_DELAY s after the start: to the batch shell (JPU_RUN_BATCH=1,
    `B:`) or to every process below it (Slurm's steps);
  * JPU_RUN_FWD=1 (podman, whose init signals only its one child) passes a cancel's TERM or INT
    on to the batch shell; elsewhere the process group (or Slurm) already carries it.
Nothing of the user's is interpolated: file names travel as values (X3).
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

SUPERVISE = r"""out="$JPU_RUN_OUT" err="$JPU_RUN_ERR" mode="$JPU_RUN_MODE" sig="$JPU_RUN_SIG"
delay="$JPU_RUN_DELAY" batch="$JPU_RUN_BATCH" fwd="$JPU_RUN_FWD" shim="$JPU_RUN_SRUN"
unset JPU_RUN_OUT JPU_RUN_ERR JPU_RUN_MODE JPU_RUN_SIG JPU_RUN_DELAY JPU_RUN_BATCH JPU_RUN_FWD \
  JPU_RUN_SRUN
if [ -n "${JPU_SLURM_JOB_ID+x}" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
  export JPU_OWN_SLURM_JOB_ID="$SLURM_JOB_ID"  # Slurm's own srun needs Slurm's own id
fi
for v in ${!JPU_SLURM_@}; do export "${v#JPU_}=${!v}"; unset "$v"; done
if [ "$shim" = always ] || { [ "$shim" = absent ] && ! command -v srun >/dev/null; }; then
"""
SUPERVISE += SRUN_FUNCTION
SUPERVISE += r"""elif [ -n "${JPU_OWN_SLURM_JOB_ID:-}" ]; then
srun() {
  SLURM_JOB_ID="$JPU_OWN_SLURM_JOB_ID" SLURM_JOBID="$JPU_OWN_SLURM_JOB_ID" command srun "$@"
}
export -f srun
fi
[ -n "$out$err$sig" ] || exec "$@"
opened() {  # truncate (unless appending) and create, as this account
  { [ "$mode" = append ] || : > "$1"; } 2>/dev/null && : >> "$1" 2>/dev/null && return 0
  echo "jpu: cannot open $2 $1 (as uid $(id -u) in $PWD); the job's output stays in its logs" >&2
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
if [ -n "$sig" ] && [ -n "$delay" ]; then  # a subshell that sleeps, then signals
  (
    trap 'kill "$sp" 2>/dev/null; exit 0' TERM
    /usr/bin/sleep "$delay" >/dev/null 2>&1 3>&- 4>&- &
    sp=$!
    wait "$sp" && send
  ) >/dev/null 2>&1 3>&- 4>&- &
  timer=$!
fi
# a trap interrupts `wait`: wait again while the job lives; the last wait gives its status
# (bash keeps it, also for a job that ended before the first wait)
while kill -0 "$job" 2>/dev/null; do wait "$job"; done
wait "$job"
rc=$?
[ -z "$timer" ] || kill "$timer" 2>/dev/null
exec 1>&3 2>&4 3>&- 4>&-
# the copies end with the job's last writer; a process the script left behind may hold the
# pipe (Slurm ends the job with its batch shell, and so does the backend): wait 0.5 s at most
exec 5<> <(:)  # an empty pipe: `read -t` on it sleeps without a process
for p in $to $te; do
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$p" 2>/dev/null || break
    read -r -t 0.05 -u 5 _
  done
done
exit "$rc"
"""
ARGV = ("/bin/bash", "-c", SUPERVISE, "jpu-run")  # then the script: `/bin/bash SCRIPT`


def run_env(spec: LaunchSpec, *, forward: bool, srun: str) -> dict[str, str]:
    """What the supervisor does for one attempt: its -o/-e expanded (U6), its signal's delay
    from the time limit, `forward` in a podman container, `srun` always|absent (U7)."""
    facts = slurm_io.PatternFacts(
        job_id=spec.job_id, name=spec.name, user=spec.user, node=spec.node,
        array_job_id=spec.array_job_id, array_task_id=spec.array_task_id,
    )  # fmt: skip
    out, err = slurm_io.files(spec.output, spec.error, facts)
    sig = slurm_io.parse_signal(spec.signal) if spec.signal else None
    delay = slurm_io.signal_delay(sig, spec.time_limit_s) if sig else None
    send = sig is not None and delay is not None
    return {
        "JPU_RUN_OUT": out or "",
        "JPU_RUN_ERR": err or "",
        "JPU_RUN_MODE": slurm_io.open_mode(spec.open_mode),
        "JPU_RUN_SIG": str(sig.signum) if sig is not None and send else "",
        "JPU_RUN_DELAY": f"{delay:.3f}" if delay is not None and send else "",
        "JPU_RUN_BATCH": "1" if sig is not None and sig.batch_only else "0",
        "JPU_RUN_FWD": "1" if forward else "0",
        "JPU_RUN_SRUN": srun,
    }


def env_for_spec(spec: LaunchSpec) -> dict[str, str]:
    """U7: the SLURM_* variables of one attempt (the array's come with its submit's env)."""
    facts = slurm_env.JobFacts(
        job_id=spec.job_id, name=spec.name, user=spec.user, submit_dir=spec.workdir,
        node=spec.node, tier=spec.tier, gpus=spec.gpus, cpus=spec.cpus, mem_gb=spec.mem_gb,
        attempt=spec.attempt, time_limit_s=spec.time_limit_s,
    )  # fmt: skip
    return slurm_env.slurm_env(facts)


# U7 on the Slurm backend: what Slurm itself knows better (the allocation it made) is kept
SLURM_KEEPS = frozenset(
    {
        "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE",
        "SLURM_MEM_PER_NODE", "SLURMD_NODENAME", "SLURM_NODEID", "SLURM_PROCID",
        "SLURM_LOCALID", "SLURM_SUBMIT_HOST",
    }
)  # fmt: skip


def slurm_overrides(spec: LaunchSpec) -> dict[str, str]:
    """U7 on the Slurm backend: the platform's values where they differ from Slurm's (its job
    id, name, submit dir, partition = tier, restart count, the array's), as JPU_SLURM_<NAME>
    (the supervisor renames them inside the step, after Slurm has set its own)."""
    env = {k: v for k, v in env_for_spec(spec).items() if k not in SLURM_KEEPS}
    env.update((k, v) for k, v in spec.env.items() if k.startswith("SLURM_ARRAY_"))
    return {"JPU_" + k: v for k, v in env.items()}
