"""``runtime.check`` / ``resolver check``: prove that the resolved setup works before the real job.

Steps (each bounded by ``timeout`` seconds; see :data:`~runtime.preflight.report.STEPS`): the
rendezvous at rank 0's ``main_address:main_port``; the ranks' agreement on config and machine
facts; barrier, all_reduce, broadcast and all_gather with their values checked; a point-to-point
ring that names a broken pair of hosts; and the speed of each collective. Modules:
``rendezvous``, ``agreement``, ``collectives``, ``speed`` (a rank's steps, driven by ``rank``),
``local`` (starting the ranks on this machine) and ``report`` (the merged result).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout
from runtime.preflight.report import Check, CheckReport, RankState, merge

if TYPE_CHECKING:
    from resolver import Environment, ResolvedConfig
    from runtime.preflight.progress import StepReporter

__all__ = ["DEFAULT_TIMEOUT", "Check", "CheckReport", "RankState", "check", "check_config"]

#: Seconds each step may take: short, so that a broken setup is found in seconds, not torch's 30 minutes.
DEFAULT_TIMEOUT = 10.0


def check_config(config: ResolvedConfig, *, timeout: float = DEFAULT_TIMEOUT, port_source: str | None = None,
                 reporter: StepReporter | None = None) -> CheckReport:  # fmt: skip
    """Check ``config``: start its local ranks (a launcher resolved), or, where someone else started
    the ranks (``config.launcher`` is None: srun, mpirun, torchrun), run as this process's rank.

    In a rank started by someone else, rank 0 returns the whole run's report; another rank returns
    its own view (its checks; the others' are rank 0's to report). ``port_source`` names where the
    main port came from as the user gave it (``--master-port`` on a command line), for messages;
    by default, as the config's provenance says (``master_port``, ``MASTER_PORT``, a flags file).
    ``reporter`` is told each step as the ranks this process started pass it (in a rank started by
    someone else: as rank 0 passes it), with the seconds since the check began, before the report:
    :func:`~runtime.preflight.progress.progress_line` writes it.
    """
    timeout = check_timeout(timeout, f"timeout={timeout!r}", TIMEOUT_HINTS["check"])
    if config.launcher is None:
        return _check_this_rank(config, timeout, port_source, reporter)
    from runtime.registry import LAUNCHERS

    check_ranks = LAUNCHERS.get(config.launcher).check_ranks
    if check_ranks == "replicas":  # the engine starts and numbers the replicas (torch_xla): the check runs in them
        from runtime.preflight.xla import check_xla

        return check_xla(config, timeout=timeout)
    if check_ranks is None:
        from runtime.errors import RuntimeConfigError

        raise RuntimeConfigError(
            f"resolver check starts local ranks as processes; the {config.launcher} launcher starts its own",
            hint="run the check under that launcher (e.g. horovodrun ... resolver check), where each rank runs it",
        )
    from runtime.preflight.local import check_locally

    return check_locally(config, timeout=timeout, port_source=port_source, reporter=reporter)


def _check_this_rank(config: ResolvedConfig, timeout: float, port_source: str | None,
                     reporter: StepReporter | None) -> CheckReport:  # fmt: skip
    import socket
    import time

    from runtime.cluster.base import StoreAddressError
    from runtime.preflight.rank import check_rank
    from runtime.preflight.report import FAIL
    from runtime.registry import CLUSTER_ENVIRONMENTS

    started = time.monotonic()
    cluster = CLUSTER_ENVIRONMENTS.get(config.cluster_environment)(config)
    rank = config.global_rank
    try:  # the cluster's rendezvous, or one it agrees on where its own runtime serves there (horovodrun's driver)
        address, port, source = cluster.store_address(rank, timeout)
    except StoreAddressError as failed:
        host = socket.gethostname()
        found = Check("rendezvous", FAIL, failed.detail, (rank,), (host,), fix=failed.fix, echo=failed.echo)
        state = RankState(rank, host, (found,), "done")
        return merge([state], config.world_size, timeout=timeout, summary=config.summary(),
                     seconds=time.monotonic() - started)  # fmt: skip
    source = source or port_source or cluster.main_port_source
    state, everyone = check_rank(config, address, port, timeout=timeout, source=source,
                                 reporter=reporter if rank == 0 else None)  # fmt: skip
    seconds = time.monotonic() - started
    if everyone is not None:
        return merge(everyone, config.world_size, timeout=timeout, summary=config.summary(), seconds=seconds)
    # not rank 0: this rank's own checks only (a peer's silence is rank 0's to report)
    mine = merge([state], 1, timeout=timeout, summary=f"rank {config.global_rank}'s view; rank 0 reports the run",
                 seconds=seconds)  # fmt: skip
    return CheckReport(mine.checks, config.world_size, (state.host,), mine.summary, seconds)


def check(
    *,
    timeout: float = DEFAULT_TIMEOUT,
    environment: Environment | None = None,
    **flags: Any,
) -> CheckReport:
    """Resolve ``flags`` (as :func:`resolver.resolve`) and check that the setup works; see
    :func:`check_config`. Returns the report; ``report.ok`` says whether every check passed."""
    import resolver

    config = resolver.resolve(**flags, environment=environment)
    return check_config(config, timeout=timeout)
