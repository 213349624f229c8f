"""Components are found by name in registries; users add their own without editing the library."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import attrs
import pytest
from runtime_configs import ddp_config, single_device_config

import runtime
from runtime.catalog import BUILTINS
from runtime.errors import INSTALL_HINTS
from runtime.registry import COLLECTIVES, LAUNCHERS, STRATEGIES, Registry


@attrs.frozen(kw_only=True)
class GreetingOptions(runtime.StrategyOptions):
    greeting: str = "hello"


class MyStrategy(runtime.Strategy):
    """A user's strategy: single process, remembers an option of its own."""

    Options = GreetingOptions

    @property
    def greeting(self) -> str:
        return self.options.greeting


@pytest.fixture
def my_strategy():  # type: ignore[no-untyped-def]
    runtime.register_strategy("my_strategy", MyStrategy)
    yield MyStrategy
    STRATEGIES.unregister("my_strategy")


def test_a_registered_custom_strategy_is_built_from_a_config_naming_it(my_strategy: type) -> None:
    config = single_device_config(strategy="my_strategy", strategy_options={"greeting": "hi"})

    strategy = runtime.build(config)

    assert type(strategy) is my_strategy
    assert strategy.greeting == "hi"
    assert isinstance(strategy.accelerator, runtime.Accelerator)
    assert isinstance(strategy.collective, runtime.Collective)
    assert strategy.launch(lambda s, x: (s.global_rank, x * 2), 21) == (0, 42)


def test_register_strategy_works_as_a_decorator() -> None:
    @runtime.register_strategy("decorated_strategy")
    class Decorated(runtime.Strategy):
        pass

    try:
        assert type(runtime.build(single_device_config(strategy="decorated_strategy"))) is Decorated
    finally:
        STRATEGIES.unregister("decorated_strategy")


def test_a_name_cannot_be_registered_twice_unless_replacing(my_strategy: type) -> None:
    with pytest.raises(ValueError, match="already registered"):
        runtime.register_strategy("my_strategy", type("Other", (runtime.Strategy,), {}))
    runtime.register_strategy("my_strategy", my_strategy, replace=True)


def test_an_unknown_strategy_name_lists_the_registered_ones() -> None:
    with pytest.raises(runtime.RuntimeConfigError) as error:
        runtime.build(single_device_config(strategy="ddp_turbo"))
    message = str(error.value)
    assert "unknown strategy 'ddp_turbo'" in message
    assert "'ddp'" in message and "'single_device'" in message
    assert "register_strategy('ddp_turbo')" in message


@pytest.mark.parametrize(
    ("strategy", "package", "fix"),
    [
        ("xla", "torch_xla", "pip install"),
        ("single_xla", "torch_xla", "pip install"),
        ("horovod", "horovod", "scripts/build-horovod.sh"),
    ],
)
def test_strategies_of_engines_not_installed_say_what_to_install(strategy: str, package: str, fix: str) -> None:
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(runtime.MissingDependencyError) as error:
        runtime.build(ddp_config(strategy=strategy))
    assert f"strategy '{strategy}' needs {package}, which is not installed" in str(error.value)
    assert fix in str(error.value)


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed here")
def test_components_of_missing_engines_say_what_to_install() -> None:
    with pytest.raises(runtime.MissingDependencyError, match="accelerator 'xla' needs torch_xla"):
        runtime.build(ddp_config(accelerator="xla"))
    with pytest.raises(runtime.MissingDependencyError, match="launcher 'xla' needs torch_xla"):
        runtime.build(ddp_config(launcher="xla"))


def test_the_horovod_install_hint_is_the_catalogues_for_every_component_and_the_rules_say_it_too() -> None:
    hint = INSTALL_HINTS["horovod"]
    assert "scripts/build-horovod.sh" in hint
    assert {BUILTINS[kind]["horovod"][1:] for kind in ("strategy", "collective", "launcher")} == {("horovod", hint)}
    assert runtime.MissingDependencyError("the horovod runtime", "horovod").install == hint  # the components' checks
    # The resolver's rule (it cannot import the runtime) says the same before anything is built.
    rules = Path(__file__).resolve().parents[2] / "rules"
    said = [
        rule["hint"]
        for path in rules.rglob("*.toml")
        for rule in tomllib.loads(path.read_text(encoding="utf-8")).get("rule", [])
        if rule.get("id") == "strategy.horovod.not_installed"
    ]
    assert len(said) == 1 and said[0].startswith(hint)


@pytest.mark.skipif(importlib.util.find_spec("horovod") is not None, reason="horovod is installed here")
def test_looking_up_any_horovod_component_without_horovod_says_how_to_build_it() -> None:
    for registry in (STRATEGIES, COLLECTIVES, LAUNCHERS):
        with pytest.raises(runtime.MissingDependencyError) as error:
            registry.get("horovod")
        assert f"{registry.kind} 'horovod' needs horovod, which is not installed" in str(error.value)
        assert error.value.install == INSTALL_HINTS["horovod"]


def test_unknown_strategy_options_are_rejected_with_the_accepted_ones() -> None:
    with pytest.raises(runtime.RuntimeConfigError) as error:
        runtime.build(single_device_config(strategy_options={"find_unused_parameters": True}))
    assert "'find_unused_parameters'" in str(error.value)
    assert "use_distributed_sampler" in str(error.value)


