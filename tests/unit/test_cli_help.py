"""SPEC U1: every `jpu` command's `--help` says what it does (its description), at every level."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from jpu.cli.main import build_parser


def _commands(
    parser: argparse.ArgumentParser, path: str = "jpu"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from _commands(sub, f"{path} {name}")


def test_U1_every_command_has_a_help_that_says_what_it_does() -> None:
    commands = dict(_commands(build_parser()))
    assert {"jpu whoami", "jpu tiers", "jpu sinfo", "jpu cancel", "jpu admin maintenance"} <= set(
        commands
    )
    undescribed = [name for name, p in commands.items() if not (p.description or "").strip()]
    assert undescribed == []
    assert "like scancel" in commands["jpu cancel"].format_help()


def test_Q10_mail_type_help_names_ARRAY_TASKS_and_the_once_per_array_default() -> None:
    commands = dict(_commands(build_parser()))
    for name in ("jpu submit", "jpu notify"):
        text = " ".join(commands[name].format_help().split())  # argparse wraps lines
        assert "ARRAY_TASKS for a notification per task of an array" in text, name
        assert "(default: once per array)" in text, name
