"""`kubectl-agentbox`: the kubectl plugin (`kubectl agentbox status ...`), installed as a console script.

kubectl finds an executable named `kubectl-agentbox` on PATH and runs it with the words after
`kubectl agentbox`. Sub-commands: `status` (see controller/cli_status.py), `version`.
"""

from __future__ import annotations

import argparse
import sys

from controller import __version__


def build_parser() -> argparse.ArgumentParser:
    """The plugin's argument parser (`kubectl agentbox ...`)."""
    parser = argparse.ArgumentParser(prog="kubectl agentbox", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"kubectl-agentbox {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from controller.cli_status import add_status_parser

    add_status_parser(sub)
    version = sub.add_parser("version", help="print the plugin's version")
    version.set_defaults(func=lambda _ns: print(f"kubectl-agentbox {__version__}") or 0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `kubectl-agentbox` console script."""
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
