"""PBS as the runtime sees it: where the ranks it started meet (the rules resolve the address and
port), the signal it stops them with, and putting a pre-empted job back in the queue."""

from __future__ import annotations

import signal
import subprocess
import sys

from runtime.cluster.base import ClusterEnvironment


class PBSEnvironment(ClusterEnvironment):
    """A PBS job whose tasks carry PBS_RANK, PBS_WORLD_SIZE and PBS_MAIN_ADDR (a made-up PBS)."""

    title = "PBS"
    variables_hint = "start each task with the PBS task launcher, which sets PBS_MAIN_ADDR and PBS_JOBID"
    # PBS ends a job's processes with SIGTERM (then SIGKILL after its kill delay): a rank takes it as pre-emption
    stop_signals = (signal.SIGTERM,)
    cannot_requeue = "this is not a PBS job (PBS_JOBID is unset)"

    def job_to_requeue(self) -> str | None:
        return self.environ.get("PBS_JOBID")

    def requeue(self, job: str) -> tuple[str | None, str, str | None]:
        """``qrerun JOB``: (the job, "", None) once done, else (None, why not, the fix if known)."""
        try:
            done = subprocess.run(["qrerun", job], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"not requeued: qrerun {job} could not run ({exc})", None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()
            return (
                None,
                f"not requeued: qrerun {job} failed ({said or f'exit status {done.returncode}'})",
                ("submit the job as rerunnable (qsub -r y)"),
            )
        print(f"npu_pbs_plugin: requeued PBS job {job} (qrerun)", file=sys.stderr, flush=True)
        return job, "", None