def test_ddp_takes_distributed_data_parallel_arguments_as_options() -> None:
    strategy = runtime.build(ddp_config(), find_unused_parameters=True, use_distributed_sampler=False)
    assert strategy.ddp_options == {"find_unused_parameters": True}  # type: ignore[attr-defined]
    assert strategy.use_distributed_sampler is False
    assert strategy.config.strategy_options["find_unused_parameters"] is True  # travels to the ranks
    with pytest.raises(runtime.RuntimeConfigError, match="'find_unsused_parameters'"):
        runtime.build(ddp_config(), find_unsused_parameters=True)


def test_strategy_options_of_the_wrong_type_are_rejected_naming_the_option() -> None:
    with pytest.raises(
        runtime.RuntimeConfigError, match=r"strategy 'ddp' got an invalid option: .*strategy_options.timeout"
    ):
        runtime.build(ddp_config(), timeout="soon")
    with pytest.raises(runtime.RuntimeConfigError, match=r"strategy_options.find_unused_parameters"):
        runtime.build(ddp_config(), find_unused_parameters="yes")


def test_options_are_declared_once_as_an_attrs_class() -> None:
    strategy = runtime.build(ddp_config(), timeout=5, static_graph=True)
    assert strategy.options == runtime.strategies.DDPOptions(timeout=5.0, static_graph=True)
    assert strategy.timeout == 5.0 and strategy.ddp_options == {"static_graph": True}  # type: ignore[attr-defined]


def test_every_component_kind_has_its_own_registry() -> None:
    from runtime import registry

    assert {"single_device", "ddp"} <= set(registry.STRATEGIES)
    assert {"cpu", "cuda", "mps"} <= set(registry.ACCELERATORS)
    assert {"32-true", "64-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"} == set(registry.PRECISIONS)
    assert {"torch", "single_device"} <= set(registry.COLLECTIVES)
    assert {"subprocess", "spawn", "fork"} <= set(registry.LAUNCHERS)
    assert {"local", "torchelastic", "slurm", "lsf", "mpi", "kubeflow"} <= set(registry.CLUSTER_ENVIRONMENTS)


def test_a_registry_only_holds_classes() -> None:
    with pytest.raises(TypeError, match="register a class"):
        Registry[object]("widget").register("thing", object())


# Each registry's state is process-wide: the questions about what is imported when, and about a
# user's class replacing a built-in before its first look-up, are asked of a fresh process.
_FRESH = """
import json, sys
import runtime
from runtime import registry
from runtime.catalog import BUILTINS
modules = {target.split(":")[0] for entries in BUILTINS.values() for target, _, _ in entries.values()}
before = sorted(modules & set(sys.modules))  # the built-in components imported so far

class MySpawn(runtime.Launcher):
    pass

class MyDDP(runtime.Strategy):
    pass

runtime.register_launcher("spawn", MySpawn, replace=True)   # before spawn's module is imported
runtime.register_strategy("ddp", MyDDP, replace=True)       # before the first look-up of ddp
import runtime.launchers.multiprocessing  # registers its own classes on import: spawn stays the user's
print(json.dumps({
    "before": before,
    "spawn": registry.LAUNCHERS.get("spawn").__name__,
    "fork": registry.LAUNCHERS.get("fork").__name__,
    "ddp": registry.STRATEGIES.get("ddp").__name__,
}))
"""


def test_built_ins_are_imported_on_their_first_look_up_and_a_users_class_replaces_one_beforehand() -> None:
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["before"] == [], "importing runtime imported built-in components"
    assert (seen["spawn"], seen["fork"], seen["ddp"]) == ("MySpawn", "ForkLauncher", "MyDDP")


def test_every_catalogue_entry_names_a_class_of_its_registry_s_kind() -> None:
    from runtime import registry
    from runtime.catalog import BUILTINS

    bases = {
        "strategy": runtime.Strategy,
        "accelerator": runtime.Accelerator,
        "precision": runtime.Precision,
        "collective": runtime.Collective,
        "launcher": runtime.Launcher,
        "cluster environment": runtime.ClusterEnvironment,
    }
    registries = {r.kind: r for r in vars(registry).values() if isinstance(r, Registry)}
    assert set(registries) == set(BUILTINS) == set(bases)
    for kind, entries in BUILTINS.items():
        for name, (target, package, _) in entries.items():
            if package is not None and importlib.util.find_spec(package) is None:
                with pytest.raises(runtime.MissingDependencyError, match=package):
                    registries[kind].get(name)
                continue
            cls = registries[kind].get(name)
            assert issubclass(cls, bases[kind]) and f"{cls.__module__}:{cls.__qualname__}" == target


@pytest.mark.parametrize(
    ("domain", "kind"),
    [
        ("strategy", "strategy"),
        ("accelerator", "accelerator"),
        ("precision", "precision"),
        ("collective", "collective"),
        ("launcher", "launcher"),
        ("cluster", "cluster environment"),
    ],
)
def test_every_value_the_rules_can_pick_has_a_catalogue_entry(domain: str, kind: str) -> None:
    """A value the built-in rules can decide (their domain) that the runtime cannot build would pass
    resolve() and fail only at runtime.build: each one must be named in runtime/catalog.py, and the
    catalogue must hold nothing the rules never pick."""
    import resolver

    table = resolver.load_rules()
    assert set(table.domains[domain]) == set(BUILTINS[kind]), (domain, kind)
