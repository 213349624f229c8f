"""``--simulate`` specs: a short description of a machine you are not on.

A spec is a comma-separated list of tokens, applied in order over an optional environment TOML
file: machine facts (``cuda=8``, ``mps``, ``xla=4``, ``torch_xla``, ``horovod``, ``deepspeed``,
``mpi4py``, ``interactive``, ``nofork``, ``hostname=NAME``), cluster presets that set the variables
a real launcher sets (``slurm[=TASKS_PER_NODE]``, ``torchrun[=NPROC_PER_NODE]``, ``lsf[=PER_NODE]``,
``mpi[=PER_NODE]``, ``horovodrun[=PER_NODE]`` (Gloo), ``kubeflow[=PODS]``, sized by ``nodes=N``,
placed by ``node=R``), and raw variables (``NAME=VALUE``, the name starting upper-case).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resolver._engine.errors import ResolutionError
from resolver._engine.integers import parse_int
from resolver._engine.suggest import did_you_mean
from resolver._snapshot.environment import Environment
from resolver._snapshot.probes import probes

__all__ = ["SIMULATE_HELP", "simulate"]

SIMULATE_HELP = (
    "machine facts: cuda=N, mps, xla=N (or tpu=N), torch_xla, horovod, deepspeed, mpi4py, interactive, nofork, "
    "hostname=NAME, or any registered fact as FACT=VALUE (e.g. cuda_device_count=8); "
    "clusters: slurm[=TASKS_PER_NODE], torchrun[=NPROC], lsf[=PER_NODE], mpi[=PER_NODE], horovodrun[=PER_NODE], "
    "kubeflow[=PODS] (one process per pod), with nodes=N and node=R; variables: NAME=VALUE; "
    "or a path to an environment TOML file"
)
_FLAGS = {
    "mps": "mps_available",
    "torch_xla": "torch_xla_available",
    "horovod": "horovod_available",
    "deepspeed": "deepspeed_available",
    "mpi4py": "mpi4py_available",
    "interactive": "interactive",
    "notebook": "interactive",
}
_CLUSTERS = ("slurm", "torchrun", "lsf", "mpi", "horovodrun", "kubeflow")


#: The token names a spec may use (the shorthands, presets and placement); facts add their own names.
_TOKENS = ("cuda", "gpus", "xla", "tpu", *_FLAGS, "nofork", "hostname", "nodes", "node", *_CLUSTERS)


def _unknown_token(raw: str, name: str) -> ResolutionError:
    """The error for a token no part of the spec knows, naming the closest known tokens."""
    suggestion = did_you_mean(name, [*_TOKENS, *probes()]) if name else ""
    message = f"--simulate: unknown token {raw!r}" + (f"; {suggestion}" if suggestion else "")
    return ResolutionError(message, hint=SIMULATE_HELP)


def _fact(default: bool | int | str, token: str, value: str) -> bool | int | str:
    """A machine fact given as ``NAME=VALUE``, read as its probe's type."""
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ResolutionError(f"--simulate: {token!r} needs true or false", hint=SIMULATE_HELP)
        return value.lower() == "true"
    if isinstance(default, int):
        return _int(token, value)
    return value


def _int(token: str, value: str) -> int:
    number = parse_int(value)
    if number is None or number < 0:
        raise ResolutionError(f"--simulate: {token!r} needs a whole number", hint=SIMULATE_HELP)
    return number


