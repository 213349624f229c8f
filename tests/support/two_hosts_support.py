"""Two hosts on one machine: network namespaces joined by a veth pair, each with its own address,
and a process started in one of them with its own host name (a UTS namespace). Nothing else of the
machine's network is used; :meth:`TwoHosts.remove` deletes both namespaces (and so the veth pair)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

#: Set in CI: a missing prerequisite fails the cluster tests instead of skipping them.
REQUIRE_VARIABLE = "RESOLVER_REQUIRE_CLUSTER"


def missing_prerequisite() -> str | None:
    """Why two hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: iproute2, util-linux)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@attrs.frozen
class Host:
    namespace: str
    hostname: str
    address: str
    interface: str

    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
        """Start ``argv`` on this host, under its own host name, with exactly ``env``."""
        command = ["ip", "netns", "exec", self.namespace, "unshare", "--uts", "sh", "-c",
                   'hostname "$0" && exec "$@"', self.hostname, *argv]  # fmt: skip
        return subprocess.Popen(command, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@attrs.frozen
class TwoHosts:
    hosts: tuple[Host, Host]
    subnet: str

    @classmethod
    def create(cls) -> TwoHosts:
        tag = f"{os.getpid() % 100000}{random.randrange(100)}"
        subnet = f"10.{random.randrange(200, 250)}.{random.randrange(1, 250)}"
        hosts = tuple(
            Host(f"rt{tag}{side}", f"node-{index}", f"{subnet}.{index + 1}", f"rt{tag}{side}")
            for index, side in enumerate("ab")
        )
        made = cls(hosts, subnet)  # type: ignore[arg-type]
        try:
            for host in hosts:
                _ip("netns", "add", host.namespace)
            _ip("link", "add", hosts[0].interface, "type", "veth", "peer", "name", hosts[1].interface)
            for host in hosts:
                _ip("link", "set", host.interface, "netns", host.namespace)
                _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.interface)
                _ip("-n", host.namespace, "link", "set", host.interface, "up")
                _ip("-n", host.namespace, "link", "set", "lo", "up")
        except BaseException:
            made.remove()
            raise
        return made

    def remove(self) -> None:
        for host in self.hosts:
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)

    def namespaces_left(self) -> list[str]:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
        names = {line.split()[0] for line in listed.splitlines() if line.strip()}
        return [host.namespace for host in self.hosts if host.namespace in names]


def kill_host(namespace: str) -> None:
    """``kill -9`` of every process in ``namespace`` (a node's launcher and its ranks), until none is left."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30)
        if not listed.stdout.split():
            return
        for pid in map(int, listed.stdout.split()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def finish(processes: Sequence[subprocess.Popen[str]], timeout: float = 180) -> list[tuple[int, str, str]]:
    """Each process's exit code, stdout and stderr, in order; any still running after ``timeout``
    seconds (or when one of them raises) is killed, so no process outlives the test."""
    results = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=timeout)
            results.append((process.returncode, out, err))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return results


REPOSITORY = Path(__file__).resolve().parents[2]


def host_environment() -> dict[str, str]:
    """This process's variables for a command started on a host: without the rendezvous, gloo and
    cluster variables of the run around it, with this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOO_", "MASTER_", "RESOLVER_", "SLURM_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    return env
