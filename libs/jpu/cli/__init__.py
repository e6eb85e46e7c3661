"""The `jpu` command line (SPEC U1, §10): one argparse subcommand per module, see main.py."""
