"""What an accelerator declares in its own rule file, and what every other rule then reads from it.

Each accelerator says whether it is present (``accelerator.present.NAME``: every "available:" hint
lists it), which torch.distributed backend carries its tensors and whether FSDP and DeepSpeed run
on it (its case of ``accelerator.distributed``). An accelerator that does not say is refused when
the table loads, naming the accelerator and the file to add the case to: it no longer falls
through to gloo. The plugin example's ``npu`` (``tests/plugin_example``) is such a device, added
here through ``RESOLVER_RULES`` with its probe, as a site without a package would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from resolver import ConflictError, RuleTableError, load_rules, resolve

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = ROOT / "tests" / "plugin_example"

#: Run in a fresh process: the plugin's probe registers itself on import, for that process only.
_WITH_NPU = """
import json, resolver, npu_pbs_plugin  # registers the probe npu_device_count
from resolver import Environment, ResolutionError

def hint(**flags):
    try:
        resolver.resolve(environment=Environment(npu_device_count=2, deepspeed_available=True), **flags)
    except ResolutionError as error:
        return error.hint
    return None

def plan(**flags):
    config = resolver.resolve(environment=Environment(npu_device_count=2, deepspeed_available=True), **flags)
    return [config.accelerator, config.strategy, config.process_group_backend, list(config.device_ids)]

print(json.dumps({
    "cuda": hint(accelerator="cuda"),
    "xla": hint(accelerator="xla"),
    "mps": hint(accelerator="mps"),
    "gpu": hint(accelerator="gpu"),
    "fsdp": plan(accelerator="npu", devices=2, strategy="fsdp"),
    "deepspeed": plan(accelerator="npu", devices=2, strategy="deepspeed"),
    "ddp": plan(devices=[1], strategy="ddp"),
}))
"""


@pytest.fixture(scope="module")
def with_npu() -> dict[str, object]:
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(PLUGIN), os.environ.get("PYTHONPATH", str(ROOT))]),
        "RESOLVER_RULES": str(PLUGIN / "npu_pbs_plugin" / "rules"),
        "RESOLVER_DISABLE_PLUGINS": "1",  # the rules come from the variable, not an installed package
    }
    done = subprocess.run(
        [sys.executable, "-c", _WITH_NPU], env=environ, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("asked", ["cuda", "xla", "mps", "gpu"])
def test_a_plugin_accelerator_is_in_every_available_hint(with_npu, asked):
    assert "available: [npu, cpu]" in str(with_npu[asked])


def test_fsdp_and_deepspeed_run_on_a_device_that_declares_them(with_npu):
    assert with_npu["fsdp"] == ["npu", "fsdp", "gloo", [0, 1]]
    assert with_npu["deepspeed"] == ["npu", "deepspeed", "gloo", [0, 1]]
    assert with_npu["ddp"] == ["npu", "ddp", "gloo", [1]]  # devices=[1]: the table's ids case


def _site(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


_TPU2 = """
    [domain.accelerator]
    values = ["tpu2"]

    [slot."accelerator.present.tpu2"]
    stage = "placed"
    type = "bool"
    default = false

    [[rule]]
    id = "accelerator.present.tpu2"
    stage = "placed"
    when = { "var.TPU2_VISIBLE" = { set = true } }
    set = { "accelerator.present.tpu2" = true }
    why = "TPU2_VISIBLE is set"
"""


#: The device checks every accelerator answers (each `cases_complete`): its own, or `none` and why.
_TPU2_DEVICES = """
    [cases."accelerator.unavailable"]
    tpu2 = { when = { "var.TPU2_VISIBLE" = { set = false } }, conflict = "no TPU2 here", hint = "set TPU2_VISIBLE" }
    [cases."devices.all"]
    tpu2 = { none = "one device" }
    [cases."devices.auto"]
    tpu2 = { none = "one device" }
    [cases."devices.too_many"]
    tpu2 = { none = "one device" }
