"""The ``resolver`` command (``main()``, the console script's entry point): explain a resolution, run
a script under it, check the setup, report the machine, check golden files, write the rules' docs.

One module per command (:mod:`resolver.cli.commands`, the one table of them, names each): its help,
its options and what it does. The parsing, one command's parser per process with help written only
when printed, is :mod:`resolver.cli.parser`'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

# before the engine: a `resolver explain` process runs without the garbage collector (see the module)
import resolver.cli.gc_pause  # noqa: F401
from resolver._engine.errors import ResolutionError, RuleTableError
from resolver.cli.commands import command_module
from resolver.cli.parser import _parse
from resolver.cli.shared import EXIT_ERROR
from resolver.cli.terminal_color import color_choice, install

__all__ = ["main"]


def _before_exit() -> None:
    """This process exits next: spare the interpreter its final garbage collection of everything
    it made (every module, class and function, and the rule table: tens of thousands of objects in
    reference cycles, which takes longer than explaining). The memory goes back to the OS with the
    process. Only for ``explain``, whose objects hold no open file and no finalizer."""
    import gc

    gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (default: this process's command line, which then exits)."""
    # on a terminal (or as --color, NO_COLOR, FORCE_COLOR say); before parsing, for its usage errors too
    guess = color_choice(sys.argv[1:] if argv is None else argv)
    uncolor = install(guess)
    try:
        args = _parse(argv)  # inside: the options come from the rule table, which a broken plugin breaks
        if args.color != guess:  # the guess read a script's own --color (resolver run SCRIPT --color ...)
            uncolor()
            uncolor = install(args.color)
        code = command_module(args.command).run(args)
        sys.stdout.flush()  # here, so that a closed pipe is seen below and not at exit
        if argv is None and args.command == "explain":
            _before_exit()
        if argv is None and args.command == "check":
            # The report is out: end without the interpreter's shutdown, where gloo's threads can
            # abort a rank ("terminate called without an active exception": exit 134 under mpirun,
            # after a check that passed; seen once in CI's run).
            sys.stderr.flush()
            os._exit(code)
        return code
    except BrokenPipeError:
        # the reader stopped early (`resolver explain | head`): say nothing more, like `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except RuleTableError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR
    finally:
        uncolor()
