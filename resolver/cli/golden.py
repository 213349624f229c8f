"""``resolver golden``: check golden scenario files against the rules, or ``--update`` them
(the scenarios themselves: :mod:`resolver.golden`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from resolver.cli.shared import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from resolver.cli.options import Parser

__all__ = ["add_options", "run"]

SUMMARY = "check golden scenario files against the rules (or --update them)"
DESCRIPTION = (
    "Resolve each golden scenario (TOML: [flags], [environment], [expect]) and compare the "
    "outcome with its [expect] table; --update rewrites [expect] from the current rules (review the "
    "diff). Exit code 1 when a scenario fails."
)
EXAMPLES = (
    "resolver golden tests/golden",
    "resolver golden --update my-cluster/",
    "resolver golden --rules site.toml my-cluster/",
)


def add_options(golden: Parser) -> None:
    """``resolver golden``'s options: the scenario paths, ``--update``, ``--rules``."""
    golden.add_argument("paths", nargs="+", help="scenario files or folders of them")
    golden.add_argument("--update", action="store_true", help="rewrite each [expect] from the current rules")
    golden.add_argument("--rules", action="append", default=[], metavar="FILE", help="an extra rule file (repeatable)")


def run(args: argparse.Namespace) -> int:
    """Check (or ``--update``) each golden scenario; exit code 1 when one fails."""
    from resolver import golden

    failures = 0
    paths = golden.scenario_paths(args.paths)
    for path in paths:
        scenario = golden.load_scenario(path)
        if args.update:
            if golden.update(scenario, args.rules or None):
                print(f"updated {path}")
            continue
        problems = golden.check(scenario, args.rules or None)
        if problems:
            failures += 1
            print(f"FAIL {path}")
            for problem in problems:
                print(f"  {problem}")
    if not args.update:
        print(f"{len(paths) - failures} passed, {failures} failed")
    return EXIT_ERROR if failures else EXIT_OK
