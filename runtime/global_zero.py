"""``runtime.is_global_zero()``: whether this process is global rank 0, whatever started it.

A script asks it to do something once per run (print a result, write a file) at any point: before
``runtime.launch``, inside the work, or after it returns, started by ``resolver run``, by a
``runtime.launch`` launcher, by torchrun, srun or mpirun, or by plain ``python``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from runtime._protocol.rank_environment import launched_config
from runtime.errors import RuntimeConfigError

__all__ = ["LAUNCHER_RANK_VARIABLES", "answer_from_variables", "is_global_zero", "launcher_global_rank"]

#: The variables in which a launcher gives each process its global rank, and who sets each. Read in
#: this order, the first set wins: a launcher started inside a SLURM job (torchrun, or mpirun in a
#: batch script) passes the SLURM_PROCID of the step that started it to every process it starts,
#: so its own variable, not SLURM's, names the process; SLURM_PROCID comes last.
LAUNCHER_RANK_VARIABLES: tuple[tuple[str, str], ...] = (
    ("RANK", "torchrun (or a launcher that sets torchrun's variables)"),
    ("OMPI_COMM_WORLD_RANK", "Open MPI's mpirun"),
    ("PMI_RANK", "an MPI launcher (MPICH's or Intel MPI's mpiexec, srun --mpi=pmi2)"),
    ("HOROVOD_RANK", "horovodrun"),
    ("JSM_NAMESPACE_RANK", "LSF's jsrun"),
    ("SLURM_PROCID", "srun"),
)


def launcher_global_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The global rank the first set variable of :data:`LAUNCHER_RANK_VARIABLES` gives, else ``None``."""
    environ = os.environ if environ is None else environ
    for name, launcher in LAUNCHER_RANK_VARIABLES:
        rank = _whole_number(environ, name, "a global rank", f"{name} is set by {launcher} for each process it starts")
        if rank is not None:
            return rank
    return None


def _whole_number(environ: Mapping[str, str], name: str, what: str, who: str) -> int | None:
    text = environ.get(name, "").strip()
    if not text:  # unset, or set to nothing
        return None
    if not text.isdigit():  # no sign, no spaces inside
        raise RuntimeConfigError(
            f"{name}={environ[name]!r} is not {what} (a whole number from 0)", hint=f"{who}: unset it in your shell"
        )
    return int(text)


def is_global_zero() -> bool:
    """Whether this process is global rank 0: the one of a run that prints or writes what is written once.

    Answered, first that applies: inside the work of a launch (between the strategy's set-up and its
    teardown) by that strategy's ``is_global_zero``; in a process ``resolver run`` or a
    ``runtime.launch`` launcher started, by its :func:`~runtime.launched_config`; in a process
    another launcher started (torchrun, srun, mpirun, ...), by that launcher's rank variable
    (:data:`LAUNCHER_RANK_VARIABLES`); otherwise this process is the only one, or the one that
    launches the ranks of its machine: ``True`` on the first machine (``NODE_RANK``, else
    ``GROUP_RANK``, unset or 0). A rank variable that is set but not a whole number raises
    :class:`~runtime.errors.RuntimeConfigError`.
    """
    # No strategy can be set up where the strategies' module was never imported (and torch with it).
    if "runtime.strategies.guard" in sys.modules:
        from runtime.strategies.guard import running_strategy

        running = running_strategy()
        if running is not None:
            return running.is_global_zero
    launched = launched_config()
    if launched is not None:
        return launched.global_rank == 0
    return answer_from_variables(os.environ)


def answer_from_variables(environ: Mapping[str, str]) -> bool:
    """:func:`is_global_zero` in a process no launcher of this library started: the launcher's rank
    variable; without one, this process launches the ranks of its machine (or is the only one), and
    is global rank 0 unless ``NODE_RANK`` (else ``GROUP_RANK``) puts the machine after the first, as
    in a multi-node run started by hand."""
    rank = launcher_global_rank(environ)
    if rank is not None:
        return rank == 0
    for name in ("NODE_RANK", "GROUP_RANK"):
        node = _whole_number(environ, name, "a machine's index", f"{name} numbers the machines of a multi-node run")
        if node is not None:
            return node == 0
    return True
