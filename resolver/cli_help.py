"""How ``resolver --help`` and ``resolver COMMAND --help`` are written, imported only to print them.

Each command's summary, description and examples are its entry in the one command table,
:data:`resolver.cli.COMMANDS`; a test parses every example, so they stay valid usage.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resolver.cli_parser import Command

__all__ = ["EXIT_CODES", "TOP_DESCRIPTION", "TOP_EPILOG", "epilog", "wrapped_description"]

EXIT_CODES = "exit codes: 0 resolved, 1 resolution error (conflict or invalid input), 2 usage error."

TOP_DESCRIPTION = "Resolve distributed-training flags against a machine, and say why."

TOP_EPILOG = f"""\
{EXIT_CODES}

examples:
  resolver explain --devices 2 --strategy ddp
  resolver explain --devices 8 --simulate cuda=8,slurm
  resolver explain --simulate my-cluster-node.toml --format json
  resolver run --devices 2 --strategy ddp train.py --epochs 3
  resolver env
  resolver golden tests/golden
  resolver rules --output docs/rules.md

`resolver COMMAND --help` describes each command, with examples.
"""


def epilog(command: Command) -> str:
    """The end of ``resolver COMMAND --help``: the command's trailer (``{exit_codes}`` stands for
    :data:`EXIT_CODES`), then its examples."""
    examples = "\n".join(f"  {line}" for line in command.examples)
    trailer = command.trailer.format(exit_codes=EXIT_CODES)
    return (trailer + "\n\n" if trailer else "") + f"examples:\n{examples}\n"


def wrapped_description(command: Command) -> str:
    return textwrap.fill(command.description, 88)