"""


def test_an_accelerator_without_its_torch_distributed_case_does_not_load(tmp_path):
    site = _site(tmp_path, _TPU2)
    with pytest.raises(RuleTableError) as info:
        resolve(rules=[str(site)])
    message = str(info.value)
    assert "accelerator 'tpu2' has no case of rule 'accelerator.distributed'" in message
    assert f'add [cases."accelerator.distributed"] tpu2 = {{ ... }} to {site}' in message
    assert info.value.file == str(site)


def test_a_site_accelerator_with_its_case_is_listed_and_refused_by_fsdp(tmp_path):
    site = _site(
        tmp_path,
        _TPU2 + '\n    [cases."accelerator.distributed"]\n'
        '    tpu2 = { set = { "accelerator.backend" = "gloo" }, why = "gloo carries its tensors" }\n'
        '    [cases."devices.count"]\n    tpu2 = {}\n'  # devices=N: the rule every accelerator shares
         + _TPU2_DEVICES,
    )
    from resolver import Environment

    machine = Environment(variables={"TPU2_VISIBLE": "1"})
    with pytest.raises(ConflictError) as info:
        resolve(accelerator="cuda", environment=machine, rules=[str(site)])
    assert "available: [cpu, tpu2]" in str(info.value.hint)  # no accelerator.auto.tpu2: after the others
    with pytest.raises(ConflictError) as refused:
        resolve(accelerator="tpu2", devices=2, strategy="fsdp", environment=machine, rules=[str(site)])
    assert refused.value.rule == "strategy.fsdp.accelerator"


def test_an_accelerator_without_its_device_checks_does_not_load(tmp_path):
    distributed = '\n    [cases."accelerator.distributed"]\n    tpu2 = { set = { "accelerator.backend" = "gloo" } }\n'
    site = _site(tmp_path, _TPU2 + distributed)
    with pytest.raises(RuleTableError) as info:
        resolve(rules=[str(site)])
    message = str(info.value)
    assert "accelerator 'tpu2' has no case of rule 'accelerator.unavailable'" in message
    assert f'add [cases."accelerator.unavailable"] tpu2 = {{ ... }} to {site}' in message
    assert info.value.file == str(site)


def test_a_device_check_an_accelerator_answers_with_none_is_not_there(tmp_path):
    distributed = '\n    [cases."accelerator.distributed"]\n    tpu2 = { set = { "accelerator.backend" = "gloo" } }\n'
    site = _site(tmp_path, _TPU2 + distributed + _TPU2_DEVICES)
    table = load_rules([str(site)])
    assert "accelerator.tpu2.unavailable" in table.rules and "devices.tpu2.all" not in table.rules
    with pytest.raises(ConflictError) as info:
        resolve(accelerator="tpu2", rules=[str(site)])
    assert info.value.rule == "accelerator.tpu2.unavailable" and info.value.hint == "set TPU2_VISIBLE"


def test_none_stands_alone_and_names_a_value(tmp_path):
    both = _site(tmp_path, '[cases."devices.all"]\ncuda = { none = "why", why = "also" }\n')
    with pytest.raises(RuleTableError, match="`none` stands alone"):
        load_rules([str(both)])
    typo = _site(tmp_path, '[cases."devices.all"]\ncuad = { none = "why" }\n')
    with pytest.raises(RuleTableError, match="'cuad' is not a value of 'accelerator'; did you mean 'cuda'"):
        load_rules([str(typo)])


def test_a_backend_without_its_case_does_not_load(tmp_path):
    site = _site(
        tmp_path,
        """
        [domain.process_group_backend]
        values = ["hccl"]
        """,
    )
    with pytest.raises(RuleTableError) as info:
        resolve(rules=[str(site)])
    assert "accelerator.backend 'hccl' has no case of rule 'backend'" in str(info.value)
    assert info.value.file == str(site)


def test_slots_of_out_of_place_is_refused_when_the_table_loads(tmp_path):
    site = _site(
        tmp_path,
        """
        [[rule]]
        id = "site.available"
        stage = "placed"
        set."accelerators.available".fn = "available_accelerators"
        set."accelerators.available".args = [{ slots_of = "accelerator.present" }, { order_of = "accelerator.auto" }]
        priority = 10
        why = "the order written the other way round"
        """,
    )
    with pytest.raises(RuleTableError) as info:
        resolve(rules=[str(site)])
    assert "passes { slots_of } as argument 1 of 2: it must be the last" in str(info.value)
    assert info.value.file == str(site)
