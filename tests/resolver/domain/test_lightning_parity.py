"""Resolutions that follow PyTorch Lightning 2.x (issue 22, "Correctness and trust"): torchrun's
detection, SLURM host lists, the LSF port, what a device list may hold, Lightning's other strategy
names, a multi-process strategy without a launcher, and the removed flags on the command line."""

from __future__ import annotations

import pytest

from resolver import Environment, ResolutionError, resolve

TORCHRUN = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
SRUN = {"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "4242"}


# -- torchrun is TORCHELASTIC_RUN_ID (torch.distributed.is_torchelastic_launched) --------------------


def test_torchrun_inside_a_slurm_allocation_is_torchrun():
    """SLURM variables without SLURM_PROCID used to win (and fail as "not started by srun")."""
    env = Environment(variables={**SRUN, **TORCHRUN, "TORCHELASTIC_RUN_ID": "run-7", "MASTER_ADDR": "n1"})
    config = resolve(devices=2, environment=env)
    assert (config.cluster_environment, config.launcher) == ("torchelastic", None)
    assert (config.world_size, config.global_rank, config.local_rank) == (2, 1, 1)


def test_torchrun_variables_without_the_run_id_are_a_local_worker():
    config = resolve(devices=2, environment=Environment(variables=TORCHRUN))
    assert (config.cluster_environment, config.launcher) == ("local", None)
    assert (config.global_rank, config.local_rank, config.node_rank) == (1, 1, 0)


def test_the_run_id_alone_is_torchrun_and_names_every_missing_variable():
    with pytest.raises(ResolutionError) as info:
        resolve(environment=Environment(variables={"TORCHELASTIC_RUN_ID": "run-7"}))
    assert info.value.rule == "cluster.torchelastic.missing"
    assert "not set: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (" in info.value.message


@pytest.mark.parametrize("missing", sorted(TORCHRUN))
def test_the_torchelastic_error_names_exactly_the_missing_variable(missing: str):
    variables = {k: v for k, v in TORCHRUN.items() if k != missing}
    with pytest.raises(ResolutionError) as info:
        resolve(devices=2, cluster_environment="torchelastic", environment=Environment(variables=variables))
    assert info.value.rule == "cluster.torchelastic.missing"
    assert f"are not set: {missing} (" in info.value.message


def test_the_torchelastic_error_names_two_missing_variables_and_not_the_others():
    variables = {k: v for k, v in TORCHRUN.items() if k not in ("WORLD_SIZE", "GROUP_RANK")}
    env = Environment(variables={**variables, "TORCHELASTIC_RUN_ID": "run-7"})
    with pytest.raises(ResolutionError) as info:
        resolve(devices=2, environment=env)
    assert "are not set: WORLD_SIZE, GROUP_RANK (" in info.value.message


# -- SLURM host lists, as SLURM writes them --------------------------------------------------------


def _srun(nodelist: str) -> Environment:
    return Environment(
        variables={
            "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0", "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NODELIST": nodelist,
        }
    )  # fmt: skip


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("alpha beta gamma", "alpha"),  # spaces, as some sites write it
        ("alpha,beta", "alpha"),
        ("gpu[007-009,012] cpu1", "gpu007"),  # padding kept
        ("node[3-5,9]", "node3"),  # several ranges in one bracket
        ("rack[2-3]-n[01-04]", "rack2-n01"),  # several brackets in one name
        ("\talpha\n", "alpha"),
    ],
)
def test_rank_0_runs_on_the_first_host_of_the_slurm_node_list(nodelist: str, first: str):
    assert resolve(devices=1, num_nodes=2, environment=_srun(nodelist)).main_address == first


@pytest.mark.parametrize(
    ("nodelist", "problem"),
    [("node[1-3", "leaves a bracket open"), ("node1-3]", "closes a bracket"), ("node[a-c]", "not a list of numbers")],
)
def test_a_malformed_slurm_node_list_is_an_error_naming_it(nodelist: str, problem: str):
    with pytest.raises(ResolutionError) as info:
        resolve(devices=1, num_nodes=2, environment=_srun(nodelist))
    assert problem in info.value.message and nodelist in info.value.message
    assert "MASTER_ADDR" in (info.value.hint or "")


# -- LSF's port: Lightning's formula, so that its processes and ours meet --------------------------


def test_the_lsf_port_is_10000_plus_the_job_id_modulo_1000():
    env = Environment(
        hostname="c1",
        variables={
            "LSB_JOBID": "123456", "LSB_DJOB_RANKFILE": "/ranks", "JSM_NAMESPACE_SIZE": "1",
            "JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_LOCAL_RANK": "0",
        },
        files={"LSB_DJOB_RANKFILE": "launch\nc1\n"},
    )  # fmt: skip
    config = resolve(devices=1, environment=env)
    assert (config.cluster_environment, config.main_address, config.main_port) == ("lsf", "c1", 10456)


# -- a device list holds integers, whichever way it arrives ---------------------------------------


@pytest.mark.parametrize(
    ("devices", "toml"), [(["0"], '["0"]'), ([0, "1"], '[0, "1"]'), ([True], "[true]"), ([1.5], "[1.5]")]
)
def test_a_device_list_of_anything_but_integers_is_refused(devices: list, toml: str, tmp_path):
    env = Environment(cuda_device_count=2)
    with pytest.raises(ResolutionError) as keyword:
        resolve(devices=devices, environment=env)
    assert "a list of device ids holds integers" in keyword.value.message
    assert "devices='0,1'" in (keyword.value.hint or "")
    # the same rule, and the same words, for the same value read from a flags file
    (tmp_path / "flags.toml").write_text(f"[flags]\ndevices = {toml}\n")
    with pytest.raises(ResolutionError) as from_file:
        resolve(config_file=tmp_path / "flags.toml", environment=env)
    assert (from_file.value.rule, from_file.value.message) == (keyword.value.rule, keyword.value.message)


