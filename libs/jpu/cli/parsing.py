"""The `jpu` argument parser: a misspelt flag or command says what was probably meant (SPEC U1).

`--teir rtx4090` must not run the job on any tier, nor print a bare usage: argparse's prefix
matching is off (`allow_abbrev=False`, so `--ti` is not silently `--time`), and an unknown
option or command is refused by the subcommand that got it, naming the closest known one
(`did you mean --tier?`). Exit status 2, as argparse's own usage errors.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)")


def suggest(word: str, known: Iterable[str]) -> str | None:
    """The known option or command closest to `word` (its `=value` ignored), or None."""
    name = word.partition("=")[0]
    candidates = [k for k in known if k.startswith("--") == name.startswith("--")]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_message(words: Sequence[str], known: Iterable[str]) -> str:
    """`unrecognized arguments: --teir (did you mean --tier?)` for the option-like `words`."""
    known = list(known)
    parts = []
    for word in words:
        hint = suggest(word, known) if word.startswith("-") else None
        parts.append(f"{word} (did you mean {hint}?)" if hint else word)
    return "unrecognized arguments: " + " ".join(parts)


class JpuArgumentParser(argparse.ArgumentParser):
    """argparse with no abbreviations and did-you-mean hints; subcommands inherit it.
    `refused`: why an unknown option is deliberately not supported (`jpu submit --array`
    answers as its `#SBATCH` line does), or None for a plain unknown one."""

    def __init__(
        self, *args: Any, refused: Callable[[str], str | None] | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.refused = refused

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if any(e.startswith("-") and e != "-" for e in extras):
            why = [(e, self.refused(e)) for e in extras if e.startswith("-") and self.refused]
            for word, reason in why:
                if reason:
                    self.error(f"{word}: {reason}")
            # refused here, by the (sub)command that knows its options, not by `jpu` above
            self.error(unknown_message(extras, self._option_string_actions))
        return ns, extras

    def error(self, message: str) -> NoReturn:
        m = _CHOICE.search(message)
        if m is not None:
            choices = re.findall(r"'([^']*)'", m["choices"])
            close = difflib.get_close_matches(m["word"], choices, n=1, cutoff=0.6)
            if close:
                message = f"{message}; did you mean {close[0]!r}?"
        super().error(message)


def describe_subcommands(parser: argparse.ArgumentParser) -> None:
    """Every (sub)command's `--help` says what it does: one registered with a `help` line and
    no description gets that line as its description, at every level (`jpu admin
    maintenance`)."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for listed in action._choices_actions:
            sub = action.choices[listed.dest]
            if sub.description is None and listed.help:
                sub.description = listed.help
            describe_subcommands(sub)
