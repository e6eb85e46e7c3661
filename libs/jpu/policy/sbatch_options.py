"""Every sbatch option, in exactly one class (SPEC U6). Pure data.

One table read by intake, which decides every submit's options (jpu.policy.sbatch.read_options,
jpu.domain.submission.with_sbatch), by the `#SBATCH` parser (jpu.cli.directives.sbatch) and
`jpu submit`'s command line (the two accept the same set), and by the docs
(`python -m jpu.tools.sbatch_docs` writes docs/sbatch.md from it):

- `honoured`: means here what it means in Slurm (a value no tier can meet is refused, naming
  the line, the option and the fix: more than one node, `gpu:0`, a GPU type or count, CPUs or
  memory no tier brings);
- `warning`: site bookkeeping with no meaning here: accepted, one warning line per option, kept
  on the job (`sbatch_compat: strict` refuses them instead);
- `refused`: cannot be met, and dropping it silently would change the result.

`key` names what the parser does with the value (jpu.cli.directives.sbatch); `value` is
`required`, `none` (a flag) or `optional` (`--exclusive[=user]`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

Class = Literal["honoured", "warning", "refused"]
Value = Literal["required", "none", "optional"]
CLASSES: Final[tuple[Class, ...]] = ("honoured", "warning", "refused")


@dataclass(frozen=True)
class Option:
    long: str  # "--cpus-per-task"
    short: str | None  # "-c"
    value: Value
    cls: Class
    key: str  # what the parser does with it (honoured), "warn" or "refuse"
    meaning: str  # what it means here (the docs' text; a warning's or refusal's reason)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.long,) if self.short is None else (self.long, self.short)

    @property
    def label(self) -> str:
        return self.long if self.short is None else f"{self.short}/{self.long}"


def _h(long: str, short: str | None, key: str, meaning: str, value: Value = "required") -> Option:
    return Option(long, short, value, "honoured", key, meaning)


def _w(long: str, short: str | None, meaning: str, value: Value = "required") -> Option:
    return Option(long, short, value, "warning", "warn", meaning)


def _r(long: str, short: str | None, meaning: str, value: Value = "required") -> Option:
    return Option(long, short, value, "refused", "refuse", meaning)


_NODE = "the scheduler chooses the node (fair-share, SPEC D4)"
_TASK = "the script runs once, as under sbatch; start your own processes (torchrun) inside it"
_NOOP = "no meaning here"

OPTIONS: Final[tuple[Option, ...]] = (
    # --- honoured -------------------------------------------------------------------------
    _h("--job-name", "-J", "name", "the job's name"),
    _h("--time", "-t", "time", "time limit (Slurm formats); 0 or UNLIMITED: the site's maximum"),
    _h("--chdir", "-D", "chdir", "the directory the job runs in (default: the submit directory)"),
    _h("--array", "-a", "array", "a job array (SPEC Q7), e.g. 0-99%8"),
    _h("--dependency", "-d", "dependency", "start after other jobs (SPEC Q8)"),
    _h("--hold", "-H", "hold", "submitted held: runs after `jpu release` (SPEC Q9)", "none"),
    _h("--mail-type", None, "mail_type", "notification kinds (SPEC Q10)"),
    _h("--mail-user", None, "mail_user", "notification e-mail address (SPEC Q10)"),
    _h("--gpus", "-G", "gpus", "GPUs: N or TYPE:N (TYPE: a tier or GPU model)"),
    _h("--gpus-per-node", None, "gpus", "GPUs on the one node: N or TYPE:N"),
    _h("--gpus-per-task", None, "gpus", "GPUs of the one task: N or TYPE:N"),
    _h("--gres", None, "gres", "gpu[:TYPE][:N]; gpu:0 is refused"),
    _h("--nodes", "-N", "nodes", "1 (or 1-1); more than one node is refused (SPEC P3)"),
    _h("--ntasks", "-n", "ntasks", "1; above 1 accepted with a warning: " + _TASK),
    _h("--tasks", None, "ntasks", "= --ntasks"),
    _h("--ntasks-per-node", None, "ntasks", "= --ntasks on the one node"),
    _h("--tasks-per-node", None, "ntasks", "= --ntasks-per-node"),
    _h("--cpus-per-task", "-c", "cpus_per_task", "CPUs: only tiers whose CPUs cover it"),
    _h("--cpus-per-gpu", None, "cpus_per_gpu", "CPUs per GPU: only tiers that bring as many"),
    _h("--mincpus", None, "cpus_per_task", "minimum CPUs: as --cpus-per-task"),
    _h("--mem", None, "mem", "memory (MB, or K/M/G/T): only tiers that bring it; 0: the tier's"),
    _h("--mem-per-cpu", None, "mem_per_cpu", "memory per CPU: × CPUs, only tiers that bring it"),
    _h("--mem-per-gpu", None, "mem_per_gpu", "memory per GPU: only tiers that bring as much"),
    _h("--partition", "-p", "partition", "the site's partitions and aliases (config)"),
    _h("--account", "-A", "account", "your lab; another account: accepted with a warning"),
    _h("--constraint", "-C", "constraint", "a tier or GPU model (a|b: either)"),
    _h("--export", None, "export", "ALL, NONE, or [ALL,]VAR[=VALUE],… into the job's environment"),
    _h("--output", "-o", "output", "stdout also to this file (%j %J %x %u %A %a %N %%)"),
    _h("--error", "-e", "error", "stderr also to this file (same patterns)"),
    _h("--open-mode", None, "open_mode", "truncate (default) or append the -o/-e files"),
    _h("--signal", None, "signal", "[{R|B}:]SIG[@T]: SIG reaches the job T s before its limit"),
    _h("--parsable", None, "parsable", "print the job id alone", "none"),
    _h("--wrap", None, "wrap", "run this command line instead of a script"),
    # --- accepted with a warning ----------------------------------------------------------
    _w("--qos", "-q", "no QOS here: jobs are ordered by their lab's fair-share (SPEC D1)"),
    _w("--exclusive", None, _NODE + "; the job gets its tier's CPUs and memory", "optional"),
    _w("--nodelist", "-w", _NODE),
    _w("--exclude", "-x", _NODE),
    _w("--nodefile", "-F", _NODE),
    _w("--comment", None, _NOOP),
    _w("--verbose", "-v", _NOOP, "none"),
    _w("--quiet", "-Q", _NOOP, "none"),
    _w("--licenses", "-L", "no licenses are counted here"),
    _w("--gpu-bind", None, "the job's GPUs are all visible to it"),
    _w("--gpu-freq", None, _NOOP),
    _w("--cpu-freq", None, _NOOP),
    _w("--mem-bind", None, _NOOP),
    _w("--hint", None, _NOOP),
    _w("--distribution", "-m", _TASK),
    _w("--time-min", None, "the job gets its --time"),
    _w("--requeue", None, "the platform decides retries (OOM, preemption)", "none"),
    _w("--no-requeue", None, "the platform decides retries (OOM, preemption)", "none"),
    _w("--ntasks-per-gpu", None, _TASK),
    _w("--ntasks-per-core", None, _TASK),
    _w("--ntasks-per-socket", None, _TASK),
    _w("--sockets-per-node", None, _NODE),
    _w("--cores-per-socket", None, _NODE),
    _w("--threads-per-core", None, _NODE),
    _w("--extra-node-info", "-B", _NODE),
    _w("--core-spec", "-S", _NOOP),
    _w("--thread-spec", None, _NOOP),
    _w("--reservation", None, "reservations are the scheduler's (SPEC R1)"),
    _w("--priority", None, "order is fair-share (SPEC D1)"),
    _w("--nice", None, "order is fair-share (SPEC D1)", "optional"),
    _w("--begin", "-b", "the job is eligible at once"),
    _w("--deadline", None, "no deadline is enforced"),
    _w("--immediate", "-I", "the job waits in the queue", "optional"),
    _w("--wait", "-W", "jpu submit returns at once; `jpu logs -f ID` follows the job", "none"),
    _w("--tmp", None, "the job's /tmp is bounded by the platform (SPEC SEC6)"),
    _w("--gres-flags", None, _NOOP),
    _w("--acctg-freq", None, "the platform accounts GPU time itself"),
    _w("--profile", None, _NOOP),
    _w("--propagate", None, "the job's limits are its tier's (SPEC SEC6)", "optional"),
    _w("--wckey", None, _NOOP),
    _w("--no-kill", "-k", _NOOP, "optional"),
    _w("--overcommit", "-O", _NOOP, "none"),
    _w("--oversubscribe", "-s", _NOOP, "none"),
    _w("--contiguous", None, _NODE, "none"),
    _w("--spread-job", None, _NODE, "none"),
    _w("--use-min-nodes", None, _NODE, "none"),
    _w("--switches", None, _NODE),
    _w("--network", None, _NOOP),
    _w("--power", None, _NOOP),
    _w("--reboot", None, _NOOP, "none"),
    _w("--delay-boot", None, _NOOP),
    _w("--mcs-label", None, _NOOP),
    _w("--get-user-env", None, "the job's environment is --export's", "optional"),
    _w("--ignore-pbs", None, "#PBS lines are not read", "none"),
    _w("--kill-on-invalid-dep", None, "a dependency never met cancels the job (SPEC Q8)"),
    _w("--clusters", "-M", "the job runs on this site's GPUs"),
    _w("--cluster-constraint", None, "the job runs on this site's GPUs"),
    _w("--batch", None, _NODE),
    _w("--bb", None, "no burst buffers here"),
    _w("--bbf", None, "no burst buffers here"),
    # --- refused --------------------------------------------------------------------------
    _r("--test-only", None, "it would not submit; drop it to submit the job", "none"),
    _r("--input", "-i", "no stdin file here; redirect inside the script (`cmd < FILE`)"),
    _r("--export-file", None, "use --export=VAR=VALUE,… instead"),
    _r("--uid", None, "a job runs as its submitter's account (SPEC X4)"),
    _r("--gid", None, "a job runs as its submitter's account (SPEC X4)"),
    _r("--container", None, "use a workspace (`jpu submit --workspace NAME`, SPEC X4a)"),
    _r("--gpus-per-socket", None, "use --gpus N (one node, its GPUs)"),
    _r("--tres-per-task", None, "use --gpus-per-task N and --cpus-per-task N"),
)

BY_NAME: Final[Mapping[str, Option]] = {n: o for o in OPTIONS for n in o.names}
FLAGS: Final = frozenset(n for o in OPTIONS if o.value == "none" for n in o.names)
