"""The ``horovod`` launcher: Horovod's programmatic runner (``horovod.run``) over Gloo on this machine.

``horovod.run`` starts one process per device, gives each Horovod's rendezvous variables, runs
the pickled function there and returns every rank's result. Around it, each rank also gets the
variables of :mod:`runtime._protocol.rank_environment` (its resolved config, ``RANK``, ...) and reports a
failure to the launcher before exiting, so a failing rank comes back as
:class:`~runtime.errors.RankFailedError` naming that rank with its traceback (``horovod.run``
alone only says that some process exited with a non-zero status). When a rank fails, Horovod's
runner stops the other ranks; no process outlives a launch.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from runtime._protocol.rank_environment import PARENT_PID_VARIABLE, rank_config, rank_variables
from runtime._supervision.cleanup import temporary_rank_files
from runtime.errors import MissingDependencyError, RankFailedError, RuntimeConfigError
from runtime.launchers.base import Launcher

__all__ = ["HorovodLauncher"]

R = TypeVar("R")


def _horovod_rank_main(
    per_rank: Mapping[int, Mapping[str, str]], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Runs in each process ``horovod.run`` started: become the rank Horovod numbered, run ``fn`` (the rank's
    entry, :func:`runtime._protocol.launched_rank.enter_rank`)."""
    local_rank = int(os.environ["HOROVOD_LOCAL_RANK"])
    os.environ.update(per_rank[local_rank])
    try:
        return fn(*args, **kwargs)
    except BaseException:
        # Reported to the launcher already (enter_rank), which raises it naming this rank.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


class HorovodLauncher(Launcher):
    """One process per device on this machine through ``horovod.run(..., use_gloo=True)``."""

    def _launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        try:
            import horovod
        except ImportError as exc:
            raise MissingDependencyError("the horovod launcher", "horovod") from exc
        if self.config.num_nodes > 1:
            raise RuntimeConfigError(
                f"the horovod launcher starts processes on this machine only, but num_nodes={self.config.num_nodes}",
                hint=f"start the script on every node with horovodrun (e.g. `horovodrun -np {self.config.world_size} "
                f"-H host1:{self.config.num_devices},host2:{self.config.num_devices} python train.py`); it then runs "
                "without a launcher",
            )
        size = self.config.num_devices
        address = self.cluster_environment.main_address
        port = self.cluster_environment.main_port
        with temporary_rank_files() as reports:
            per_rank: dict[int, dict[str, str]] = {}
            for local_rank in range(size):
                variables = rank_variables(rank_config(self.config, local_rank), address, port, reports.directory)
                variables.pop(PARENT_PID_VARIABLE)  # the ranks' parent is Horovod's runner, not this process
                per_rank[local_rank] = variables
            try:
                results = horovod.run(
                    _horovod_rank_main,
                    args=(per_rank, fn, args, kwargs),
                    num_proc=size,
                    hosts=f"localhost:{size}",
                    use_gloo=True,
                    start_timeout=None if self.timeout is None else math.ceil(self.timeout),  # whole seconds
                )
            except Exception as exc:
                failed = [r for r in range(size) if reports.read_error(r) is not None]
                if not failed:
                    raise
                first = min(failed, key=lambda r: reports.read_error(r).time)  # type: ignore[union-attr]
                report = reports.read_error(first)
                assert report is not None
                raise RankFailedError(first, exit_code=1, traceback=report.traceback, summary=report.summary) from exc
            return results[0]  # type: ignore[no-any-return]