def simulate(spec: str, base: Environment | None = None) -> Environment:
    """The environment a spec describes, on top of ``base`` (default: an empty CPU machine)."""
    env = base or Environment()
    facts: dict[str, Any] = {}
    variables = dict(env.variables)
    explicit: dict[str, str] = {}
    cluster: tuple[str, int | None] | None = None
    nodes, node = 1, 0
    for raw in (t.strip() for t in spec.split(",")):
        if not raw:
            continue
        name, _, value = raw.partition("=")
        key = name.lower()
        if not _ and Path(raw).suffix == ".toml":
            env = Environment.from_toml(raw)
            variables.update(env.variables)
            continue
        if key in ("cuda", "gpus"):
            facts["cuda_device_count"] = _int(raw, value)
        elif key in ("xla", "tpu"):
            facts["xla_device_count"] = _int(raw, value)
            facts["torch_xla_available"] = True
        elif key in _FLAGS and not value:
            facts[_FLAGS[key]] = True
        elif key == "nofork" and not value:
            facts["fork_available"] = False
        elif key == "hostname" and value:
            facts["hostname"] = value
        elif key == "nodes":
            nodes = _int(raw, value)
        elif key == "node":
            node = _int(raw, value)
        elif key in _CLUSTERS:
            cluster = (key, _int(raw, value) if value else None)
        elif value and name[:1].isupper() and name.isidentifier():
            explicit[name] = value  # a variable: upper-case first, as OMPI_MCA_ess_base_jobid
        elif value and name in probes():
            facts[name] = _fact(probes()[name].default, raw, value)
        else:
            raise _unknown_token(raw, name)
    if cluster is not None and cluster[0] == "horovodrun":
        facts.setdefault("horovod_available", True)  # horovodrun comes with Horovod
    env = env.replace(**facts)
    if cluster is not None:
        kind, per_node = cluster
        if per_node is None:
            per_node = nodes if kind == "kubeflow" else max(1, env.cuda_device_count or env.xla_device_count)
        variables.update(_cluster_variables(kind, per_node, nodes, node, env.hostname))
    variables.update(explicit)  # NAME=VALUE tokens win over a preset's variables
    files = dict(env.files)
    if cluster is not None and cluster[0] == "lsf" and "LSB_DJOB_RANKFILE" not in files:
        # the rank file jsrun writes: the launch node, then each compute host once per rank
        hosts = [env.hostname if i == node else f"node{i}" for i in range(nodes)]
        per = cluster[1] or max(1, env.cuda_device_count or env.xla_device_count)
        files["LSB_DJOB_RANKFILE"] = "batch\n" + "".join(f"{host}\n" * per for host in hosts)
    return env.replace(variables=variables, files=files)


def _cluster_variables(kind: str, per_node: int, nodes: int, node: int, hostname: str) -> dict[str, str]:
    world, rank = per_node * nodes, node * per_node
    if kind == "slurm":
        return {
            "SLURM_NTASKS": str(world),
            "SLURM_NTASKS_PER_NODE": str(per_node),
            "SLURM_NNODES": str(nodes),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": str(node),
            "SLURM_JOB_NAME": "train",
            "SLURM_JOB_ID": "1234",
            # the job's hosts, this one at its place: rank 0's machine is the first (the rendezvous)
            "SLURM_JOB_NODELIST": ",".join(hostname if i == node else f"node{i}" for i in range(nodes)),
        }
    if kind == "torchrun":
        return {
            "RANK": str(rank),
            "LOCAL_RANK": "0",
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(per_node),
            "GROUP_RANK": str(node),
            "TORCHELASTIC_RUN_ID": "simulated",
            # torchrun's own rendezvous: `localhost` on one machine (as torchrun --nproc-per-node
            # exports it), else the endpoint's host, node 0's
            "MASTER_ADDR": "localhost" if nodes == 1 else (hostname if node == 0 else "node0"),
            "MASTER_PORT": "29500",
        }
    if kind == "lsf":
        hosts = " ".join(f"{hostname if i == node else f'node{i}'} {per_node}" for i in range(nodes))
        return {
            "LSB_JOBID": "1234",
            "LSB_DJOB_RANKFILE": "/tmp/lsf-rankfile",
            "LSB_MCPU_HOSTS": f"batch 1 {hosts}",
            "JSM_NAMESPACE_SIZE": str(world),
            "JSM_NAMESPACE_RANK": str(rank),
            "JSM_NAMESPACE_LOCAL_RANK": "0",
        }
    if kind == "mpi":
        return {
            "OMPI_COMM_WORLD_SIZE": str(world),
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node),
            # Open MPI 4.1's job id and PMIx namespace (one number), alike on every rank of a job
            "OMPI_MCA_ess_base_jobid": "891158529",
            "PMIX_NAMESPACE": "891158529",
        }
    if kind == "horovodrun":
        # `horovodrun -np N -H host:PER_NODE,... --gloo`: its driver on the launching host (node 0)
        # serves the Gloo rendezvous (127.0.0.1 when everything runs here)
        return {
            "HOROVOD_RANK": str(rank),
            "HOROVOD_SIZE": str(world),
            "HOROVOD_LOCAL_RANK": "0",
            "HOROVOD_LOCAL_SIZE": str(per_node),
            "HOROVOD_CROSS_RANK": str(node),
            "HOROVOD_CROSS_SIZE": str(nodes),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_HOSTNAME": hostname,
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1" if nodes == 1 else (hostname if node == 0 else "node0"),
            "HOROVOD_GLOO_RENDEZVOUS_PORT": "29500",
        }
    return {
        "KUBERNETES_PORT": "tcp://10.0.0.1:443",
        "MASTER_ADDR": "trainer-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": str(per_node),
        "RANK": str(node),
    }
