"""``runtime.launch`` on nodes that restart together: ``launch(fn, num_nodes=N or (MIN, MAX), max_restarts=K,
master_addr=HOST, master_port=PORT)`` called on every node does what ``resolver run --nnodes N (or MIN:MAX)
--rdzv-endpoint HOST:PORT --max-restarts K script.py`` does there, with the same machinery
(:func:`runtime.script.run_ranks`, torch's c10d rendezvous in
:mod:`runtime._supervision.node_rendezvous`, the rounds of :mod:`runtime._supervision.node_rounds`).

The launching process is the node's member of the rendezvous, as ``resolver run`` is: it starts no rank
work itself. Each rank is the script run again (as the subprocess launcher re-runs it), which reaches the
same ``launch()`` call with its round's ``RESOLVER_CONFIG`` and runs ``fn`` there; the node's first rank
leaves its result for the launching process (:mod:`runtime._protocol.node_result`), which returns it.
A failure that ends the run is raised on every node: the node where it happened raises it as it is (a
:class:`~runtime.errors.RankFailedError`, a :class:`~runtime.errors.LaunchTimeoutError`), the others a
:class:`~runtime.errors.LaunchError` with the same reason; a pre-emption raises
:class:`~runtime.errors.PreemptedError` (the step and checkpoint every rank agreed on) on every node.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runtime._protocol.node_result import NODE_RESULT_VARIABLE, node_result
from runtime.errors import LaunchError, RuntimeConfigError

if TYPE_CHECKING:
    from resolver import Environment, ResolvedConfig
    from runtime._supervision.node_rendezvous import NodeRendezvous

__all__ = ["launch_on_nodes", "node_range", "restarts_across_nodes"]

#: Where the endpoint of ``runtime.launch``'s nodes comes from, for errors.
_SOURCE = "launch()'s master_addr/master_port, or MASTER_ADDR/MASTER_PORT"


def node_range(num_nodes: Any) -> tuple[Any, Any]:
    """``num_nodes`` as (least, most): a fixed count is both (the resolver checks it), ``(MIN, MAX)`` a range
    (``resolver run --nnodes MIN:MAX``), refused unless whole numbers with ``1 <= MIN <= MAX``."""
    if not isinstance(num_nodes, (tuple, list)):
        return num_nodes, num_nodes
    numbers = len(num_nodes) == 2 and all(type(n) is int for n in num_nodes)
    if not numbers or not 1 <= num_nodes[0] <= num_nodes[1]:
        raise RuntimeConfigError(
            f"num_nodes={num_nodes!r}: a range of nodes is (MIN, MAX), two whole numbers with 1 <= MIN <= MAX "
            "(each round runs on the nodes torch's c10d rendezvous gathers, at least MIN)",
            hint="e.g. num_nodes=(1, 2), or a fixed number of nodes, num_nodes=2",
        )
    return num_nodes[0], num_nodes[1]


def restarts_across_nodes(config: ResolvedConfig, least: int, max_restarts: int) -> bool:
    """Whether this launch runs its nodes as members of torch's c10d rendezvous (several nodes whose ranks it
    starts, with restarts or a range of nodes); a range it cannot have is refused."""
    elastic = least < config.num_nodes
    if config.launcher is None:
        if elastic:
            raise RuntimeConfigError(
                f"num_nodes=({least}, {config.num_nodes}): the cluster ({config.cluster_environment}) started this "
                "run's processes, so their number is its to keep: runtime.launch cannot add or drop nodes",
                hint=f"pass the fixed number of nodes (num_nodes={config.num_nodes}), or start the script with python "
                "once per node with master_addr/master_port naming the rendezvous endpoint",
            )
        return False
    return config.num_nodes > 1 and (max_restarts > 0 or elastic)


def _rank_command() -> list[str]:
    """The command that runs this process's script again as a rank (through ``resolver run``'s rank entry)."""
    from runtime.launchers.subprocess import script_command
    from runtime.script import rank_command

    try:
        command = script_command()
    except RuntimeConfigError as exc:
        raise RuntimeConfigError(
            "runtime.launch on nodes that restart together starts each rank by running this script again, but "
            f"this process was not started from a script file ({exc.message.rsplit('(', 1)[-1]}",
            hint="put the launch() in a script and start it with python on every node (or use resolver run)",
        ) from None
    module = len(command) > 2 and command[1] == "-m"
    script, args = (command[2], command[3:]) if module else (command[1], command[2:])
    return rank_command(script, args, module=module)


def _recording(reasons: list[str]) -> type[NodeRendezvous]:
    """The rendezvous membership, keeping the reason the run ended with on every node (as printed)."""
    from runtime._supervision.node_rendezvous import NodeRendezvous

    class RecordingRendezvous(NodeRendezvous):
        def end(self, reason: str) -> str:
            written = super().end(reason)
            reasons.append(written)
            return written

        def ended(self) -> str | None:
            reason = super().ended()
            if reason is not None:
                reasons.append(reason)
            return reason

    return RecordingRendezvous


def launch_on_nodes(
    config: ResolvedConfig,
    least: int,
    max_restarts: int,
    *,
    environment: Environment | None,
    rules: Sequence[str],
) -> Any:
    """Run this node's ranks round by round (the module docstring); return the node's first rank's result."""
    from runtime.errors import RankFailedError
    from runtime.preemption import PREEMPTED_EXIT_CODE, Preempted
    from runtime.script import run_ranks

    command = _rank_command()
    reasons: list[str] = []
    with tempfile.TemporaryDirectory(prefix="runtime-node-result-") as folder:
        problem = run_ranks(
            config,
            command,
            max_restarts=max_restarts,
            min_nodes=least if least < config.num_nodes else None,
            environment=environment,
            rules=rules,
            variables={NODE_RESULT_VARIABLE: folder},
            endpoint_source=_SOURCE,
            rendezvous=_recording(reasons),
        )
        left = node_result(folder)
    if problem is None:
        return left
    if isinstance(problem, RankFailedError) and problem.exit_code == PREEMPTED_EXIT_CODE:
        problem = PREEMPTED_EXIT_CODE
    if problem == PREEMPTED_EXIT_CODE:
        # Every rank stopped at the agreed step: the node's first rank left what it agreed and saved.
        if isinstance(left, Preempted):
            raise left.error()
        raise SystemExit(PREEMPTED_EXIT_CODE)  # a rank exited so before its work returned; rank 0 printed why
    if problem == 130:
        raise KeyboardInterrupt
    reason = reasons[-1] if reasons else "another node ended it (its reason is printed above)"
    if isinstance(problem, Exception) and (not reasons or reason.endswith(str(problem).split("\n", 1)[0])):
        raise problem  # this node's failure ended the run: raised as it is, with its traceback
    # Another node's failure ended it: the same reason here (this node's ranks saw only its echo).
    raise LaunchError(
        f"the run ended on every node: {reason}",
        hint="the node named there reported the failure in full; fix it and start every node again",
    ) from (problem if isinstance(problem, Exception) else None)
