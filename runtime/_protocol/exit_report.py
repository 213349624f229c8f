"""A launch that cannot start (a flag conflict, a config the runtime cannot build) ends the script with
its message, not a traceback of the resolver's and the runtime's frames.

Under ``srun -n 3 python train.py`` every task reaches ``runtime.launch()`` and fails the same way:
with tracebacks, three copies of twenty lines of engine frames around one message. An error marked
with :func:`report_at_exit` and left uncaught is printed by the hook this module installs in
``sys.excepthook`` instead: whole by global rank 0 (or by a process whose rank is unknown), as one
line ``rank N: <its first line>`` by every other rank. A script that catches the error gets it as it
was raised; any other uncaught exception goes to the hook that was there before.
"""

from __future__ import annotations

import os
import sys
import types
from typing import TYPE_CHECKING, Any

from resolver import Reporter, ResolutionError
from resolver._runtime_interface import diagnostic

if TYPE_CHECKING:
    from resolver import Environment, Provenance
    from resolver.api import RulesArg

__all__ = ["launch_failed", "report_at_exit", "reported_text"]

#: The attribute that marks an exception for the hook: the global rank of the process that raised it
#: (``None``: unknown).
_MARK = "_runtime_report_at_exit"


def report_at_exit(exc: BaseException, rank: int | None) -> BaseException:
    """Mark ``exc`` (raised in global rank ``rank``) to be printed without a traceback if nothing catches
    it, and install the hook that prints it; returns ``exc``, to be raised."""
    try:
        setattr(exc, _MARK, rank)
    except AttributeError:  # an exception with __slots__: reported as Python reports it
        return exc
    if not isinstance(sys.excepthook, _ExitReport):
        sys.excepthook = _ExitReport(sys.excepthook)
    return exc


def launch_failed(
    exc: BaseException, *, rank: int | None = None, environment: Environment | None = None, rules: RulesArg = None
) -> BaseException:
    """:func:`report_at_exit` for an error of ``runtime.launch()`` before anything started: in global rank
    ``rank``, or, when the flags failed before one was known, the rank the launcher that started this
    process gave it (what the rules make of ``environment`` with every flag left at its default)."""
    if rank is None:
        rank = _launchers_rank(environment, rules)
    return report_at_exit(exc, rank)


class _RankReporter(Reporter):
    def __init__(self) -> None:
        self.rank: int | None = None

    def decided(self, slot: str, value: Any, provenance: Provenance) -> None:
        if slot == "global_rank" and isinstance(value, int):
            self.rank = value


def _launchers_rank(environment: Environment | None, rules: RulesArg) -> int | None:
    import resolver

    reporter = _RankReporter()
    try:  # the rank is decided before most conflicts (those of the flags with the job's shape)
        resolver.resolve(environment=environment, rules=rules, reporter=reporter)
    except Exception:  # the defaults fail too: the rank is where the rules had got to, if anywhere
        pass
    return reporter.rank


def reported_text(exc: BaseException, rank: int | None, where: str = "") -> str:
    """What the hook prints for ``exc`` in global rank ``rank`` (``where``: the script's line that called launch):
    the error as ``resolver``'s command line renders it (``diagnostic``), for both packages' errors."""
    called = f"runtime.launch() ({where})" if where else "runtime.launch()"
    if isinstance(exc, ResolutionError):
        whole = f"{called}: the flags do not resolve\n{exc.diagnostic()}"
        first = exc.diagnostic().splitlines()[0]
    else:  # a runtime error that carries its fix ends with "  = help: ...", as the command line prints it
        text = diagnostic(exc) if str(exc) else f"error: {type(exc).__name__}"
        whole = f"{called}: {text}"
        first = text.splitlines()[0]
    if not rank:  # rank 0, or a process whose rank the flags did not get far enough to tell
        return whole
    return f"rank {rank}: {first} (rank 0 prints the whole error)"


def _callers_line(tb: types.TracebackType | None) -> str:
    """``file:line`` of the last frame outside the runtime and the resolver before their frames begin."""
    import resolver

    # the folders of the runtime and the resolver packages: their frames are not the script's
    packages = tuple(
        os.path.join(os.path.dirname(os.path.abspath(init)), "")
        for init in (os.path.dirname(os.path.dirname(__file__)) + "/__init__.py", resolver.__file__ or "")
    )
    found = ""
    while tb is not None:
        name = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if name.startswith(packages):
            break
        found = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


class _ExitReport:
    """``sys.excepthook``: a marked exception as :func:`reported_text`, anything else to ``previous``."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, kind: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
        if not hasattr(exc, _MARK):
            self.previous(kind, exc, tb)
            return
        try:
            sys.stderr.write(reported_text(exc, getattr(exc, _MARK), _callers_line(tb)) + "\n")
            sys.stderr.flush()
        except Exception:  # stderr closed or broken: Python's own report then, as without this hook
            self.previous(kind, exc, tb)
