"""`make bench`: every benchmark in turn, each printing ratios against a reference it measures in
the same run. Results go to stdout; copy the figures into BENCHMARKS.md with the command.

    python bench/run_all.py [--only NAME ...] [--full]

--full runs the long variants (the whole Philly trace: about 4 minutes per run of three policies).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    # name: (default args, --full args)
    "cycle": ([], []),
    "cycle_arrays": ([], []),
    "bus": ([], ["--n", "50000"]),
    "projection": ([], ["--n", "100000"]),
    "sim": ([], ["--jobs", "0"]),
    "explain": ([], ["--jobs", "2000"]),
    "policy": ([], ["--full", "--trace", "data/philly.csv"]),
    "estimate": ([], []),
    "start": ([], ["--n", "1000000"]),
    "audit": (["--n", "100000"], ["--n", "1000000"]),
    "backup": (["--n", "100000"], ["--n", "612666"]),
    "gateway": ([], ["--requests", "10000", "--seconds", "60"]),
    "e2e": ([], ["--jobs", "3000", "--timeout", "240"]),
    "slurm": ([], ["--preempt-rounds", "20", "--watch-s", "60"]),
    "slurm_container": ([], ["--jobs", "100"]),
    "failover": ([], ["--rounds", "10"]),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), default=None)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    failed = []
    for name in args.only or list(BENCHES):
        quick, full = BENCHES[name]
        cmd = [sys.executable, str(HERE / f"bench_{name}.py"), *(full if args.full else quick)]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        if subprocess.call(cmd) != 0:
            failed.append(name)
        print(f"=== {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
