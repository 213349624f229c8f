"""``run_script``: start a script once per rank, like torchrun (behind ``resolver run``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from resolver import ResolvedConfig
from runtime._protocol.ports import check_rendezvous_port
from runtime._protocol.rank_environment import (
    AGENT_STORE_VARIABLE,
    elastic_variables,
    rank_config,
    rank_variables,
    rendezvous_timeout,
)
from runtime._protocol.restarts import check_max_restarts, report_restart, restart_variables
from runtime._protocol.run_context import RUN_CONTEXT_VARIABLE, RunContext
from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout
from runtime._supervision.progress_watchdog import progress_timeout as watchdog_floor
from runtime._supervision.rank_group import rank_group
from runtime._supervision.stragglers import StragglerWatch, report_stragglers
from runtime.errors import LaunchTimeoutError, RankFailedError, RuntimeConfigError
from runtime.launchers.rank_output import RankOutput, RankOutputPump
from runtime.preemption import PREEMPTED_EXIT_CODE, forwarding, launching_signals
from runtime.registry import ACCELERATORS, CLUSTER_ENVIRONMENTS

if TYPE_CHECKING:
    from resolver import Environment
    from runtime._supervision.node_rendezvous import NodeRendezvous, NodeRound
    from runtime._supervision.supervisor import Outcome, Supervisor
    from runtime.cluster.base import ClusterEnvironment

__all__ = ["PREEMPTED_EXIT_CODE", "TIMEOUT_EXIT_CODE", "run_script"]

#: The exit code when ranks were stopped at the timeout (as coreutils' ``timeout``).
TIMEOUT_EXIT_CODE = 124
#: Each rank runs the script through this file (run by path: runtime._rank.main), so an exception the
#: script raises is reported.
_RANK_MAIN = str(Path(__file__).resolve().with_name("_rank") / "main.py")


def _exit_code(code: int | None) -> int:
    if code is None or code == 0:
        return 1
    return 128 - code if code < 0 else code  # killed by signal N -> 128 + N, as shells report it


def _report(problem: Exception, output: RankOutput | None) -> str:
    """The failure as printed; with prefixed output, the rank's traceback lines carry its prefix too (the
    error itself, up to its first blank line, does not: its fix stays last, ``  = help: ...``)."""
    error, blank, rest = str(problem).partition("\n\n")
    if output is None or not output.prefix or not isinstance(problem, RankFailedError) or not blank:
        return error + blank + rest
    prefixed = (f"[rank {problem.traceback_rank}]: {line}" if line else line for line in rest.splitlines())
    return "\n".join([error, "", *prefixed])


def run_script(
    config: ResolvedConfig,
    script: str,
    args: Sequence[str] = (),
    *,
    timeout: float | None = None,
    progress_timeout: float | None = None,
    module: bool = False,
    output: RankOutput | None = None,
    python: bool = True,
    role: str = "default",
    run_id: str | None = None,
    max_restarts: int = 0,
    min_nodes: int | None = None,
    environment: Environment | None = None,
    rules: Sequence[str] = (),
    rendezvous_backend: str | None = None,
    rendezvous_conf: Mapping[str, str] | None = None,
) -> int:
    """Run ``python script args...`` once per local rank of ``config``; return the exit code.

    With ``module=True``, ``script`` is a module name run as ``python -m script args...`` would;
    with ``python=False`` it is a program executed as it is (torchrun's ``--no-python``).
    ``args`` reach the script untouched. ``role`` and ``run_id`` are what the ranks it starts see as
    ``ROLE_NAME`` and ``TORCHELASTIC_RUN_ID`` (torchrun's ``--role`` and ``--rdzv-id``).

    Every copy gets torchrun's variables (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``GROUP_RANK``; copies it
    starts itself also ``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``TORCHELASTIC_RUN_ID`` and friends, see
    :func:`~runtime._protocol.rank_environment.elastic_variables`) and
    ``RESOLVER_CONFIG`` (``config`` with that copy's ranks), so ``runtime.launch`` in the script
    runs its function as that rank without resolving again. Output streams straight through,
    or, with ``output`` (``resolver run`` passes one), as whole lines prefixed with the rank and
    into per-rank log files (see :class:`~runtime.launchers.rank_output.RankOutput`).
    When ``config.launcher`` is ``None`` the cluster already started one process per rank, so
    the script runs once, as this process's rank.

    ``environment`` and ``rules`` are the machine snapshot and rule files ``config`` was resolved with
    (default: this machine, probed now, and the built-in rules): a script's ``launch()`` that names flags
    ``config`` left at their default is resolved with them again in each rank, so that every rank
    agrees (see :mod:`runtime._protocol.run_context`).

    With ``max_restarts`` (torchrun's ``--max-restarts``), a rank's failure is reported and every rank
    is started again (``TORCHELASTIC_RESTART_COUNT`` counts the attempts), at most that many times; a
    timeout or an interrupt ends the run at once (see :mod:`runtime._protocol.restarts`).

    With ``min_nodes`` (torchrun's ``--nnodes MIN:MAX``; ``config.num_nodes`` is the most), the nodes
    meet in torch's c10d rendezvous whatever ``max_restarts``: each round runs on the nodes there, at least
    ``min_nodes``; a node lost leaves the others to go on (a restart), one started later joins at the next
    round (not a restart), and each rank's config says which round, which nodes and why its world size.

    With the strategy option ``preemption_signal`` (``--preemption-signal``), this process passes that
    signal on to its ranks (and, as a SLURM task, ``SIGTERM`` too); a run whose ranks stopped on
    pre-emption returns :data:`PREEMPTED_EXIT_CODE` (75) and is never restarted here.

    Returns 0 when every rank exits cleanly; otherwise the first failing rank's exit code
    (128 + N when killed by signal N) after stopping the others, or 124 when ``timeout``
    (seconds; default: the config's ``timeout`` option) ran out, or when no rank made progress for the
    progress watchdog's deadline (``progress_timeout``, default: the config's option, else 60 s; 0: off;
    see :mod:`runtime._supervision.progress_watchdog`). Raises
    :class:`~runtime.errors.PortInUseError` or :class:`~runtime.errors.RuntimeConfigError`
    before starting anything when the rendezvous cannot work.
    """
    command = rank_command(script, args, module=module, python=python)
    problem = run_ranks(config, command, timeout=timeout, progress_timeout=progress_timeout, output=output,
                        role=role, run_id=run_id, max_restarts=max_restarts, min_nodes=min_nodes,
                        environment=environment, rules=rules, rendezvous_backend=rendezvous_backend,
                        rendezvous_conf=rendezvous_conf)  # fmt: skip
    if isinstance(problem, RankFailedError) and problem.exit_code == PREEMPTED_EXIT_CODE:
        problem = PREEMPTED_EXIT_CODE  # a rank exited so before its work was seen to return
    if problem == PREEMPTED_EXIT_CODE:
        # Every rank stopped at the agreed step; rank 0 printed the step and the checkpoint.
        print(f"resolver run: pre-empted: every rank stopped (exit status {PREEMPTED_EXIT_CODE})", file=sys.stderr)
        return PREEMPTED_EXIT_CODE
    if isinstance(problem, int):
        return problem
    if problem is None:
        return 0
    print(f"resolver run: {_report(problem, output)}", file=sys.stderr, flush=True)  # with the traceback or stacks
    if isinstance(problem, LaunchTimeoutError):
        return TIMEOUT_EXIT_CODE
    return _exit_code(problem.exit_code) if isinstance(problem, RankFailedError) else 1


def rank_command(script: str, args: Sequence[str], *, module: bool = False, python: bool = True) -> list[str]:
    """The command each rank runs: ``script`` (a module with ``module=True``, a program with ``python=False``)
    with ``args``, through the rank entry that reports an exception the script raises."""
    if not python:
        if module:
            raise RuntimeConfigError("python=False runs a program, module=True a Python module: choose one")
        return [script, *args]
    return [sys.executable, _RANK_MAIN, *(["-m", script] if module else [script]), *args]


def run_ranks(
    config: ResolvedConfig,
    command: list[str],
    *,
    timeout: float | None = None,
    progress_timeout: float | None = None,
    output: RankOutput | None = None,
    role: str = "default",
    run_id: str | None = None,
    max_restarts: int = 0,
    min_nodes: int | None = None,
    environment: Environment | None = None,
    rules: Sequence[str] = (),
    rendezvous_backend: str | None = None,
    rendezvous_conf: Mapping[str, str] | None = None,
    variables: Mapping[str, str] | None = None,
    endpoint_source: str = "--rdzv-endpoint, or --master-addr/--master-port",
    rendezvous: type[NodeRendezvous] | None = None,
) -> Exception | int | None:
    """:func:`run_script`'s run of ``command`` once per local rank (its parameters alike; ``variables``: more
    for every rank, ``endpoint_source``: where the nodes' endpoint came from, for errors, ``rendezvous``: the
    node membership class, :class:`~runtime._supervision.node_rendezvous.NodeRendezvous` or a subclass);
    ``runtime.launch`` runs its nodes that restart together through it too. Returns the problem that ended
    the run (``None``: none), or an exit status (130 after Ctrl-C, 75 pre-empted, 1 ended by another node)."""
    if timeout is None and config.strategy_options.get("timeout") is not None:
        option = config.strategy_options["timeout"]
        timeout = check_timeout(option, f"the strategy option timeout={option!r}", TIMEOUT_HINTS["timeout"])
    elif timeout is not None:
        timeout = check_timeout(timeout, f"timeout={timeout!r}", TIMEOUT_HINTS["timeout"])
    rendezvous_timeout(config)  # a bad rendezvous_timeout or RUNTIME_RENDEZVOUS_TIMEOUT fails before any rank starts
    watchdog = watchdog_floor(config.strategy_options, progress_timeout)
    cluster = CLUSTER_ENVIRONMENTS.get(config.cluster_environment)(config)
    address, port = cluster.main_address, cluster.main_port
    started_by_cluster = config.launcher is None
    if started_by_cluster:
        cluster.check_started_by_cluster()  # e.g. a SLURM batch script is not one of the job's tasks
    # Nodes that restart together meet in torch's elastic rendezvous at the address and port the flags give.
    elastic = _check_elastic(config, min_nodes, started_by_cluster)
    across_nodes = not started_by_cluster and config.num_nodes > 1 and (max_restarts > 0 or elastic)
    _check_rendezvous(config, max_restarts, across_nodes, rendezvous_backend, rendezvous_conf)
    if not started_by_cluster and not across_nodes:
        check_rendezvous_port(address, port, cluster.main_port_source, config.node_rank)
    ranks = [config] if started_by_cluster else [rank_config(config, i) for i in range(config.num_devices)]
    # One id for the run, alike on every node (each node's resolver run computes it from the same
    # rendezvous); torchrun draws a random one, which its nodes agree on through their rendezvous.
    if run_id is None:
        run_id = os.urandom(16).hex() if config.num_nodes == 1 else f"resolver-{address}-{port}"
    # One process on this machine (config.launcher is None there too) is this run's to restart.
    started_by = config.cluster_environment if started_by_cluster and cluster.starts_processes else None
    check_max_restarts(max_restarts, num_nodes=config.num_nodes, started_by=started_by,
                       restart_hint=cluster.restart_hint, rendezvous=across_nodes)  # fmt: skip
    context = _run_context(environment, rules, max_restarts)
    signals = launching_signals(config.strategy_options, cluster.stop_signals if started_by_cluster else ())
    more = dict(variables or {})
    attempts = _Attempts(
        config, ranks, command, cluster, run_id, role, output, timeout, context, watchdog, max_restarts, more
    )
    nodes = None
    if across_nodes:
        if rendezvous is None:
            from runtime._supervision import node_rendezvous

            rendezvous = node_rendezvous.NodeRendezvous

        if config.node_rank != 0:  # nothing a torchrun command line gives is silently dropped
            print(f"resolver run: node rank {config.node_rank} (--node-rank or NODE_RANK) is not kept: the c10d "
                  "rendezvous numbers the nodes as they join, as torchrun's does", file=sys.stderr)  # fmt: skip

        source = endpoint_source
        nodes = rendezvous(
            address,
            port,
            run_id,
            nodes=(min_nodes if elastic and min_nodes else config.num_nodes, config.num_nodes),
            local_world_size=config.num_devices,
            max_restarts=max_restarts,
            role=role,
            join_timeout=rendezvous_timeout(config),
            conf=rendezvous_conf or {},
            source=source,
        )
    with forwarding(signals):  # the ranks take a pre-emption signal this process gets (SLURM signals both)
        if nodes is not None:
            from runtime._supervision.node_rounds import run_rounds

            problem = run_rounds(nodes, attempts.node_round, max_restarts, timeout, PREEMPTED_EXIT_CODE)
        else:
            problem = attempts.run(max_restarts, restarts_ours=started_by is None)
    report_stragglers(attempts.stragglers, output.log_folder if output is not None else None, "resolver run")
    return problem


def _check_elastic(config: ResolvedConfig, min_nodes: int | None, started_by_cluster: bool) -> bool:
    """Whether the run's node count is a range (``min_nodes`` below ``config.num_nodes``); refuse one it cannot have."""
    if min_nodes is None or min_nodes == config.num_nodes:
        return False
    if not 1 <= min_nodes < config.num_nodes:
        raise RuntimeConfigError(
            f"min_nodes={min_nodes} with num_nodes={config.num_nodes}: the least number of nodes must be between 1 and "
            "the most",
            hint=f"write --nnodes MIN:MAX with 1 <= MIN <= MAX, e.g. --nnodes 1:{config.num_nodes}",
        )
    if started_by_cluster:
        raise RuntimeConfigError(
            f"--nnodes {min_nodes}:{config.num_nodes}: the cluster ({config.cluster_environment}) started this run's "
            "processes, so their number is its to keep: resolver run cannot add or drop nodes",
            hint=f"give the fixed number of nodes (--nnodes {config.num_nodes}), or start resolver run once per node "
            "with --rdzv-endpoint HOST:PORT",
        )
    return True


def _check_rendezvous(config: ResolvedConfig, max_restarts: int, across_nodes: bool, backend: str | None,
                      conf: Mapping[str, str] | None) -> None:  # fmt: skip
    """A rendezvous backend or settings (torchrun's ``--rdzv-backend``, ``--rdzv-conf``) this run cannot use."""
    if across_nodes and backend not in (None, "c10d"):
        raise RuntimeConfigError(
            f"--rdzv-backend {backend}: {config.num_nodes} nodes with --max-restarts {max_restarts} restart together "
            "through torch's c10d rendezvous, not a static one",
            hint="use --rdzv-backend c10d (or leave it out)",
        )
    if conf is None:
        return
    if not across_nodes:
        raise RuntimeConfigError(
            f"--rdzv-conf {','.join(f'{k}={v}' for k, v in conf.items())}: it sets torch's c10d rendezvous, which "
            f"resolver run joins only when several nodes restart together; this run has {config.num_nodes} node(s) "
            f"and --max-restarts {max_restarts}",
            hint="drop --rdzv-conf, or run several nodes (--nnodes N) with --max-restarts K",
        )
    from runtime._supervision.node_conf import check_rendezvous_conf

    check_rendezvous_conf(conf)


def _run_context(environment: Environment | None, rules: Sequence[str], max_restarts: int) -> RunContext:
    if environment is None:
        from resolver import Environment
        from resolver.api import builtin_table, load_rules

        environment = Environment.probe(table=load_rules(list(rules)) if rules else builtin_table())
    return RunContext.of(environment, rules, max_restarts)


@dataclass
class _Attempts:
    """The rank processes of one ``run_script``, started again after a failure (``max_restarts``)."""

    config: ResolvedConfig
    ranks: list[ResolvedConfig]
    command: list[str]
    cluster: ClusterEnvironment
    run_id: str
    role: str
    output: RankOutput | None
    timeout: float | None
    context: RunContext
    #: The progress watchdog's least deadline (0: off).
    progress_timeout: float
    max_restarts: int
    #: More variables for every rank.
    variables: dict[str, str]
    #: The latest attempt's stragglers, as the progress watchdog saw them.
    stragglers: StragglerWatch | None = None

    def run(self, max_restarts: int, *, restarts_ours: bool) -> Exception | int | None:
        """The problem that ended the run (``None``: none), or 130 after Ctrl-C."""
        config, cluster, output, timeout = self.config, self.cluster, self.output, self.timeout
        address, port = cluster.main_address, cluster.main_port
        problem = None
        for attempt in range(max_restarts + 1):
            if attempt:
                check_rendezvous_port(address, port, cluster.main_port_source, config.node_rank)
            restart = restart_variables(attempt, max_restarts) if restarts_ours else {}
            try:
                outcome, preempted = self._round(self.ranks, address, port, restart, elastic=restarts_ours)
            except KeyboardInterrupt:
                return 130  # the group stopped and reaped every rank on the way out
            problem = outcome.problem(timeout)
            if problem is None and preempted:
                return PREEMPTED_EXIT_CODE
            if not isinstance(problem, RankFailedError) or attempt == max_restarts:
                break
            if problem.exit_code == PREEMPTED_EXIT_CODE:
                break  # pre-empted, not failed: never restarted here (a requeued SLURM job starts again)
            report_restart(_report(problem, output), attempt + 1, max_restarts, "resolver run")
        return problem

    def _round(self, ranks: list[ResolvedConfig], address: str, port: int, extra: dict[str, str], *, elastic: bool,
               watching: Callable[[Supervisor], None] | None = None) -> tuple[Outcome, bool]:  # fmt: skip
        """Start ``ranks`` (``extra``: more variables for each) and watch them until they ended; the outcome,
        and whether they stopped on pre-emption. ``watching`` is called with the supervisor before the watch."""
        config = self.config
        # The group is left first: every rank is stopped and reaped before the pump writes what is left.
        with (
            RankOutputPump(self.output, config.num_devices) as pump,
            rank_group(len(ranks), on_cpu=ACCELERATORS.get(config.accelerator).computes_on_cpu) as group,
        ):
            for rank in ranks:
                variables = rank_variables(rank, address, port, group.reports.directory)
                if elastic:  # ranks it starts itself, one alone too: as torchrun's (a cluster's keep its own)
                    variables.update(elastic_variables(rank, self.run_id, self.role))
                variables.update(extra)
                variables.update(self.variables)
                variables[RUN_CONTEXT_VARIABLE] = self.context.to_json()
                environment = {**os.environ, **variables}
                group.popen(rank.global_rank, self.command, environment, output=pump, local_rank=rank.local_rank)
            supervisor = group.supervisor(self.timeout, progress_timeout=self.progress_timeout)
            if watching is not None:
                watching(supervisor)
            outcome = supervisor.watch()
            self.stragglers = outcome.stragglers
            # A rank whose work returned is not watched any more: its status says it was pre-empted.
            preempted = any(process.poll() == PREEMPTED_EXIT_CODE for process in group.processes.values())
        return outcome, preempted

    def node_round(self, current: NodeRound, watching: Callable[[Supervisor], None]) -> tuple[Outcome, bool]:
        """One round of a run whose nodes restart together: this node's ranks as the rendezvous placed them."""
        why = current.explanation()
        if current.node_rank == 0:
            print(f"resolver run: {why}", file=sys.stderr, flush=True)
        placed = _placed(self.config, current, why)
        ranks = [attrs.evolve(placed, global_rank=rank, local_rank=local) for local, rank in
                 enumerate(current.global_ranks)]  # fmt: skip
        extra = restart_variables(current.restart_count, self.max_restarts)
        extra[AGENT_STORE_VARIABLE] = str(current.agent_store)
        return self._round(ranks, current.master_addr, current.master_port, extra, elastic=True, watching=watching)


def _placed(config: ResolvedConfig, current: NodeRound, why: str) -> ResolvedConfig:
    """``config`` as the round placed this node: its node rank, the round's node count and world size, each
    with the round as its provenance, and the round's explanation among the notes."""
    from resolver import Provenance

    source = Provenance(kind="environment", source=f"the c10d rendezvous at {current.endpoint}", why=why)
    placed = ("node_rank", "num_nodes", "world_size", "global_rank")
    provenance = {**{name: config.provenance[name] for name in config.provenance}, **dict.fromkeys(placed, source)}
    return attrs.evolve(config, node_rank=current.node_rank, num_nodes=current.num_nodes,
                        world_size=current.world_size, provenance=provenance, notes=(*config.notes, why))  # fmt: skip
