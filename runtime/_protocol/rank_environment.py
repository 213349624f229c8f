"""How a rank process learns who it is: torchrun's variables plus the resolved config.

Every process a launcher starts (and the launching process while it acts as local rank 0)
sees the variables torchrun would set (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``GROUP_RANK``) and
``RESOLVER_CONFIG``: the launching process's ``ResolvedConfig`` as JSON, with this process's
``global_rank`` and ``local_rank``. A worker uses that config as it is; it never resolves again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping

import attrs

from resolver import ResolvedConfig
from resolver._runtime_interface import local_rank_in_world, parse_timeout
from runtime._protocol import flight_recorder
from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout
from runtime.errors import RuntimeConfigError

__all__ = [
    "AGENT_STORE_VARIABLE",
    "CONFIG_VARIABLE",
    "DOORBELL_VARIABLE",
    "DEFAULT_RENDEZVOUS_TIMEOUT",
    "PARENT_PID_VARIABLE",
    "RENDEZVOUS_TIMEOUT_VARIABLE",
    "REPORT_DIR_VARIABLE",
    "elastic_variables",
    "environ_patch",
    "launched_config",
    "rank_config",
    "rank_threads",
    "rank_variables",
    "threads_applied",
    "rendezvous_timeout",
]

#: The resolved config of a launched rank, as JSON.
CONFIG_VARIABLE = "RESOLVER_CONFIG"
#: ``True`` where the ranks' store is hosted by torch's agent (torchrun's, or resolver run's across nodes):
#: rank 0 then connects to it as the others do, instead of hosting one.
AGENT_STORE_VARIABLE = "TORCHELASTIC_USE_AGENT_STORE"
#: Where a launched rank writes its error report, result and stack dump for its launcher.
REPORT_DIR_VARIABLE = "RUNTIME_REPORT_DIR"
#: The launcher's pid: a rank whose launcher is gone stops instead of running orphaned.
PARENT_PID_VARIABLE = "RUNTIME_LAUNCHER_PID"
#: A pipe's write end a rank rings (one byte) after each report, so its launcher wakes at once.
DOORBELL_VARIABLE = "RUNTIME_DOORBELL_FD"
#: Seconds every rank has to reach the rendezvous (join the process group) before the launch fails.
RENDEZVOUS_TIMEOUT_VARIABLE = "RUNTIME_RENDEZVOUS_TIMEOUT"
#: The rendezvous timeout when the variable is not set.
DEFAULT_RENDEZVOUS_TIMEOUT = 300.0


def rendezvous_timeout(config: ResolvedConfig | None = None, environ: Mapping[str, str] | None = None) -> float:
    """The rendezvous timeout in seconds: the strategy option ``rendezvous_timeout`` of ``config``,
    else ``RUNTIME_RENDEZVOUS_TIMEOUT``, else 300."""
    option = None if config is None else config.strategy_options.get("rendezvous_timeout")
    if option is not None:
        return check_timeout(option, f"rendezvous_timeout={option!r}", TIMEOUT_HINTS["rendezvous_timeout"])
    text = (os.environ if environ is None else environ).get(RENDEZVOUS_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_RENDEZVOUS_TIMEOUT
    try:
        return parse_timeout(text, f"{RENDEZVOUS_TIMEOUT_VARIABLE}={text!r}")
    except ValueError as exc:
        raise RuntimeConfigError(str(exc), hint=TIMEOUT_HINTS[RENDEZVOUS_TIMEOUT_VARIABLE]) from None


def rank_config(config: ResolvedConfig, local_rank: int) -> ResolvedConfig:
    """``config`` as seen by local rank ``local_rank`` of this node."""
    if not 0 <= local_rank < config.num_devices:
        raise ValueError(f"local rank {local_rank} is outside 0..{config.num_devices - 1}")
    # the formula the rules use for a process this library launches (rule global_rank.local)
    global_rank = local_rank_in_world(config.node_rank, config.num_devices, local_rank)
    return attrs.evolve(config, global_rank=global_rank, local_rank=local_rank)


def rank_variables(
    config: ResolvedConfig,
    main_address: str,
    main_port: int,
    report_dir: str | None = None,
) -> dict[str, str]:
    """The environment variables of the rank ``config`` describes (see the module docstring)."""
    variables = {
        "MASTER_ADDR": main_address,
        "MASTER_PORT": str(main_port),
        "RANK": str(config.global_rank),
        "LOCAL_RANK": str(config.local_rank),
        "WORLD_SIZE": str(config.world_size),
        "LOCAL_WORLD_SIZE": str(config.num_devices),
        "NODE_RANK": str(config.node_rank),
        "GROUP_RANK": str(config.node_rank),
        # the rank's config carries the rendezvous it was given (a port picked at launch included)
        CONFIG_VARIABLE: attrs.evolve(config, main_address=main_address, main_port=main_port).to_json(),
    }
    threads = rank_threads(config)
    if threads is not None:
        # Read by torch (and OpenMP/MKL) when a fresh interpreter starts; forked ranks and the
        # caller acting as rank 0 get torch.set_num_threads instead (threads_applied).
        variables["OMP_NUM_THREADS"] = str(threads)
    if report_dir is not None:
        variables[REPORT_DIR_VARIABLE] = report_dir
        variables[PARENT_PID_VARIABLE] = str(os.getpid())
        # torch's flight recorder, bounded, read by the launcher when it diagnoses a hang (the user's size wins)
        if not any(name in os.environ for name in flight_recorder.BUFFER_VARIABLES):
            variables[flight_recorder.BUFFER_VARIABLES[0]] = str(flight_recorder.BUFFER_SIZE)
    return variables


def elastic_variables(config: ResolvedConfig, run_id: str, role: str = "default") -> dict[str, str]:
    """The variables torchrun's agent adds for each worker, beyond :func:`rank_variables`: one role
    (``default``) holding every rank, the run's id, and the first attempt (``resolver run --max-restarts``
    replaces ``TORCHELASTIC_RESTART_COUNT``/``TORCHELASTIC_MAX_RESTARTS`` with its own count).

    Set for every rank ``resolver run`` starts itself, one alone too, so that a script written for
    torchrun (one reading ``ROLE_RANK``, or ``torch.distributed.is_torchelastic_launched()``) runs
    unchanged. ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` is ``1`` unless this process has it set, as torchrun
    does. torchrun's agent-store and error-file variables are left out: no agent serves them here.
    """
    return {
        "ROLE_NAME": role,
        "ROLE_RANK": str(config.global_rank),
        "ROLE_WORLD_SIZE": str(config.world_size),
        "GROUP_WORLD_SIZE": str(config.num_nodes),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def rank_threads(config: ResolvedConfig) -> int | None:
    """The intra-op thread count of each local rank: the ``num_threads`` strategy option, else
    the resolved ``threads_per_rank`` (``None``: leave torch's default)."""
    option = config.strategy_options.get("num_threads")
    if isinstance(option, int) and not isinstance(option, bool) and option >= 1:
        return option
    return config.threads_per_rank


@contextlib.contextmanager
def threads_applied(config: ResolvedConfig) -> Iterator[None]:
    """Run the block with this rank's intra-op thread count (:func:`rank_threads`), restored after.

    Restoring matters where the launching process itself acts as rank 0 (the subprocess launcher).
    """
    threads = rank_threads(config)
    if threads is None:
        yield
        return
    import torch  # a rank has imported it already

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def launched_config(environ: Mapping[str, str] | None = None) -> ResolvedConfig | None:
    """This process's config (``RESOLVER_CONFIG``) where ``resolver run`` or a launcher of
    ``runtime.launch`` started it (a rank the ``subprocess`` launcher re-runs the script for, a
    ``spawn`` or ``fork`` rank), also while the launching process runs rank 0's work.

    ``None`` everywhere else: under plain ``python`` (the process that calls ``runtime.launch``
    before and after the launch included) and in every process torchrun, srun or mpirun started
    directly. To ask "is this global rank 0?" anywhere, use :func:`runtime.is_global_zero`.
    """
    text = (os.environ if environ is None else environ).get(CONFIG_VARIABLE)
    if not text:
        return None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object, got {type(data).__name__}")
        return ResolvedConfig.from_dict(data)
    except Exception as exc:  # json, attrs and the fields raise several types; all mean the same here
        raise ValueError(
            f"{CONFIG_VARIABLE} is set but does not hold a resolved config ({exc}); "
            "it is set by runtime launchers for their workers: unset it in your shell"
        ) from exc


@contextlib.contextmanager
def environ_patch(variables: Mapping[str, str]) -> Iterator[None]:
    """Set ``variables`` in ``os.environ`` inside the block, restoring what was there after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
