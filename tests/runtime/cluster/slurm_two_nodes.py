"""A two-node SLURM cluster on one machine: node-0 and node-1 are two network namespaces joined by a
veth pair (:class:`two_hosts_support.TwoHosts`, addresses in a private 10.x.y.0/24 the test picks),
each with its own host name. slurmctld runs on node-0, as on a cluster's head node; one slurmd runs
on each node, so the tasks it forks (and the ranks they start) live on that node's network and
under its name. munged is shared through its socket, a file: namespaces share the filesystem.

A process is put on a node with ``nsenter --net`` (not ``ip netns exec``: that mounts a fresh /sys
without /sys/fs/cgroup, and slurmd 22.05 then stops with "No filesystem mounted on /sys/fs/cgroup")
inside a mount namespace of its own where the cluster's hosts file, naming both nodes, is bound over
/etc/hosts: the ranks meet at ``node-0``, the first name of ``SLURM_JOB_NODELIST``, so it must
resolve on both nodes, and nothing outside the cluster's folder and namespaces is changed.

:meth:`TwoNodeCluster.stop` cancels the jobs, stops the daemons by their pids, deletes the
namespaces (and so the veth pair) and the folder; :meth:`TwoNodeCluster.leftovers` names whatever
of them is still there.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.slurm_jobs import Cluster, job_environment
from tests.support.two_hosts_support import Host, TwoHosts
from tests.support.two_hosts_support import missing_prerequisite as missing_namespaces

COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel", "squeue", "sinfo", "nsenter")
#: Daemons in the order they are stopped: the slurmds (and their jobs' steps) first, munged last.
DAEMONS = ("slurmd-node-0", "slurmd-node-1", "slurmctld", "munged")

# Run "$@" under the host name $2 with the hosts file $1 as /etc/hosts (in this mount namespace only).
_ON_HOST = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'

_SLURM_CONF = """\
ClusterName=resolvertwonodes
SlurmctldHost=node-0({address0})
# Each daemon has its namespace's ports to itself: SLURM's defaults cannot collide with anything.
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={folder}/state
# %n: the node's name, so that the two slurmds on this machine keep their files apart
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
# start a batch job at once (the default waits up to 3 s to gather more jobs for one scheduling pass)
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId={first_job}
MinJobAge=600
KillWait=5
MailProg=/bin/true
NodeName=node-[0-1] NodeAddr={address0},{address1} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=node-[0-1] Default=YES MaxTime=INFINITE State=UP
"""


def missing_prerequisite() -> str | None:
    """Why the two-node cluster cannot run here, or None."""
    why = missing_namespaces()
    if why is not None:
        return why
    for command in COMMANDS:
        if shutil.which(command) is None and not Path("/usr/sbin", command).exists():
            return (
                f"{command} is not installed (Debian: slurm-wlm, munge, util-linux; "
                "`scripts/test-cluster.sh install` installs SLURM's)"
            )
    return None


@dataclass
class TwoNodeCluster:
    """The running cluster: its nodes, its folder, and :attr:`jobs` for slurm_jobs' helpers."""

    hosts: TwoHosts
    folder: Path
    jobs: Cluster
    pids: dict[str, int] = field(default_factory=dict)
    #: What :meth:`stop` found still running on a node after its daemons had stopped (and killed)
    strays: list[str] = field(default_factory=list)

    def on_node(self, index: int, *argv: str) -> list[str]:
        """``argv`` run on node ``index`` (its network, its host name, the cluster's hosts file)."""
        host: Host = self.hosts.hosts[index]
        return ["nsenter", f"--net=/run/netns/{host.namespace}", "unshare", "--mount", "--uts",
                "sh", "-c", _ON_HOST, "sh", str(self.folder / "hosts"), host.hostname, *argv]  # fmt: skip

    def client(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a SLURM command on node-0, where slurmctld is."""
        return subprocess.run(
            self.on_node(0, *argv), env=self.jobs.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    @classmethod
    def start(cls) -> TwoNodeCluster:
        """Make the nodes and start the daemons; wait (at most a minute) until both nodes are idle.

        On failure everything started is stopped and the error carries the daemons' logs.
        """
        hosts = TwoHosts.create()
        folder = Path(tempfile.mkdtemp(prefix="test-cluster-2n."))
        slurm_conf = folder / "slurm.conf"
        cluster = cls(hosts, folder, Cluster(folder, slurm_conf, "node-0", job_environment(slurm_conf)))
        cluster.jobs.client = tuple(cluster.on_node(0))
        try:
            cluster._start_daemons()
        except BaseException as exc:
            logs = cluster.logs()
            cluster.stop()
            raise RuntimeError(f"the two-node SLURM cluster did not start: {exc}\n{logs}") from exc
        return cluster

    def _start_daemons(self) -> None:
        folder = self.folder
        for sub in ("state", "spool/node-0", "spool/node-1", "log", "munge"):
            (folder / sub).mkdir(parents=True)
        (folder / "munge").chmod(0o700)
        lines = ["127.0.0.1 localhost", *(f"{h.address} {h.hostname}" for h in self.hosts.hosts)]
        (folder / "hosts").write_text("\n".join(lines) + "\n")
        key = folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))  # a key of its own: the package's may be missing or in use
        key.chmod(0o600)
        self._daemon(
            ["munged", f"--key-file={key}", f"--socket={folder}/munge/munge.socket", f"--pid-file={folder}/munged.pid",
             f"--log-file={folder}/log/munged.log", f"--seed-file={folder}/munge/munged.seed", "--force"], "munged",
        )  # fmt: skip
        # A job id that starts at a random place: the rendezvous port derived from it differs between runs.
        self.jobs.slurm_conf.write_text(
            _SLURM_CONF.format(
                folder=folder,
                address0=self.hosts.hosts[0].address,
                address1=self.hosts.hosts[1].address,
                first_job=random.randrange(1000, 9000),
            )
        )
        conf = str(self.jobs.slurm_conf)
        self._daemon(self.on_node(0, "slurmctld", "-c", "-f", conf), "slurmctld")
        _wait_for("slurmctld to answer `scontrol ping`", 30, lambda: self.client("scontrol", "ping").returncode == 0)
        for index in range(2):
            self._daemon(self.on_node(index, "slurmd", "-f", conf, "-N", f"node-{index}"), f"slurmd-node-{index}")
        _wait_for("both nodes to be idle in sinfo", 60, self._both_idle)
        for daemon in DAEMONS:
            self.pids[daemon] = int((folder / f"{daemon}.pid").read_text().strip())

    def _daemon(self, argv: list[str], name: str) -> None:
        """Start a daemon that forks into the background; what it says before its log opens goes to a file
        (not a pipe, which the daemon could hold open)."""
        with open(self.folder / "log" / f"{name}.start.log", "w") as said:
            subprocess.run(argv, env=self.jobs.env, stdout=said, stderr=said, stdin=subprocess.DEVNULL, check=True,
                           timeout=30)  # fmt: skip

    def _both_idle(self) -> bool:
        listed = self.client("sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
        return listed == ["node-0", "idle", "node-1", "idle"]

    def logs(self) -> str:
        """The tail of each daemon's log."""
        parts = []
        for log in sorted((self.folder / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel the jobs, stop the daemons, delete the namespaces and the folder."""
        try:
            try:
                self._end_jobs()
            except subprocess.SubprocessError:
                pass  # a controller that does not answer: its daemons are stopped all the same
            self._stop_daemons()
            self._kill_strays()
        finally:
            self.hosts.remove()
            shutil.rmtree(self.folder, ignore_errors=True)

    def _end_jobs(self) -> None:
        if not self._alive("slurmctld"):
            return
        # Jobs first, so that no slurmstepd (nor a rank it started) outlives the slurmds.
        jobs = self.client("squeue", "-h", "-o", "%i", timeout=15).stdout.split()
        if jobs:
            self.client("scancel", "--quiet", *jobs, timeout=15)

        def ended() -> bool:
            steps = list(self.folder.glob("spool/node-*/*_[0-9]*"))  # NODE_JOBID.STEP: a slurmstepd's socket
            return not steps and not self.client("squeue", "-h", "-o", "%i", timeout=15).stdout.split()

        _wait_for("the jobs to end", 30, ended, fail=False)

    def _stop_daemons(self) -> None:
        for daemon in DAEMONS:
            pid = self._pid(daemon)
            if pid is None or not running(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            if not _wait_for(f"{daemon} (pid {pid}) to stop", 10, lambda pid=pid: not running(pid), fail=False):
                os.kill(pid, signal.SIGKILL)  # a daemon that will not stop must not outlive the tests

    def _kill_strays(self) -> None:
        """Kill what still runs on a node once its daemons are stopped (a rank its job left), and note it."""
        for host in self.hosts.hosts:
            listed = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True, timeout=30)
            for pid in map(int, listed.stdout.split()):
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    if running(pid):
                        os.kill(pid, signal.SIGKILL)
                        self.strays.append(f"process {pid} on {host.hostname}: {command.strip()}")
                except (FileNotFoundError, ProcessLookupError):
                    pass  # it ended on its own meanwhile

    def _pid(self, daemon: str) -> int | None:
        if daemon in self.pids:
            return self.pids[daemon]
        file = self.folder / f"{daemon}.pid"  # a start that failed half-way: what its pid files say
        try:
            return int(file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _alive(self, daemon: str) -> bool:
        pid = self._pid(daemon)
        return pid is not None and running(pid)

    def leftovers(self) -> list[str]:
        """What of the cluster is still there after :meth:`stop` (nothing, when all went well)."""
        left = [f"network namespace {name}" for name in self.hosts.namespaces_left()] + self.strays
        left += [f"{daemon} (pid {pid})" for daemon, pid in self.pids.items() if running(pid)]
        left += [f"folder {self.folder}"] if self.folder.exists() else []
        return left


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, a daemon that ended but is not reaped yet, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_for(what: str, seconds: float, done: Callable[[], bool], *, fail: bool = True) -> bool:
    """Poll ``done()`` every 0.2 s for at most ``seconds``; raise (or, with fail=False, return False) after."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.2)
    if fail:
        raise TimeoutError(f"gave up after {seconds} s waiting for {what}")
    return False
