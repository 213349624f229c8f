"""Precision plugins: what each canonical precision does to modules, inputs, forward and backward."""

from __future__ import annotations

import warnings

import pytest
import torch
from runtime_configs import single_device_config

import runtime
from runtime.accelerators import CPUAccelerator, CUDAAccelerator
from runtime.precision import Float16MixedPrecision, MixedPrecision, Precision


def build_precision(name: str) -> Precision:
    return runtime.build(single_device_config(precision=name)).precision


def test_32_true_changes_nothing() -> None:
    precision = build_precision("32-true")
    module = precision.convert_module(torch.nn.Linear(3, 3))
    with precision.forward_context():
        out = module(precision.convert_input(torch.ones(1, 3)))
    assert next(module.parameters()).dtype == torch.float32 and out.dtype == torch.float32


@pytest.mark.parametrize(
    ("name", "dtype"), [("64-true", torch.float64), ("16-true", torch.float16), ("bf16-true", torch.bfloat16)]
)
def test_true_precisions_cast_the_module_the_inputs_and_new_tensors(name: str, dtype: torch.dtype) -> None:
    precision = build_precision(name)

    module = precision.convert_module(torch.nn.Linear(3, 3))
    inputs = precision.convert_input({"x": torch.ones(2, 3), "index": torch.arange(2)})
    with precision.forward_context():
        out = module(inputs["x"])
        created = torch.zeros(1)
    with precision.module_init_context():
        initialised = torch.nn.Linear(2, 2)

    assert {p.dtype for p in module.parameters()} == {dtype}
    assert inputs["x"].dtype == dtype and inputs["index"].dtype == torch.int64
    assert out.dtype == dtype and created.dtype == dtype
    assert initialised.weight.dtype == dtype
    assert torch.get_default_dtype() == torch.float32  # restored after the contexts


def test_bf16_mixed_autocasts_on_cpu_and_keeps_float32_parameters() -> None:
    precision = build_precision("bf16-mixed")
    module = precision.convert_module(torch.nn.Linear(3, 3))
    with precision.forward_context():
        out = module(torch.ones(2, 3))
    assert out.dtype == torch.bfloat16
    assert next(module.parameters()).dtype == torch.float32
    assert isinstance(precision, MixedPrecision) and precision.scaler is None


def test_16_mixed_on_cpu_autocasts_to_float16_without_a_grad_scaler() -> None:
    # The resolver rejects 16-mixed on CPU; the plugin itself still behaves sensibly there.
    precision = Float16MixedPrecision(CPUAccelerator())
    with precision.forward_context():
        out = torch.nn.Linear(3, 3)(torch.ones(2, 3))
    assert out.dtype == torch.float16
    assert precision.scaler is None and precision.state_dict() == {}


def test_16_mixed_on_cuda_scales_the_loss_with_a_grad_scaler() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # on a machine without CUDA the scaler disables itself
        precision = Float16MixedPrecision(CUDAAccelerator())
    assert isinstance(precision.scaler, torch.amp.GradScaler)
    assert "scaler" in precision.state_dict()


def test_16_mixed_scales_the_loss_wherever_the_accelerator_says_float16_needs_it() -> None:
    class ScalingCPU(CPUAccelerator):  # a new accelerator declares the fact; the precision asks it
        float16_needs_grad_scaler = True

    precision = Float16MixedPrecision(ScalingCPU())
    assert isinstance(precision.scaler, torch.amp.GradScaler) and "scaler" in precision.state_dict()


@pytest.mark.parametrize("name", ["32-true", "64-true", "bf16-mixed", "16-true", "bf16-true"])
def test_a_training_step_runs_under_every_precision_cpu_supports(name: str) -> None:
    strategy = runtime.build(single_device_config(precision=name))
    torch.manual_seed(0)
    with strategy.precision.module_init_context():
        model = torch.nn.Linear(4, 1)
    model = strategy.setup_module(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = strategy.to_device((torch.randn(8, 4), torch.randn(8, 1)))
    before = [p.detach().clone() for p in model.parameters()]

    with strategy.precision.forward_context():
        loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)

    assert torch.isfinite(loss)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
