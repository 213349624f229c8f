"""Imported first by :mod:`resolver.cli`: an interpreter started as ``resolver explain`` (the
console script or ``python -m resolver``) runs without the garbage collector from here to its exit.

Such a process imports the engine, loads the table, resolves once, prints and exits: tens of
thousands of objects that live until the exit, and no garbage worth collecting. The collections
their allocations would start only walk every module and the table again (about 3 ms of a cold
explain), and the exit's is skipped too (:func:`resolver.cli._before_exit`). Any other process that
imports :mod:`resolver.cli` (a test, a tool of one's own) keeps its collector as it was.
"""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["explain_only"]


def explain_only(argv: list[str]) -> bool:
    """Whether ``argv`` (an interpreter's ``sys.argv``) started ``resolver explain`` and nothing else."""
    if argv[1:2] != ["explain"]:
        return False
    program = os.path.normcase(argv[0])
    name = os.path.basename(program)
    if name == "__main__.py":  # python -m resolver
        return os.path.basename(os.path.dirname(program)) == "resolver"
    return os.path.splitext(name)[0] in ("resolver", "resolver-script")  # the console script


if explain_only(sys.argv):
    gc.disable()
