"""Open MPI for real: ``mpirun -np 2 python train.py`` trains without ``-x MASTER_ADDR``.

On one machine the ranks meet on 127.0.0.1 at a port each derives alike from the MPI job id; across
machines without ``MASTER_ADDR`` the resolver refuses (or, with mpi4py, rank 0 broadcasts its host).
Skipped where mpirun is missing (``apt-get install -y openmpi-bin``) unless RESOLVER_REQUIRE_CLUSTER=1.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import tempfile
from pathlib import Path

import pytest

import resolver
from resolver import ConflictError
from resolver.cli.simulate import simulate
from tests.support.mpi_support import ROOT, clean_environment, mpirun_command, run_job

pytestmark = pytest.mark.cluster


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _explain_each_rank(*mpirun_options: str) -> dict[int, dict]:
    """``mpirun [OPTIONS] -np 2 resolver explain --devices 2 --format json``, one JSON document per rank."""
    with tempfile.TemporaryDirectory(prefix="mpi-explain-") as folder:
        output = f"{folder}/rank-$OMPI_COMM_WORLD_RANK.json"
        each = f"{sys.executable} -m resolver explain --devices 2 --format json > {output}"
        command = mpirun_command(2, "sh", "-c", each)
        command[1:1] = list(mpirun_options)
        result = run_job(command, clean_environment())
        assert result.returncode == 0, f"resolver explain under mpirun failed:\n{result.stdout}\n{result.stderr}"
        documents = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in Path(folder).glob("rank-*.json")}
    return {rank: document["config"] for rank, document in documents.items()}


def test_mpirun_trains_without_rendezvous_variables():
    """The documented command (docs/usage.md, "MPI (mpirun)"): no -x MASTER_ADDR, no -x MASTER_PORT."""
    command = mpirun_command(2, sys.executable, "examples/train.py", "--devices", "2")
    result = run_job(command, clean_environment())
    assert result.returncode == 0, f"mpirun -np 2 train.py failed:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    summary = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert summary["world_size"] == 2 and summary["strategy"] == "ddp" and summary["launcher"] is None
    assert len(set(summary["checksums"])) == 1, f"the ranks' parameters differ after DDP: {summary['checksums']}"
    assert summary["final_loss"] < summary["initial_loss"]


def test_explain_under_mpirun_shows_the_rendezvous_and_where_it_came_from():
    configs = _explain_each_rank()
    assert sorted(configs) == [0, 1]
    ports = set()
    for rank, config in configs.items():
        assert (config["cluster_environment"], config["global_rank"], config["world_size"]) == ("mpi", rank, 2)
        assert config["main_address"] == "127.0.0.1"
        address = config["provenance"]["main_address"]
        assert address["rule"] == "main_address.mpi.one_node", address
        port = config["provenance"]["main_port"]
        assert port["rule"] == "main_port.mpi", port
        job_id = dict(port["inputs"])["var.OMPI_MCA_ess_base_jobid"]
        assert config["main_port"] == 15000 + int(job_id[-4:]), f"port {config['main_port']} from job id {job_id}"
        ports.add(config["main_port"])
    assert len(ports) == 1, f"the ranks derived different ports: {ports}"


def test_mpirun_x_master_addr_and_port_still_win():
    port = _free_port()
    configs = _explain_each_rank("-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}")
    for config in configs.values():
        assert (config["main_address"], config["main_port"]) == ("127.0.0.1", port)
        assert config["provenance"]["main_port"]["source"] == f"MASTER_PORT={port}"


def test_across_machines_without_master_addr_is_refused_with_the_mpirun_fix():
    """Open MPI 4.1 does not say which machine runs rank 0: without mpi4py the resolver says what to pass."""
    environment = simulate("mpi=2,nodes=2,node=1")
    with pytest.raises(ConflictError) as caught:
        resolver.resolve(devices=2, num_nodes=2, environment=environment)
    message = str(caught.value)
    assert caught.value.rule == "main_address.mpi.missing"
    assert "OMPI_COMM_WORLD_LOCAL_SIZE" in message and "mpi4py" in message
    assert "mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=<port>" in message

    given = resolver.resolve(
        devices=2, num_nodes=2, environment=simulate("mpi=2,nodes=2,node=1,MASTER_ADDR=node0,MASTER_PORT=29500")
    )
    assert (given.main_address, given.main_port, given.global_rank) == ("node0", 29500, 2)


def test_across_machines_with_mpi4py_rank_zero_broadcasts_its_host():
    config = resolver.resolve(devices=2, num_nodes=2, environment=simulate("mpi=2,nodes=2,node=1,mpi4py"))
    assert config.main_address is None
    assert config.provenance["main_address"].rule == "main_address.mpi.broadcast"
    assert config.main_port is not None  # from the job id, alike on every machine


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py is not installed (pip install mpi4py)")
def test_mpi4py_broadcast_gives_every_rank_rank_zeros_host(tmp_path: Path) -> None:
    """Two ranks that claim to be on separate machines learn rank 0's host name over MPI.

    Each rank writes its answer to its own file: under ``PYTHONUNBUFFERED`` a ``print`` is several
    writes, and mpirun interleaves two ranks' pieces on one line.
    """
    script = (
        "import os, socket, sys\n"
        "os.environ['OMPI_COMM_WORLD_LOCAL_SIZE'] = '1'; os.environ['OMPI_COMM_WORLD_LOCAL_RANK'] = '0'\n"
        "import resolver\n"
        "from runtime.cluster.mpi import MPIEnvironment\n"
        "config = resolver.resolve(devices=1, num_nodes=2)\n"
        "assert config.main_address is None, config.main_address\n"
        "rank = os.environ['OMPI_COMM_WORLD_RANK']\n"
        "with open(os.path.join(sys.argv[1], 'host-' + rank), 'w') as out:\n"
        "    out.write(MPIEnvironment(config).main_address + ' ' + socket.gethostname())\n"
    )
    result = run_job(mpirun_command(2, sys.executable, "-c", script, str(tmp_path)), clean_environment(), cwd=ROOT)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    hosts = {path.name: path.read_text().split() for path in tmp_path.glob("host-*")}
    assert sorted(hosts) == ["host-0", "host-1"], f"{hosts}\n{result.stdout}\n{result.stderr}"
    assert {found for found, _ in hosts.values()} == {socket.gethostname()}
