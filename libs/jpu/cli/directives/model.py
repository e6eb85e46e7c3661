"""What directives say (Directives), one kind's raw values (Kind), the option words of a
line, and the readers #SBATCH and #JPU share. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from jpu.domain import dependencies
from jpu.policy import mail
from jpu.policy.sbatch import Given
from jpu.policy.time_limits import parse_time_limit


class DirectiveError(ValueError):
    """Directives that cannot be honoured; `problems` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass
class Directives:
    """What the script asks for; None = not said (the command line or the default decides)."""

    name: str | None = None
    gpus: int | None = None
    tiers: list[str] | None = None  # from --gres/--gpus type or #JPU --tier
    partitions: list[str] | None = None  # #SBATCH -p: resolved to tiers by the caller
    time_limit_s: int | None = None
    has_time: bool = False  # True with time_limit_s None: "UNLIMITED"
    chdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    min_vram_gb: int | None = None
    mail_type: list[str] | None = None  # Q10: --mail-type, parsed (jpu.policy.mail)
    mail_user: str | None = None  # Q10: --mail-user
    dependency: str | None = None  # Q8, Slurm syntax
    hold: bool = False  # Q9
    workspace: str | None = None  # X4a: #JPU --workspace
    array: str | None = None  # Q7: "0-99%8", as written (the server checks it)
    ignored: list[int] = field(default_factory=list)  # line numbers after the leading block
    named_tiers: list[str] | None = None  # tiers named by #JPU --tier (not a GPU type)
    # SPEC U6: every sbatch option as given (option, value, line), in order; intake decides
    # them (jpu.domain.submission.with_sbatch), this is what the request carries
    given: list[Given] = field(default_factory=list)
    # and as jpu.policy.sbatch reads them: key -> (value, line), for the body's GPU count
    raw: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class Kind:
    """What one kind of directive (#SBATCH or #JPU) said, before the two are merged."""

    name: str | None = None
    chdir: str | None = None
    dependency: str | None = None
    hold: bool = False
    time: tuple[int | None] | None = None  # (seconds or None for UNLIMITED,) when given
    min_vram_gb: int | None = None
    array: str | None = None
    gpus_from: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # opt -> (n, type)
    tiers: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mail_type: list[str] | None = None
    mail_user: str | None = None
    workspace: str | None = None
    given: list[Given] = field(default_factory=list)  # see Directives.given


Reader = Callable[[str, str, Kind], str | None]  # (value, option, kind) -> why not, or None


def option_words(words: list[str], flags: frozenset[str]) -> list[tuple[str, str | None, str]]:
    """Option words → (option, value or None, as written). `--opt=v`, `--opt v`, `-Xv`, `-X v`;
    an option in `flags` takes no value. A word that is not an option is returned as ("", w)."""
    out: list[tuple[str, str | None, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            out.append(("", word, word))
            continue
        if word.startswith("--"):
            opt, eq, value = word.partition("=")
            if eq:
                out.append((opt, value, word))
                continue
        elif len(word) > 2:  # -J name written -Jname
            out.append((word[:2], word[2:], word))
            continue
        else:
            opt = word
        if opt in flags or i >= len(words) or words[i].startswith("-"):
            out.append((opt, None, word))
        else:
            out.append((opt, words[i], f"{word} {words[i]}"))
            i += 1
    return out


def name(value: str, opt: str, kind: Kind) -> str | None:
    kind.name = value
    return None


def chdir(value: str, opt: str, kind: Kind) -> str | None:
    kind.chdir = value
    return None


def dependency(value: str, opt: str, kind: Kind) -> str | None:
    """Q8: checked here already, so a mistyped line names its line (the API checks it again)."""
    try:
        kind.dependency = dependencies.parse(value).text()
    except ValueError as e:
        return str(e)
    return None


def workspace(value: str, opt: str, kind: Kind) -> str | None:
    kind.workspace = value
    return None


def time(value: str, opt: str, kind: Kind) -> str | None:
    try:
        kind.time = (parse_time_limit(value),)
    except ValueError as e:
        return str(e)
    return None


def mail_type(value: str, opt: str, kind: Kind) -> str | None:
    """Q10: `--mail-type=END,FAIL` (BEGIN, END, FAIL, REQUEUE, ALL, NONE)."""
    kinds, why = mail.parse_kinds(value)
    kind.mail_type = kinds
    return why


def mail_user(value: str, opt: str, kind: Kind) -> str | None:
    """Q10: `--mail-user=ADDRESS`."""
    kind.mail_user = value
    return mail.email_problem(value)


def array(value: str, opt: str, kind: Kind) -> str | None:
    """Q7: a job array, Slurm's syntax ("0-99%8", "0-99:2", "1,5,9"); the server checks it."""
    kind.array = value
    return None


def min_vram(value: str, opt: str, kind: Kind) -> str | None:
    if not value.isdigit() or int(value) < 1:
        return "a whole number of GB (at least 1)"
    kind.min_vram_gb = int(value)
    return None
