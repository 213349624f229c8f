"""Cluster environments: where the ranks of a run meet."""

from __future__ import annotations

import socket

import pytest
from runtime_configs import ddp_config

import resolver
import runtime
from resolver._domain.functions import first_host
from runtime._protocol.ports import port_is_free
from runtime.cluster import (
    KubeflowEnvironment,
    LocalEnvironment,
    LSFEnvironment,
    MPIEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)


def test_local_defaults_to_loopback_and_picks_one_free_port() -> None:
    local = LocalEnvironment(ddp_config(), environ={})
    assert local.main_address == "127.0.0.1"
    port = local.main_port
    assert port == local.main_port  # picked once
    assert port_is_free(port)
    assert "picked by the runtime" in local.main_port_source


def test_local_meets_where_master_addr_and_port_say_as_resolved() -> None:
    variables = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29511"}
    config = resolver.resolve(accelerator="cpu", devices=2, environment=resolver.Environment(variables=variables))
    local = LocalEnvironment(config, environ={})  # the resolver read the variables; the runtime reads the config
    assert (local.main_address, local.main_port, local.main_port_source) == ("10.1.2.3", 29511, "MASTER_PORT")


def test_local_multi_node_needs_the_rendezvous_named() -> None:
    with pytest.raises(resolver.ResolutionError, match="nothing says which machine runs rank 0") as error:
        resolver.resolve(accelerator="cpu", devices=2, num_nodes=2, environment=resolver.Environment())
    assert "export MASTER_ADDR=<address of node 0>" in str(error.value)
    built_by_hand = LocalEnvironment(ddp_config(num_nodes=2, world_size=4, main_address=None), environ={})
    for field in ("main_address", "main_port"):  # no port of its own pick: the nodes would not agree
        with pytest.raises(runtime.RuntimeConfigError, match=f"this config has no {field}: it was not produced by"):
            getattr(built_by_hand, field)


def test_a_port_that_is_not_a_number_is_named() -> None:
    variables = {"MASTER_PORT": "http"}
    with pytest.raises(resolver.ResolutionError, match="MASTER_PORT: 'http' is not an integer"):
        resolver.resolve(accelerator="cpu", devices=2, environment=resolver.Environment(variables=variables))


@pytest.mark.parametrize("cls", [TorchElasticEnvironment, KubeflowEnvironment, MPIEnvironment, SLURMEnvironment])
def test_a_cluster_meets_where_the_config_says_and_a_config_without_it_names_resolve(cls: type) -> None:
    env = cls(ddp_config(main_address="node0", main_port=1234), environ={})
    assert (env.main_address, env.main_port) == ("node0", 1234)
    # The variables are the resolver's to read (rules/rendezvous.toml, rules/clusters/), not the runtime's.
    variables = {"MASTER_ADDR": "node0", "MASTER_PORT": "1234", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "7"}
    built_by_hand = cls(ddp_config(main_address=None), environ=variables)
    for field in ("main_address", "main_port"):
        with pytest.raises(runtime.RuntimeConfigError, match=f"this config has no {field}: it was not produced by "):
            getattr(built_by_hand, field)
    with pytest.raises(runtime.RuntimeConfigError, match=r"hint: resolve the config with resolver\.resolve\(\)"):
        _ = built_by_hand.main_address


def test_a_resolved_config_that_found_no_rendezvous_says_what_the_rules_saw() -> None:
    # One SLURM task without the job's node list: resolve() leaves main_address unset (one node needs none
    # for itself), and a strategy that asks for it is told how to give it.
    slurm = resolver.Environment(
        variables={
            "SLURM_NTASKS": "1",
            "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0",
            "SLURM_JOB_NAME": "train",
        }  # fmt: skip
    )
    config = resolver.resolve(accelerator="cpu", devices=1, environment=slurm)
    assert config.cluster_environment == "slurm" and config.main_address is None
    with pytest.raises(
        runtime.RuntimeConfigError, match="resolver.resolve\\(\\) found nothing on SLURM that names it"
    ) as error:
        _ = SLURMEnvironment(config, environ={}).main_address
    assert "hint: run inside an allocation with srun, or export MASTER_ADDR and MASTER_PORT, or pass master_addr" in (
        str(error.value)
    )


