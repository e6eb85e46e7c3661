"""`jpu` entry point: a small dispatcher over subcommand modules.

Each module in SUBCOMMAND_MODULES has `register(subparsers)`, which adds its subcommands and sets
`func(args) -> int` on each, and may list `USER_ERRORS` (exception types). Errors a user can fix
(`CliError` and those) print one line and exit non-zero (SPEC U1).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from jpu.cli import files, simulate, slurm_commands, why
from jpu.cli.parsing import JpuArgumentParser, describe_subcommands
from jpu.cli.rest import subcommands as rest


class CliError(Exception):
    """A failure to report as one line, exit code 1."""


SUBCOMMAND_MODULES: list[ModuleType] = [simulate, rest, why, files, slurm_commands]


def build_parser() -> argparse.ArgumentParser:
    """No abbreviations, did-you-mean on a misspelt flag or command (jpu.cli.parsing); the API
    options (`--json`, `--url`, `--token`) before or after the subcommand."""
    parser = JpuArgumentParser(prog="jpu", description="JPU-Share command line")
    rest.add_target_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMAND_MODULES:
        module.register(sub)
    describe_subcommands(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    user_errors = (
        CliError,
        *(e for m in SUBCOMMAND_MODULES for e in getattr(m, "USER_ERRORS", ())),
    )
    try:
        rc = int(args.func(args))
        sys.stdout.flush()  # here, so a reader gone away (`| head`) is caught below
        return rc
    except BrokenPipeError:  # `jpu jobs | head`: the reader went away; end quietly, like cat
        rest.silence_stdout()
        return 0
    except user_errors as e:
        print(f"jpu {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
