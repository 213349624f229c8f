"""No input crashes resolve(): flags of every type and cluster variables with garbage or
out-of-range values give a ResolvedConfig or a ResolutionError, and every config is consistent.

CI runs a bounded number of examples; ``RESOLVER_FUZZ_EXAMPLES=100000`` runs a campaign.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resolver import Environment, ResolutionError, ResolvedConfig, resolve
from resolver.cli import main

EXAMPLES = int(os.environ.get("RESOLVER_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=EXAMPLES <= 300,  # CI: the same inputs every run; a campaign explores
    database=None,  # nothing written into the checkout
)

# Text that looks like a number but is not one int() accepts, and numbers at the edges.
_TRICKY_TEXT = [
    "²",
    "①",
    "--2",
    "+3",
    " 2 ",
    "-1",
    "0",
    "1,",
    ",",
    "0,0",
    "1" * 4301,
    "9" * 4300,
    "9" * 30,
    "",
    "٣",
    "2.0",
    "1e3",
]
_INTS = st.one_of(
    st.integers(min_value=-3, max_value=20),
    st.sampled_from([2**31, 2**63, 10**8, 4096, 4097, -(2**63), 10**100, 10**4299, 10**4300, 10**6 + 1]),
)
_GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    _INTS,
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.sampled_from(_TRICKY_TEXT),
    st.lists(st.one_of(_INTS, st.text(max_size=3), st.none()), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.tuples(st.integers(min_value=-1, max_value=9)),
)


def _flag(*known: Any) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(known), _GARBAGE)


ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps", "xla", "tpu", "CUDA")
STRATEGIES = (
    "auto",
    "single_device",
    "ddp",
    "ddp_spawn",
    "ddp_fork",
    "ddp_notebook",
    "fsdp",
    "deepspeed",
    "xla",
    "single_xla",
    "horovod",
    "deepspeed_stage_2",
    "fsdp_cpu_offload",
)
PRECISIONS = (None, "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true", 16, 32, 64, "bf16")
CLUSTERS = ("auto", "local", "torchelastic", "slurm", "lsf", "mpi", "kubeflow", "xla")
PLUGINS = ("slurm", "lsf", "torchelastic", "mpi", "kubeflow", "bf16-mixed", "16-mixed", "ddp", "nonsense")

flags = st.fixed_dictionaries(
    {
        "accelerator": _flag(*ACCELERATORS),
        "devices": st.one_of(
            st.integers(min_value=-2, max_value=10),
            st.sampled_from(["auto", "-1", "2", "0,1", "1,", [0, 2], [1], (0, 1), [0, 0]]),
            _GARBAGE,
        ),
        "strategy": _flag(*STRATEGIES),
        "precision": _flag(*PRECISIONS),
        "num_nodes": st.one_of(st.integers(min_value=-1, max_value=4), _GARBAGE),
        "cluster_environment": _flag(*CLUSTERS),
        "plugins": st.one_of(
            st.lists(st.sampled_from(PLUGINS), max_size=3),
            st.sampled_from(PLUGINS),
            _GARBAGE,
        ),
    }
)

# Cluster variables: sensible, out of range, or garbage.
_VALUE = st.one_of(
    st.integers(min_value=-2, max_value=9).map(str),
    st.sampled_from(_TRICKY_TEXT),
    st.text(max_size=6),
)
_CLUSTER_VARIABLES = {
    "torchelastic": ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"],
    "slurm": [
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_NNODES",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_JOB_NAME",
        "SLURM_JOB_ID",
    ],
    "lsf": ["JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK", "LSB_JOBID", "LSB_MCPU_HOSTS"],
    "mpi": ["OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"],
    "kubeflow": ["KUBERNETES_PORT", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"],
    "local": [
        "LOCAL_RANK",
        "NODE_RANK",
        "GROUP_RANK",
        "CUDA_VISIBLE_DEVICES",
        "RESOLVER_DEVICES",
        "RESOLVER_NUM_NODES",
        "RESOLVER_ACCELERATOR",
        "RESOLVER_STRATEGY",
        "RESOLVER_PRECISION",
        "RESOLVER_CLUSTER_ENVIRONMENT",
        "MASTER_PORT",
        "PJRT_DEVICE",
        "TPU_NUM_DEVICES",
    ],
}


@st.composite
def environments(draw: st.DrawFn) -> Environment:
    names = draw(st.lists(st.sampled_from(sorted(_CLUSTER_VARIABLES)), max_size=2, unique=True))
    variables = {}
    for name in names:
        # Often a whole, nearly sensible set (small ranks and sizes, some out of range), so that
        # resolution gets as far as the rank checks; otherwise a random subset of any values.
        coherent = draw(st.booleans())
        for variable in _CLUSTER_VARIABLES[name]:
            if coherent:
                variables[variable] = str(draw(st.integers(min_value=-1, max_value=3)))
            elif draw(st.booleans()):
                variables[variable] = draw(_VALUE)
    if "LSB_MCPU_HOSTS" in variables and draw(st.booleans()):
        variables["LSB_MCPU_HOSTS"] = draw(st.sampled_from(["batch 1 node-a 4", "batch 1 host 2 node-b 2", ""]))
    return Environment(
        cuda_device_count=draw(st.one_of(st.integers(min_value=0, max_value=9), st.sampled_from([4096, 10**6]))),
        mps_available=draw(st.booleans()),
        xla_device_count=draw(st.integers(min_value=0, max_value=8)),
        torch_xla_available=draw(st.booleans()),
        horovod_available=draw(st.booleans()),
        deepspeed_available=draw(st.booleans()),
        interactive=draw(st.booleans()),
        fork_available=draw(st.booleans()),
        hostname=draw(st.sampled_from(["node-a", "node-b", "host"])),
        variables=variables,
    )


def cluster_job(rng: random.Random) -> tuple[dict[str, Any], Environment]:
    """Flags and the variables a cluster sets for one process of a job of num_nodes x devices, the
    process's ranks sometimes pushed out of range (or made garbage) in one variable."""
    cluster = rng.choice(["torchelastic", "slurm", "lsf", "mpi", "kubeflow", "local"])
    nodes, devices = rng.randint(1, 3), rng.randint(1, 4)
    if cluster == "kubeflow":
        nodes, devices = nodes * devices, 1
    node, local = rng.randrange(nodes), rng.randrange(devices)
    rank, size = node * devices + local, nodes * devices
    hosts = [f"node-{i}" for i in range(nodes)]
    variables = {
        "torchelastic": {
            "WORLD_SIZE": size,
            "RANK": rank,
            "LOCAL_RANK": local,
            "GROUP_RANK": node,
            "LOCAL_WORLD_SIZE": devices,
            "TORCHELASTIC_RUN_ID": "job",
        },
        "slurm": {
            "SLURM_NTASKS": size,
            "SLURM_PROCID": rank,
            "SLURM_LOCALID": local,
            "SLURM_NODEID": node,
            "SLURM_NNODES": nodes,
            "SLURM_NTASKS_PER_NODE": devices,
            "SLURM_JOB_NAME": "train",
            "SLURM_JOB_ID": "1",
        },
        "lsf": {
            "JSM_NAMESPACE_SIZE": size,
            "JSM_NAMESPACE_RANK": rank,
            "JSM_NAMESPACE_LOCAL_RANK": local,
            "LSB_JOBID": "1",
            "LSB_MCPU_HOSTS": " ".join(["batch", "1"] + [f"{h} {devices}" for h in hosts]),
        },
        "mpi": {
            "OMPI_COMM_WORLD_SIZE": size,
            "OMPI_COMM_WORLD_RANK": rank,
            "OMPI_COMM_WORLD_LOCAL_RANK": local,
            "OMPI_COMM_WORLD_LOCAL_SIZE": devices,
        },
        "kubeflow": {
            "WORLD_SIZE": size,
            "RANK": rank,
            "MASTER_ADDR": "master-0",
            "MASTER_PORT": "23456",
            "KUBERNETES_PORT": "tcp://10.0.0.1:443",
        },
        "local": {"LOCAL_RANK": local, "NODE_RANK": node},
    }[cluster]
    text = {name: str(value) for name, value in variables.items()}
    if rng.random() < 0.6:  # push one variable out of range, or make it garbage
        name = rng.choice(sorted(text))
        text[name] = rng.choice([str(rng.randint(-3, 12)), rng.choice(_TRICKY_TEXT), "", "abc"])
    flags = {"devices": devices, "num_nodes": nodes}
    if rng.random() < 0.3:
        flags["cluster_environment"] = cluster
    if rng.random() < 0.2:  # the flags disagree with the job
        flags[rng.choice(["devices", "num_nodes"])] = rng.randint(1, 5)
    environment = Environment(hostname=rng.choice(hosts), cuda_device_count=rng.choice([0, devices, 8]), variables=text)
    return flags, environment