@pytest.mark.parametrize(
    ("hostlist", "first"),
    [
        ("node1", "node1"),
        ("gpu[07-09,12],cpu1", "gpu07"),
        ("a,b", "a"),
        ("rack[2-3]-n[01-04]", "rack2-n01"),
        ("host[5,7]", "host5"),
        ("alpha beta gamma", "alpha"),
        ("  alpha\tbeta", "alpha"),
        ("gpu[007-009] cpu1", "gpu007"),
        (" ,node[1-3,5,7-8],x", "node1"),
    ],
)
def test_the_first_host_of_a_slurm_host_list(hostlist: str, first: str) -> None:
    assert first_host(hostlist) == first


def test_slurm_meets_on_the_first_node_at_a_port_derived_from_the_job_id() -> None:
    variables = {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
                 "SLURM_JOB_NAME": "train", "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_JOB_ID": "4242987"}  # fmt: skip
    config = resolver.resolve(accelerator="cpu", devices=2, environment=resolver.Environment(variables=variables))
    env = SLURMEnvironment(config, environ={})
    assert (env.main_address, env.main_port, env.main_port_source) == ("gpu03", 17987, "SLURM_JOB_ID")


def test_a_slurm_batch_script_is_not_one_of_the_jobs_tasks() -> None:
    batch = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    config = ddp_config(launcher=None, cluster_environment="slurm")
    with pytest.raises(runtime.RuntimeConfigError, match="batch script of SLURM job 4242, not one of its 2 tasks") as e:
        SLURMEnvironment(config, environ=batch).check_started_by_cluster()
    assert "srun python train.py" in str(e.value)
    SLURMEnvironment(config, environ={**batch, "SLURM_STEP_ID": "0"}).check_started_by_cluster()  # srun's task
    SLURMEnvironment(ddp_config(devices=1, launcher=None), environ=batch).check_started_by_cluster()  # alone
    mpirun = {**batch, "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}  # mpirun in the batch script
    with pytest.raises(runtime.RuntimeConfigError, match="a process mpirun started in the batch script") as e:
        SLURMEnvironment(config, environ=mpirun).check_started_by_cluster()
    assert "cluster_environment='mpi'" in str(e.value)


def test_lsf_meets_on_the_first_compute_host_of_the_rank_file() -> None:
    config = resolver.resolve(devices=1, environment=_lsf_job("1001", "batch1\ncompute7\ncompute8\n", "compute7"))
    env = LSFEnvironment(config, environ={})  # the rank file is read by the resolver only
    assert (env.main_address, env.main_port) == ("compute7", 10001)  # Lightning's 10000 + LSB_JOBID % 1000


def _lsf_job(job_id: str, rankfile: str, host: str = "c1") -> resolver.Environment:
    return resolver.Environment(
        hostname=host,
        variables={
            "LSB_JOBID": job_id,
            "LSB_DJOB_RANKFILE": "/r",
            "JSM_NAMESPACE_SIZE": "1",
            "JSM_NAMESPACE_RANK": "0",
            "JSM_NAMESPACE_LOCAL_RANK": "0",
            "LSB_MCPU_HOSTS": f"batch 1 {host} 4",
        },
        files={"LSB_DJOB_RANKFILE": rankfile},
    )


def test_ranks_started_by_hand_must_agree_on_master_port() -> None:
    started_by_hand = ddp_config(launcher=None)
    with pytest.raises(runtime.RuntimeConfigError, match="this config has no main_port"):
        _ = LocalEnvironment(started_by_hand, environ={"MASTER_PORT": "29400"}).main_port
    assert LocalEnvironment(ddp_config(launcher=None, main_port=29400), environ={}).main_port == 29400


def test_lsf_derives_the_port_from_the_job_id_as_lightning_does() -> None:
    config = resolver.resolve(devices=1, environment=_lsf_job("4242987", "batch\nc1\n"))
    assert config.main_port == 10000 + 4242987 % 1000 == 10987
    assert LSFEnvironment(config, environ={}).main_port == config.main_port
    with pytest.raises(resolver.ResolutionError, match="LSB_JOBID='x' is not an LSF job id"):
        resolver.resolve(devices=1, environment=_lsf_job("x", "batch\nc1\n"))


def test_a_job_id_with_non_ascii_digits_still_gives_a_port() -> None:
    from resolver._domain.functions import port_from_job_id

    assert port_from_job_id("4321") == 15000 + 4321
    assert port_from_job_id("job²①7") == 15000 + 7  # "²" and "①" are digits to str.isdigit, not to int
    assert port_from_job_id("interactive") == 15000


def test_the_runtime_meets_where_the_resolver_said_without_reading_variables() -> None:
    slurm = resolver.Environment(
        cuda_device_count=4,
        variables={
            "SLURM_NTASKS": "8",
            "SLURM_NNODES": "2",
            "SLURM_PROCID": "5",
            "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1",
            "SLURM_JOB_ID": "4242",
            "SLURM_NTASKS_PER_NODE": "4",
            "SLURM_JOB_NAME": "train",
            "SLURM_JOB_NODELIST": "gpu[01-02]",
        },
    )
    config = resolver.resolve(devices=4, num_nodes=2, environment=slurm)
    assert (config.main_address, config.main_port) == ("gpu01", 19242)
    assert config.provenance["main_port"].rule == "main_port.slurm"
    env = SLURMEnvironment(config, environ={})  # the variables are not read again at run time
    assert (env.main_address, env.main_port) == ("gpu01", 19242)


def test_flags_name_the_rendezvous_of_a_run_started_by_hand() -> None:
    config = resolver.resolve(
        accelerator="cpu",
        num_nodes=2,
        node_rank=1,
        master_addr="Node0",
        master_port=29511,
        environment=resolver.Environment(),
    )
    env = LocalEnvironment(config, environ={})
    assert (env.main_address, env.main_port, config.node_rank) == ("Node0", 29511, 1)
    assert env.main_port_source == "master_port"


def test_node_0_listens_on_the_rendezvous_port_before_rank_0_and_its_store_serves_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rank quicker than rank 0 used to be refused, and torch's client backed off for up to seconds.
    import threading
    from datetime import timedelta

    import torch.distributed as dist

    from runtime._protocol.ports import find_free_port, listen_on_rendezvous_port, store_socket_variables
    from runtime.collectives.torch_rendezvous import rendezvous_store

    port = find_free_port()
    assert listen_on_rendezvous_port("127.0.0.1", port, "MASTER_PORT", 1, one_machine=False) is None  # not node 0
    listening = listen_on_rendezvous_port("127.0.0.1", port, "MASTER_PORT", 0, one_machine=False)
    assert listening is not None
    with listening, socket.create_connection(("127.0.0.1", port), timeout=10):
        assert listening.getsockname()[0] in ("0.0.0.0", "::")  # other nodes connect to it
    # On one machine: on loopback alone (named by /etc/hosts: torch's log line makes no DNS query).
    listening = listen_on_rendezvous_port("127.0.0.1", port, "MASTER_PORT", 0, one_machine=True)
    assert listening is not None
    with listening:
        assert listening.getsockname()[0] == "127.0.0.1"
        with pytest.raises(runtime.PortInUseError, match=f"port {port} on 127.0.0.1 .from MASTER_PORT. is already"):
            listen_on_rendezvous_port("127.0.0.1", port, "MASTER_PORT", 0, one_machine=True)
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass  # no store yet, and the peer is queued, not refused
        for name, value in store_socket_variables(listening).items():
            monkeypatch.setenv(name, value)
        peer: list[object] = []

        def connect_first() -> None:
            client = dist.TCPStore("127.0.0.1", port, 2, is_master=False, timeout=timedelta(seconds=30))
            client.set("peer", "here")
            peer.append(client)

        thread = threading.Thread(target=connect_first)
        thread.start()
        store = rendezvous_store("127.0.0.1", port, rank=0, world_size=2, timeout=30)
        thread.join(30)
        assert store.get("peer") == b"here"
        del store, peer[:]
