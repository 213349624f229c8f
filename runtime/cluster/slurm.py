"""SLURM: ``srun`` started one process per task; rank 0 runs on the first node of the job."""

from __future__ import annotations

import signal
import subprocess
import sys

from runtime.cluster.base import ClusterEnvironment
from runtime.errors import RuntimeConfigError

__all__ = ["SLURMEnvironment"]


class SLURMEnvironment(ClusterEnvironment):
    """The rendezvous the rules resolved: ``MASTER_ADDR``/``MASTER_PORT``, else the job's first node and
    a port derived from the job id (``rules/clusters/slurm.toml``)."""

    title = "SLURM"
    variables_hint = "run inside an allocation with srun, or export MASTER_ADDR and MASTER_PORT"
    # SLURM ends a step's tasks with SIGTERM (after the --signal one, and when a requeued job's end comes)
    stop_signals = (signal.SIGTERM,)

    def job_to_requeue(self) -> str | None:
        return self.environ.get("SLURM_JOB_ID")

    def requeue(self, job: str) -> tuple[str | None, str, str | None]:
        """``scontrol requeue JOB``: (the job, "", None) once done, else (None, why not, the fix if known)."""
        try:
            done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"not requeued: scontrol requeue {job} could not run ({exc})", None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()
            return (
                None,
                f"not requeued: scontrol requeue {job} failed ({said or f'exit status {done.returncode}'})",
                "submit with sbatch --requeue (or set JobRequeue=1 in slurm.conf)",
            )
        print(f"runtime: requeued SLURM job {job} (scontrol requeue)", file=sys.stderr, flush=True)
        return job, "", None

    def check_started_by_cluster(self) -> None:
        """A batch script is not a task: sbatch gives it the job's variables (``SLURM_NTASKS``,
        ``SLURM_PROCID=0``) but only srun's tasks run in a step (``SLURM_STEP_ID``). Training
        started there directly (or by mpirun there, whose ranks inherit the batch script's
        variables) would be rank 0 of ranks nobody starts, waiting the rendezvous out."""
        environ = self.environ
        if self.config.world_size < 2 or not environ.get("SLURM_JOB_ID") or "SLURM_PROCID" not in environ:
            return
        if environ.get("SLURM_STEP_ID", "").strip() or environ.get("SLURM_STEPID", "").strip():
            return
        job, tasks = environ["SLURM_JOB_ID"], environ.get("SLURM_NTASKS", str(self.config.world_size))
        if environ.get("OMPI_COMM_WORLD_SIZE", "").strip():
            where = "a process mpirun started in the batch script of SLURM job"
            hint = (
                "pass cluster_environment='mpi' to take the ranks from mpirun (with MASTER_ADDR and "
                "MASTER_PORT passed by mpirun -x), or start the ranks with srun instead of mpirun"
            )
        else:
            where = "the batch script of SLURM job"
            hint = "start the training with srun in the batch script (srun python train.py ...): one process per task"
        raise RuntimeConfigError(
            f"this process is {where} {job}, not one of its {tasks} tasks (SLURM_NTASKS={tasks}, but "
            f"SLURM_STEP_ID is not set: srun did not start it), so it would wait in the rendezvous for "
            f"{self.config.world_size - 1} rank(s) that SLURM never starts",
            hint=hint,
        )