def test_device_ids_as_integers_or_one_string_still_work():
    env = Environment(cuda_device_count=4)
    assert resolve(devices=[0, 2], environment=env).device_ids == (0, 2)
    assert resolve(devices=(3,), environment=env).device_ids == (3,)
    assert resolve(devices="1, 3", environment=env).device_ids == (1, 3)


# -- Lightning's other strategy names: each works, or names what to use --------------------------

TPU_HOST = Environment(xla_device_count=8, torch_xla_available=True)


def test_deepspeed_stage_1_offload_is_zero_1_with_the_optimizer_on_the_cpu():
    config = resolve(
        strategy="deepspeed_stage_1_offload", environment=Environment(cuda_device_count=2, deepspeed_available=True)
    )
    assert config.strategy == "deepspeed"
    assert dict(config.strategy_options) == {"stage": 1, "offload_optimizer": True}


def test_deepspeed_stage_1_offload_makes_a_deepspeed_config():
    pytest.importorskip("torch")
    from runtime.strategies import DeepSpeedOptions
    from runtime.strategies.deepspeed_config import deepspeed_config

    options = resolve(strategy="deepspeed_stage_1_offload", environment=Environment(deepspeed_available=True))
    zero = deepspeed_config(DeepSpeedOptions(**options.strategy_options), {}, pin_memory=False)["zero_optimization"]
    assert zero["stage"] == 1 and zero["offload_optimizer"]["device"] == "cpu"


def test_single_tpu_is_single_xla_with_a_note():
    config = resolve(strategy="single_tpu", devices=1, environment=TPU_HOST)
    assert config.strategy == "single_xla"
    assert any("old name of 'single_xla'" in note for note in config.notes)


@pytest.mark.parametrize(
    ("name", "instead"),
    [
        ("dp", "strategy='ddp'"),
        ("xla_fsdp", "strategy='xla'"),
        ("xla_debug", "strategy='xla' and export PT_XLA_DEBUG=1"),
    ],
)
def test_a_lightning_strategy_without_a_strategy_here_names_the_replacement(name: str, instead: str):
    with pytest.raises(ResolutionError) as info:
        resolve(strategy=name, environment=TPU_HOST)
    assert info.value.rule == f"strategy.replaced.{name}"
    assert f"strategy='{name}'" in info.value.message and "unknown" not in info.value.message
    assert instead in (info.value.hint or "")


def test_replaced_names_are_not_offered_for_a_typo():
    with pytest.raises(ResolutionError) as info:
        resolve(strategy="xla_fsdpp", environment=TPU_HOST)
    assert info.value.rule == "flag.strategy.unknown"
    assert "xla_fsdp'" not in info.value.message and "xla_fsdp'" not in (info.value.hint or "")


# -- a multi-process strategy nobody starts: a conflict, not a hang in the runtime ----------------

MY_STRATEGY = """
[domain.strategy]
values = ["my_strategy"]

[[rule]]
id = "site.my_strategy.collective"
stage = "planned"
when = { strategy = "my_strategy" }
set = { collective = "torch" }
why = "my_strategy talks through torch.distributed"
"""


@pytest.fixture
def my_strategy(tmp_path) -> list:
    (tmp_path / "site.toml").write_text(MY_STRATEGY)
    return [tmp_path / "site.toml"]


def test_a_strategy_without_a_launcher_rule_is_a_conflict(my_strategy):
    """docs/usage.md's my_strategy with devices=2 resolved to no launcher and failed in the runtime."""
    with pytest.raises(ResolutionError) as info:
        resolve(strategy="my_strategy", devices=2, rules=my_strategy, environment=Environment())
    assert info.value.rule == "launcher.missing"
    assert "strategy='my_strategy' asks for 2 processes on this machine" in info.value.message
    hint = info.value.hint or ""
    assert '[domain.torch_distributed_strategy] values = ["my_strategy"]' in hint
    assert 'set = { launcher = "subprocess" }' in hint


def test_the_conflict_s_two_fixes_both_work(my_strategy, tmp_path):
    family = tmp_path / "family.toml"
    family.write_text('[domain.torch_distributed_strategy]\nvalues = ["my_strategy"]\n')
    launcher = tmp_path / "launcher.toml"
    launcher.write_text(
        '[[rule]]\nid = "site.my_strategy.launcher"\nstage = "planned"\nwhen = { strategy = "my_strategy" }\n'
        'set = { launcher = "subprocess" }\nwhy = "re-run the script per device"\n'
    )
    # the family line replaces the site file's own rules (the family's rules decide the collective too)
    for rules in ([family], [*my_strategy, launcher]):
        config = resolve(strategy="my_strategy", devices=2, rules=rules, environment=Environment())
        assert (config.strategy, config.launcher, config.collective) == ("my_strategy", "subprocess", "torch")


@pytest.mark.parametrize(
    ("devices", "variables"),
    [
        (1, {}),  # one process: nothing to launch
        (2, {**SRUN, "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS_PER_NODE": "2"}),
        (2, {**TORCHRUN, "TORCHELASTIC_RUN_ID": "run-7", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}),
        (2, {"LOCAL_RANK": "1"}),  # a worker some launcher started
    ],
)
def test_no_launcher_is_right_where_something_else_starts_the_processes(my_strategy, devices, variables):
    config = resolve(
        strategy="my_strategy", devices=devices, rules=my_strategy, environment=Environment(variables=variables)
    )
    assert (config.strategy, config.launcher) == ("my_strategy", None)