def check_invariants(config: ResolvedConfig) -> None:
    assert 0 <= config.global_rank < config.world_size, config
    assert 0 <= config.local_rank < config.num_devices, config
    assert 0 <= config.node_rank < config.num_nodes, config
    assert len(config.device_ids) == config.num_devices, config
    assert config.world_size == config.num_nodes * config.num_devices, config


@FUZZ
@given(flags=flags, environment=environments())
def test_resolve_gives_a_consistent_config_or_a_resolution_error(flags: dict[str, Any], environment: Environment):
    try:
        config = resolve(**flags, environment=environment)
    except ResolutionError as error:
        assert error.message  # says what was wrong
        return
    check_invariants(config)


@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_cluster_ranks_in_and_out_of_range(rng: random.Random):
    flags, environment = cluster_job(rng)
    try:
        config = resolve(**flags, environment=environment)
    except ResolutionError as error:
        assert error.message
        return
    check_invariants(config)


@settings(FUZZ, max_examples=max(EXAMPLES // 10, 30))
@given(
    devices=st.one_of(
        st.sampled_from(["²", "①", "--2", "1" * 4301, "9" * 4300, "0x10", "1,,2", "٣,1"]), st.text(max_size=6)
    ),
    num_nodes=st.one_of(st.integers(min_value=-2, max_value=3).map(str), st.sampled_from(["²", "x"])),
    plugin=st.one_of(st.sampled_from(PLUGINS), st.text(max_size=5)),
)
def test_explain_never_shows_a_traceback(devices: str, num_nodes: str, plugin: str):
    argv = ["explain", f"--devices={devices}", f"--num-nodes={num_nodes}", f"--plugin={plugin}", "--simulate", "cuda=2"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse's usage errors
            code = exit.code
    assert code in (0, 1, 2)
    assert "Traceback" not in out.getvalue() + err.getvalue()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"environment": 5}, "environment=5 is not an Environment"),
        ({"environment": {"cuda_device_count": 2}}, "is not an Environment"),
        ({"environment": Environment(), "rules": 5}, "rules=5 is not a rule file"),
        ({"environment": Environment(), "rules": ["site.toml", 5]}, "rules=5 is not a rule file"),
        ({"environment": Environment(), "accelerator": 10**5000}, "more than 4300 digits"),
        ({"environment": Environment(), "devices": [0, 10**5000]}, "more than 4300 digits"),
        ({"environment": Environment(), "plugins": "slurm"}, "SLURM_NTASKS is not set"),  # one plugin, not letters
        ({"environment": Environment(), "plugins": 5}, "plugins=5 is not a list of plugin names"),
    ],
)
def test_wrong_arguments_are_resolution_errors(arguments: dict[str, Any], message: str):
    with pytest.raises(ResolutionError, match=re.escape(message)):
        resolve(**arguments)


@pytest.mark.parametrize("visible", ["²,1", "①", "--2,0", "1" * 4301, "0,٣"])
def test_odd_cuda_visible_devices_do_not_break_the_probe(visible: str):
    from resolver._snapshot.probes import _apply_visible_devices  # the driver's count filtered by the variable

    assert 0 <= _apply_visible_devices(4, {"CUDA_VISIBLE_DEVICES": visible}) <= 4
