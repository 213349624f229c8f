"""How docs/runtime.md's examples that ask ``runtime.is_global_zero()`` run beside the way the page shows.

The page runs each as it shows it (``resolver run``, plain ``python``: tests/support/docs_examples.py). A user
also starts them with plain ``python`` on one process, with torchrun, and with srun: :data:`RUNS` says
how for each (or why not), and tests/runtime/test_docs_examples_under_launchers.py (python, torchrun)
and tests/runtime/test_slurm_runtime_docs.py (srun) run them. Every run must print the line the
example prints on rank 0 exactly once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tests.support.docs_examples import DOCS, ROOT, named_file

PAGE = "docs/runtime.md"
#: The ways a test starts the examples (beside the page's own).
LAUNCHERS = ("python", "torchrun", "srun")


@dataclass(frozen=True)
class Run:
    """``LAUNCHER ... ARGV`` run once per step, in one folder: step N must exit with ``steps[N][0]``
    and print the line ``steps[N][1]`` once. ``flags``: the ``RESOLVER_*`` variables (the flags of a
    script that calls ``runtime.launch(fn)`` without any)."""

    argv: tuple[str, ...]
    steps: tuple[tuple[int, str], ...]
    flags: dict[str, str] = field(default_factory=dict)


_TWO_DDP = {"RESOLVER_DEVICES": "2", "RESOLVER_STRATEGY": "ddp"}
_NOT_UNDER_CLUSTER = "rank_output pipes the ranks of a runtime.launch launcher; torchrun and srun start the ranks"
_PREEMPT = ("--devices", "2", "--strategy", "ddp", "--preemption-signal", "SIGUSR1", "preempt_example.py")

#: example -> launcher -> how it runs there, or why it does not.
RUNS: dict[str, dict[str, Run | str]] = {
    "launch_example.py": {
        "python": "the page runs it with python, with ddp, ddp_spawn and ddp_fork",
        "torchrun": Run(("launch_example.py", "ddp"), ((0, "sum over ranks: 3.0"),)),
        "srun": Run(("python", "launch_example.py", "ddp"), ((0, "sum over ranks: 3.0"),)),
    },
    "run_example.py": {
        "python": Run(("run_example.py",), ((0, "ranks: 1"),)),
        "torchrun": Run(("run_example.py",), ((0, "ranks: 2"),), _TWO_DDP),
        "srun": Run(("python", "run_example.py"), ((0, "ranks: 2"),), _TWO_DDP),
    },
    "rank_output_example.py": {
        "python": "the page runs it with python",
        "torchrun": _NOT_UNDER_CLUSTER,
        "srun": _NOT_UNDER_CLUSTER,
    },
    "resume_example.py": {
        # one process: the fault (rank 1 killing itself) never happens
        "python": Run(("resume_example.py",), ((0, "trained 3 epochs; weight sum"),)),
        # torchrun restarts both ranks after rank 1 is killed; they end with resolver run's weights
        "torchrun": Run(
            ("--max-restarts", "2", "resume_example.py"), ((0, "trained 3 epochs; weight sum 3.1475"),), _TWO_DDP
        ),
        "srun": "a killed rank ends an srun step: SLURM restarts nothing (a requeued job resumes: preempt_example.py)",
    },
    "position_example.py": {
        # no sample number: the whole run (2 epochs of 36 samples) on however many ranks start it
        "python": Run(("position_example.py",), ((0, "stopped at sample 72"),)),
        "torchrun": Run(("position_example.py",), ((0, "stopped at sample 72"),), _TWO_DDP),
        "srun": Run(("python", "position_example.py"), ((0, "stopped at sample 72"),), _TWO_DDP),
    },
    "preempt_example.py": {
        "python": Run(("preempt_example.py",), ((0, "trained 20 steps"),)),  # one process: no rank signals itself
        # --preemption-signal is resolver run's: started by torchrun or srun, it runs the script once, as its rank
        "torchrun": Run(
            ("-m", "resolver", "run", *_PREEMPT),
            ((1, "pre-empted at step 6, checkpoint at preempt-checkpoints/step-6"), (0, "trained 20 steps")),
        ),
        "srun": Run(
            ("resolver", "run", *_PREEMPT),
            ((75, "pre-empted at step 6, checkpoint at preempt-checkpoints/step-6"), (0, "trained 20 steps")),
        ),
    },
}


def examples_asking_for_rank_zero() -> list[str]:
    """The page's example files that call ``runtime.is_global_zero()``."""
    document = DOCS.parse(ROOT / PAGE)
    names = [named_file(str(region.parsed)) for _, region in document.regions]
    sources = [str(region.parsed) for _, region in document.regions]
    return sorted(
        name for name, source in zip(names, sources, strict=True) if name and "runtime.is_global_zero()" in source
    )


def count_line(line: str, output: str) -> int:
    """How many lines of ``output`` hold ``line`` (after a ``[rank N]: `` prefix or not)."""
    return len(re.findall(rf"^(?:\[rank \d+\]: )?{re.escape(line)}", output, re.M))
