"""The ``asyncflow`` command line."""
from __future__ import annotations

import argparse
import sys


def build_parser():
    parser = argparse.ArgumentParser(prog="asyncflow", description="asyncflow dataflow runtime")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_subparsers(dest="command")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version or args.command is None:
        from asyncflow import __version__
        print(f"asyncflow {__version__}")
        return 0
    parser.print_help(sys.stderr)
    return 2
