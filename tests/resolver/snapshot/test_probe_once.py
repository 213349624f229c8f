"""What ``Environment.probe()`` reads once per process and what it reads on every call.

Which packages are importable and the facts of ``per_process`` probes are read at the first probe
and kept (``probe(refresh=True)`` reads them again); variables are read on every probe. Run in a
child process: what a process keeps is the point, and the test process's own probes stay untouched.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import resolver
from resolver import Environment, resolve
from resolver._snapshot import probes as probing


def _child(script: str, tmp_path: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RESOLVER_"))}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_an_installed_package_is_seen_after_refresh_and_variables_on_every_probe(tmp_path):
    packages = {"horovod": "horovod_available", "mpi4py": "mpi4py_available", "torch_xla": "torch_xla_available"}
    missing = [name for name in packages if not probing.module_available(name)]
    if not missing:
        pytest.skip("horovod, mpi4py and torch_xla are all installed: none can be installed while the test runs")
    package, fact = missing[0], packages[missing[0]]
    (tmp_path / "site" / package).mkdir(parents=True)
    (tmp_path / "site" / package / "__init__.py").write_text("")
    script = f"""
        import os, sys
        from resolver import Environment, resolve

        print(Environment.probe().{fact})
        sys.path.insert(0, {str(tmp_path / "site")!r})  # {package} "installed" while the process runs
        print(Environment.probe().{fact})
        print(Environment.probe(refresh=True).{fact}, Environment.probe().{fact})
        os.environ["SLURM_NTASKS"] = "2"
        print(Environment.probe().variables.get("SLURM_NTASKS"))
        os.environ["SLURM_NTASKS"] = "3"
        print(Environment.probe().variables.get("SLURM_NTASKS"))
        del os.environ["SLURM_NTASKS"]
        os.environ["RESOLVER_DEVICES"] = "3"
        print(resolve().num_devices)
        """
    assert _child(script, tmp_path) == ["False", "False", "True True", "2", "3", "3"]


def test_a_per_process_probe_is_called_once_until_refresh(tmp_path):
    script = """
        import resolver
        from resolver import Environment

        calls = []

        @resolver.register_probe("npu_device_count", default=0, per_process=True)
        def npu_device_count(environ):
            calls.append(1)
            return 4

        @resolver.register_probe("npu_temperature", default=0)
        def npu_temperature(environ):
            return len(calls) * 10

        first, second = Environment.probe(), Environment.probe()
        print(first.npu_device_count, second.npu_device_count, len(calls), second.npu_temperature)
        print(Environment.probe(refresh=True).npu_device_count, len(calls))
        """
    assert _child(script, tmp_path) == ["4 4 1 10", "4 2"]


def test_probing_the_same_machine_twice_gives_equal_snapshots():
    first, second = Environment.probe(), Environment.probe()
    assert first == second and hash(first) == hash(second)
    assert Environment.probe({"SLURM_NTASKS": "2"}) != first


def test_a_snapshot_resolves_alike_under_two_tables_and_again(tmp_path):
    """A snapshot keeps the inputs it was read into for one table: another table reads its own."""
    site = tmp_path / "site.toml"
    site.write_text(
        '[[rule]]\nid = "site.pbs"\nstage = "placed"\nwhen = { "var.PBS_JOBID" = { set = true } }\n'
        'note = "PBS job {var.PBS_JOBID}"\n'
    )
    env = Environment(variables={"PBS_JOBID": "17"}, cuda_device_count=2)
    plain = resolve(environment=env)
    with_site = resolve(environment=env, rules=[site])
    assert plain.notes == () and with_site.notes == ("PBS job 17",)
    assert resolve(environment=env) == plain and resolve(environment=env, rules=[site]) == with_site
    assert with_site.provenance["num_devices"] == plain.provenance["num_devices"]
    assert resolve(environment=Environment(variables={"PBS_JOBID": "18"}), rules=[site]).notes == ("PBS job 18",)


def test_a_config_pickles_with_the_provenance_it_shows():
    config = resolve(devices=2, strategy="ddp", environment=Environment(variables={"MASTER_PORT": "1234"}))
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and hash(copy) == hash(config)
    assert dict(copy.provenance) == dict(config.provenance)
    assert copy.to_json() == config.to_json()
    decoded = resolver.ResolvedConfig.from_json(config.to_json())
    assert decoded == config and dict(decoded.provenance) == dict(config.provenance)
    assert decoded.to_json() == config.to_json()
