"""PBS as the runtime sees it: where the ranks it started meet (the rules resolve the address and port)."""

from runtime.cluster.base import ClusterEnvironment


class PBSEnvironment(ClusterEnvironment):
    """A PBS job whose tasks carry PBS_RANK, PBS_WORLD_SIZE and PBS_MAIN_ADDR (a made-up PBS)."""

    title = "PBS"
    variables_hint = "start each task with the PBS task launcher, which sets PBS_MAIN_ADDR and PBS_JOBID"
