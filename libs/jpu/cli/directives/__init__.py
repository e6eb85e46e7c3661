"""`#SBATCH` and `#JPU` directives of a submitted script (SPEC U5). Pure.

Like sbatch, only the script's leading comment block is read: directives are the lines that
start with `#SBATCH` or `#JPU` (at the very start of the line) before the first line that is
neither blank nor a comment. Directives further down are ignored, as sbatch ignores them, and
listed in `Directives.ignored` so the CLI can say so.

`#SBATCH` lines take every option of the one table (jpu.policy.sbatch_options, SPEC U6): each
is kept as given with its line (`Directives.given`) for intake, which decides what it means,
warns or refuses (jpu.domain.submission.with_sbatch); what becomes the request's own fields
(name, GPUs, time, chdir, ...) is read here, and an option the table refuses or does not know
is refused here already, naming its line. `#JPU` lines take `jpu submit`'s own flags (`--gpus`,
`--tier`, `--time`, `--name`, `--env`, `--min-vram`, `--chdir`, `--array`, `--dependency`,
`--hold`, `--mail-type`, `--mail-user`, `--workspace`).

Precedence (sbatch's: command line > script): `jpu submit` flags, then `#JPU`, then `#SBATCH`;
within one kind the last line wins, except `--tier` and `--env`, which add up.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Final

from jpu.cli.directives import jpu, sbatch
from jpu.cli.directives.model import DirectiveError, Directives, Kind
from jpu.policy.sbatch import read_options

__all__ = ["DirectiveError", "Directives", "header_lines", "parse", "partition_tiers"]

SBATCH: Final = "#SBATCH"
JPU: Final = "#JPU"
CLI: Final = "command line"


def header_lines(script: str) -> tuple[list[tuple[int, str]], list[int]]:
    """The leading comment block's directive lines (number, text), and the numbers of the
    directive lines after it (ignored, as sbatch ignores them)."""
    directives: list[tuple[int, str]] = []
    late: list[int] = []
    in_header = True
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if in_header and stripped and not stripped.startswith("#"):
            in_header = False
        if _magic(line) is None:
            continue
        if in_header:
            directives.append((number, line))
        else:
            late.append(number)
    return directives, late


def _magic(line: str) -> str | None:
    for magic in (SBATCH, JPU):
        rest = line[len(magic) :]
        if line.startswith(magic) and (not rest or rest[0].isspace()):
            return magic
    return None


def parse(script: str, source: str = "script", cli: list[str] | None = None) -> Directives:
    """The directives of `script` (named `source` in messages), then `jpu submit`'s sbatch
    flags `cli` (they win, SPEC U6: the same set as #SBATCH lines); DirectiveError lists every
    directive that cannot be honoured, each with its line."""
    lines, late = header_lines(script)
    kinds = {SBATCH: Kind(), JPU: Kind(), CLI: Kind()}
    problems: list[str] = sbatch.read(cli or [], kinds[CLI], "command line:")
    for number, line in lines:
        magic = _magic(line)
        assert magic is not None
        where = f"{source}:{number}: {magic}"
        try:
            words = shlex.split(line[len(magic) :], comments=True)
        except ValueError as e:
            problems.append(f"{where}: cannot read the line ({e})")
            continue
        read = sbatch.read if magic == SBATCH else jpu.read
        problems += read(words, kinds[magic], where)
    out = Directives(ignored=late)
    for magic in (SBATCH, JPU, CLI):  # #JPU after #SBATCH: it wins; the command line last
        problems += _merge(out, kinds[magic], f"{source}: {magic}")
    if problems:
        raise DirectiveError(problems)
    out.raw = read_options(out.given).raw  # the table's reading, as intake's (SPEC U6)
    return out


def _merge(out: Directives, kind: Kind, where: str) -> list[str]:
    """Fold one kind's values into `out` (a later kind overrides an earlier one)."""
    problems: list[str] = []
    out.name = kind.name if kind.name is not None else out.name
    out.chdir = kind.chdir if kind.chdir is not None else out.chdir
    out.dependency = kind.dependency if kind.dependency is not None else out.dependency
    out.hold = out.hold or kind.hold
    out.workspace = kind.workspace if kind.workspace is not None else out.workspace
    if kind.time is not None:
        out.time_limit_s, out.has_time = kind.time[0], True
    out.min_vram_gb = kind.min_vram_gb if kind.min_vram_gb is not None else out.min_vram_gb
    out.mail_type = kind.mail_type if kind.mail_type is not None else out.mail_type  # Q10
    out.mail_user = kind.mail_user if kind.mail_user is not None else out.mail_user
    out.array = kind.array if kind.array is not None else out.array
    counts = {n for n, _ in kind.gpus_from.values()}
    types = {t for _, t in kind.gpus_from.values() if t}
    if len(counts) > 1 or len(types) > 1:
        problems.append(f"{where}: --gpus and --gres ask for different GPUs; keep one of them")
    elif counts:
        out.gpus = counts.pop()
        if out.gpus < 1:
            problems.append(f"{where}: ask for at least 1 GPU")
    tiers = [*sorted(types), *kind.tiers]
    if tiers:
        out.tiers = list(dict.fromkeys(tiers))
        out.named_tiers = list(dict.fromkeys(kind.tiers)) or None  # a later type wins over them
    if kind.partitions:
        out.partitions = kind.partitions
    out.env.update(kind.env)
    out.given += kind.given
    return problems


def partition_tiers(partitions: list[str], tier_partitions: Mapping[str, str]) -> list[str]:
    """`#SBATCH -p` → the tiers whose Slurm partition is one of `partitions` (SPEC §1.1:
    each tier maps to a partition). `tier_partitions`: tier name → its partition. ValueError
    names the partitions that no tier maps to, and the valid ones."""
    tiers = [t for t, p in tier_partitions.items() if p in partitions]
    unknown = [p for p in partitions if p not in tier_partitions.values()]
    if unknown:
        valid = ", ".join(f"{p} (tier {t})" for t, p in tier_partitions.items())
        raise ValueError(f"no tier maps to partition {', '.join(unknown)}; partitions: {valid}")
    return tiers
