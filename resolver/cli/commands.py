"""The ``resolver`` command's commands, in one table: each name and the module that holds the command.

A command's module holds all of it: its help (``SUMMARY``, the line ``resolver --help`` lists;
``DESCRIPTION`` and ``EXAMPLES``, and an optional ``TRAILER``, for ``resolver COMMAND --help``; a test
parses every example, so they stay valid usage), its options (``add_options(parser)``) and what it
does (``run(args)``, returning the exit code). A process imports the module of the command it runs
only (``resolver --help`` imports them all, for their summaries).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from resolver.cli.shared import EXIT_CODES

__all__ = ["COMMANDS", "TOP_DESCRIPTION", "TOP_EPILOG", "command_module"]

#: Every command and its module, in the order ``resolver --help`` lists them.
COMMANDS = {
    "explain": "resolver.cli.explain",
    "run": "resolver.cli.run",
    "check": "resolver.cli.check",
    "config": "resolver.cli.config",
    "env": "resolver.cli.env",
    "golden": "resolver.cli.golden",
    "rules": "resolver.cli.rules",
    "completion": "resolver.cli.completion",
}

TOP_DESCRIPTION = "Resolve distributed-training flags against a machine, and say why."

TOP_EPILOG = f"""\
{EXIT_CODES}

examples:
  resolver explain --devices 2 --strategy ddp
  resolver explain --devices 8 --simulate cuda=8,slurm
  resolver explain --simulate my-cluster-node.toml --format json
  resolver run --devices 2 --strategy ddp train.py --epochs 3
  resolver check --devices 2 --strategy ddp
  resolver config --devices 2 --strategy ddp train.toml
  resolver env
  resolver golden tests/golden
  resolver rules --output docs/rules.md
  resolver completion bash

`resolver COMMAND --help` describes each command, with examples.
"""


def command_module(name: str) -> ModuleType:
    """The module of the command ``name`` (imported on first use)."""
    return importlib.import_module(COMMANDS[name])
