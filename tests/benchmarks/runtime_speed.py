"""Runtime speed side by side in one run: ``python tests/benchmarks/runtime_speed.py [--repeats N] [--only ...]``.

Each comparison of issue 9 runs this project and its peer alternately, ``--repeats`` times each,
and prints both medians and their ratio (>= 1.0: at least as fast as the peer), and for the
training comparisons also the median and range of the ratios taken round by round (each side
measured next to the other) and a control: raw torch against itself, which says how far two
identical sides differ in the same run. Not a test: timings depend on the machine and its load;
compare ratios taken in one run, and read each against its control.

- ``train``: CPU DDP training of a small MLP on 2 ranks, each a separate launch at default settings:
  ``runtime.launch(strategy="ddp_spawn")``, ``resolver run`` (a script per rank), raw
  ``torch.multiprocessing`` spawn + ``DistributedDataParallel`` (threads per rank set by hand, as
  torchrun/Fabric would) and Lightning Fabric ``ddp_spawn`` (column skipped without ``lightning``).
  Steps/s are timed in rank 0 over the same window on every side (``STEPS`` steps after 10
  untimed ones; start-up outside it), with the CPU time rank 0's main thread spent per step in
  that window (the loop's own cost, without the waits on the other rank that make wall time
  swing); the wall time of each whole launch (start-up included) is printed too.
- ``spawn``/``fork``: ``launch()`` call until both ranks are ready (process group joined and a first
  ``barrier`` done, taken in rank 0) vs raw ``torch.multiprocessing`` with the same start method +
  ``init_process_group`` + ``barrier``; both sides pick a free port inside the timed window.
- ``ddp``: process start until ready (a first ``barrier`` done), the ``ddp`` (script re-run)
  launcher vs ``torchrun``.
- ``return``: the ranks' work finished until ``launch()`` returns in rank 0 under ``ddp`` (and
  Fabric's ``ddp`` when installed).
- ``collectives``: all_reduce / broadcast / barrier of 1 KB and 4 MB through the strategy's
  collective (default settings) vs raw ``torch.distributed`` in the same ranks.
- ``steps``: a training step through the runtime's ``ddp``, ``fsdp`` and ``deepspeed`` strategies
  vs the same step with raw torch (DDP, ``fully_shard``, ``deepspeed.initialize``) in the same
  ranks (DeepSpeed only when installed), and under ``ddp`` Fabric's step too (when installed);
  as steps/s and as the main thread's CPU time per step.
- ``gpu``: a ``bf16-mixed`` training step through the runtime vs raw torch doing the same in the
  same process(es), on CUDA, under ``single_device``, ``ddp`` and ``fsdp`` (``--gpu-kinds``), for a
  small and a wide model (``--gpu-shapes``): raw is ``torch.autocast`` by hand (inside
  ``DistributedDataParallel`` under ``ddp``) or ``fully_shard`` with the runtime's mixed-precision
  policy under ``fsdp``. One GPU runs in this process (``ddp``/``fsdp`` as a process group of one),
  2 ranks where there are 2. Skipped with a line without CUDA; ``--gpu-on-cpu`` runs the same
  comparisons on 2 CPU ranks (a check of the comparison, not a GPU figure).

``collectives`` and ``steps`` alternate inside running ranks, ``2 * repeats + 1`` rounds after an
untimed one: a collective sample is a timed run of calls, each side first every other round; a
``steps`` round is ``STEPS_PER_ROUND`` steps of each side (ours, raw, raw again, Fabric), taking turns in
blocks of ``STEPS_PER_BLOCK`` (each block of turns starting one side further on), so that a burst
of load from elsewhere on a shared machine falls on every side alike. Separate launches run in
rounds of one launch per side, each round starting one side further on. Every comparison prints
the load average, and the separate launches also each side's spread (lowest-highest).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))

import runtime  # noqa: E402
from runtime._protocol.ports import find_free_port  # noqa: E402

#: Timed training steps per launch (after 10 untimed ones), the same on every side.
STEPS = 500
#: ``steps``: timed steps of each side per round, run in alternating blocks of ``STEPS_PER_BLOCK``.
STEPS_PER_ROUND = 100
STEPS_PER_BLOCK = 5
HAVE_FABRIC = importlib.util.find_spec("lightning") is not None
HAVE_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _model(features: int = 64, hidden: int = 256) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))


#: A launch's training window in rank 0: steps/s (wall) and the main thread's CPU µs per step.
Window = tuple[float, float]


def _rate(step: Callable[[], None], steps: int = STEPS) -> Window:
    """Steps/s over ``steps`` steps after 10 untimed ones, and the CPU time the calling thread spent
    per step meanwhile: what the training loop itself costs (Python, dispatch, kernels run on this
    thread), without the waits for the other rank and the gloo threads that make wall time swing
    from launch to launch on shared cores."""
    for _ in range(10):  # warm-up
        step()
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start), (time.thread_time() - cpu) / steps * 1e6


def _plain_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def step() -> None:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def _batch(
    to_device: Callable[[torch.Tensor], torch.Tensor], rows: int = 32, features: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    return to_device(torch.randn(rows, features)), to_device(torch.randn(rows, 1))


def _runtime_step(
    strategy: runtime.Strategy, x: torch.Tensor, y: torch.Tensor, model: torch.nn.Module | None = None
) -> Callable[[], None]:
    """The runtime's training step as ``docs/runtime.md`` writes it (the forward pass inside the
    precision's context: autocast under ``bf16-mixed``, nothing under ``32-true``)."""
    model, optimizer = strategy.setup_module_and_optimizer(
        _model() if model is None else model, lambda p: torch.optim.SGD(p, lr=0.01)
    )

    def step() -> None:
        with strategy.precision.forward_context():
            loss = torch.nn.functional.mse_loss(model(x), y)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()

    return step


def _fabric_step(fabric: Any, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    model = _model()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))

    def step() -> None:
        fabric.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()

    return step


# -- train: separate launches -------------------------------------------------------------------


def _runtime_train(strategy: runtime.Strategy) -> Window:
    return _rate(_runtime_step(strategy, *_batch(strategy.to_device)))


def runtime_train_rate() -> Window:
    rate, cpu = runtime.launch(_runtime_train, accelerator="cpu", devices=2, strategy="ddp_spawn")
    return float(rate), float(cpu)


RUN_SCRIPT = """
import sys
sys.path[:0] = [{repo!r}, {here!r}]
import runtime, runtime_speed
rate, cpu = runtime.launch(runtime_speed._runtime_train)
if runtime.is_global_zero():
    print("RATE", rate, cpu, flush=True)
"""


def resolver_run_rate() -> Window:
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "train.py"
        script.write_text(RUN_SCRIPT.format(repo=str(REPOSITORY), here=str(Path(__file__).parent)))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "resolver",
                "run",
                "--accelerator",
                "cpu",
                "--devices",
                "2",
                "--strategy",
                "ddp",
                str(script),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=_clean_env(),
            cwd=folder,
        )
    # resolver run prefixes each line with its rank: "[rank 0]: RATE 362.2 911.5"
    line = next((line for line in done.stdout.splitlines() if "RATE " in line), None)
    if line is None:
        raise RuntimeError(f"resolver run failed:\n{done.stdout}\n{done.stderr}")
    rate, cpu = line.split("RATE ", 1)[1].split()
    return float(rate), float(cpu)


def _raw_train(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(max(1, _cores() // 2))  # by hand, as torchrun / Fabric would
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(_model())
    rate, cpu = _rate(_plain_step(model, torch.optim.SGD(model.parameters(), lr=0.01)))
    if rank == 0:
        Path(out).write_text(f"{rate} {cpu}")
    dist.destroy_process_group()


def raw_train_rate() -> Window:
    with tempfile.NamedTemporaryFile() as out:
        mp.start_processes(_raw_train, args=(find_free_port(), out.name), nprocs=2, start_method="spawn")
        rate, cpu = Path(out.name).read_text().split()
        return float(rate), float(cpu)


def _fabric_train(fabric: Any) -> Window:
    return _rate(_fabric_step(fabric, *_batch(fabric.to_device)))


def fabric_train_rate() -> Window:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    rate, cpu = fabric.launch(_fabric_train)
    return float(rate), float(cpu)


# -- readiness and return latency ------------------------------------------------------------------


def _ready(strategy: runtime.Strategy) -> float:
    dist.barrier()  # ready means a first collective completes, on both sides
    return time.time()


def runtime_ready_ms(method: str) -> float:
    start = time.time()
    ready = runtime.launch(_ready, accelerator="cpu", devices=2, strategy=f"ddp_{method}")
    return (ready - start) * 1000


def _raw_ready(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    dist.barrier()
    if rank == 0:
        Path(out).write_text(str(time.time()))
    dist.destroy_process_group()


def raw_ready_ms(method: str) -> float:
    with tempfile.NamedTemporaryFile() as out:
        start = time.time()
        mp.start_processes(_raw_ready, args=(find_free_port(), out.name), nprocs=2, start_method=method)
        return (float(Path(out.name).read_text()) - start) * 1000


READY_SCRIPT = """
import os, sys, time
sys.path.insert(0, {repo!r})
import torch.distributed as dist
if "TORCHELASTIC_RUN_ID" in os.environ:
    dist.init_process_group("gloo")
    dist.barrier()
    t = time.time()
else:
    import runtime
    t = runtime.launch(lambda s: dist.barrier() or time.time(), accelerator="cpu", devices=2, strategy="ddp")
if os.environ.get("RANK", "0") == "0":
    print("READY", t, flush=True)
"""

RETURN_SCRIPT = """
import os, sys, time
sys.path.insert(0, {repo!r})

def work(strategy):
    strategy.barrier() if hasattr(strategy, "barrier") else strategy.collective.barrier()
    return time.time()

if sys.argv[1] == "fabric":
    from lightning.fabric import Fabric
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    finished = fabric.launch(work)
else:
    import runtime
    finished = runtime.launch(work, accelerator="cpu", devices=2, strategy="ddp")
returned = time.time()
if os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0":
    print("RETURN", (returned - finished) * 1000, flush=True)
"""


def _clean_env() -> dict[str, str]:
    drop = ("RESOLVER_", "RUNTIME_", "MASTER_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _run_script(text: str, *args: str, prefix: list[str] | None = None) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "script.py"
        script.write_text(text.format(repo=str(REPOSITORY)))
        start = time.time()
        done = subprocess.run(
            [*(prefix or [sys.executable]), str(script), *args],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=600,
            cwd=folder,
        )
    return start, done.stdout + "\n" + done.stderr


def _value(output: str, key: str) -> float:
    line = next((line for line in output.splitlines() if line.startswith(key + " ")), None)
    if line is None:
        raise RuntimeError(f"no {key} line in:\n{output}")
    return float(line.split()[1])


def process_ready_ms(torchrun: bool) -> float:
    prefix = None
    if torchrun:
        prefix = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(find_free_port()),
        ]
    start, output = _run_script(READY_SCRIPT, prefix=prefix)
    return (_value(output, "READY") - start) * 1000


def return_ms(which: str) -> float:
    return _value(_run_script(RETURN_SCRIPT, which)[1], "RETURN")


# -- in-rank comparisons: collectives and training steps --------------------------------------------


def _alternate(rounds: int, ours: Callable[[], float], raw: Callable[[], float]) -> tuple[float, float]:
    mine: list[float] = []
    theirs: list[float] = []
    ours(), raw()  # warm-up round, not counted
    for round_ in range(rounds):
        # Each side goes first every other round: neither always runs just after the other.
        if round_ % 2:
            theirs.append(raw())
            mine.append(ours())
        else:
            mine.append(ours())
            theirs.append(raw())
    return statistics.median(mine), statistics.median(theirs)


Rounds = list[list[float]]  # a value per round, for each side


def _interleaved_rates(
    rounds: int, *sides: Callable[[], None], sync: Callable[[], None] = lambda: None
) -> tuple[Rounds, Rounds]:
    """Steps/s of each training step in ``sides``, in each of ``rounds`` rounds, after 10 untimed
    steps of each, and the CPU µs per step the calling thread spent on each side. A round times
    ``STEPS_PER_ROUND`` steps of every side in blocks of ``STEPS_PER_BLOCK``, taking turns, each
    block of turns starting one side further on: every side sees the same machine, where timing one
    side's whole round after another's lets a burst of load from elsewhere fall on one side only
    (the ratio then moves by +-10% on two shared cores). ``sync`` ends each timed block (a CUDA
    synchronize: kernels still queued are that block's work)."""
    for _ in range(10):
        for step in sides:
            step()
    rates: Rounds = [[] for _ in sides]
    cpus: Rounds = [[] for _ in sides]
    turns = list(range(len(sides)))
    for round_ in range(rounds):
        elapsed = [0.0] * len(sides)
        cpu = [0.0] * len(sides)
        for block in range(STEPS_PER_ROUND // STEPS_PER_BLOCK):
            shift = (round_ + block) % len(sides)
            for side in turns[shift:] + turns[:shift]:
                step = sides[side]
                start, cpu_start = time.perf_counter(), time.thread_time()
                for _ in range(STEPS_PER_BLOCK):
                    step()
                sync()
                elapsed[side] += time.perf_counter() - start
                cpu[side] += time.thread_time() - cpu_start
        for side, spent in enumerate(elapsed):
            rates[side].append(STEPS_PER_ROUND / spent)
            cpus[side].append(cpu[side] / STEPS_PER_ROUND * 1e6)
    return rates, cpus


def _time_calls(call: Callable[[], Any], calls: int) -> float:
    """Microseconds per call of ``call``, over ``calls`` calls started together on every rank."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def _collectives(strategy: runtime.Strategy, rounds: int) -> dict[str, tuple[float, float]]:
    collective = strategy.collective
    results: dict[str, tuple[float, float]] = {}
    for size_name, numel in (("1KB", 256), ("4MB", 1 << 20)):
        tensor = torch.zeros(numel)
        calls = 500 if numel == 256 else 20  # about 20-200 ms per sample
        cases: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "all_reduce": (partial(collective.all_reduce, tensor), partial(dist.all_reduce, tensor)),
            "broadcast": (partial(collective.broadcast, tensor, 0), partial(dist.broadcast, tensor, 0)),
        }
        if size_name == "1KB":
            cases["barrier"] = (collective.barrier, dist.barrier)
        for name, (ours, raw) in cases.items():
            results[f"{name} {size_name}" if name != "barrier" else name] = _alternate(
                rounds, partial(_time_calls, ours, calls), partial(_time_calls, raw, calls)
            )
    return results


def _raw_wrapped(kind: str, model: torch.nn.Module, mp_policy: Any = None) -> tuple[torch.nn.Module, Any]:
    """``model`` wrapped by raw torch for ``kind`` (on the device it is on) and its optimizer;
    ``mp_policy``: FSDP's mixed-precision policy, as the runtime passes it under ``*-mixed``."""
    device = next(model.parameters()).device
    if kind == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    elif kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        extra = {} if mp_policy is None else {"mp_policy": mp_policy}
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh, **extra)
        fully_shard(model, mesh=mesh, **extra)
    elif kind == "deepspeed":
        import deepspeed

        engine, optimizer, _, _ = deepspeed.initialize(
            model=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
            config={
                "train_micro_batch_size_per_gpu": 32,
                "zero_optimization": {"stage": 2},
                "zero_allow_untested_optimizer": True,
            },  # as the runtime's default config (SGD)
        )
        return engine, optimizer
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _fabric_in_these_ranks() -> Any:
    """Fabric's ``ddp`` in these ranks: ``LOCAL_RANK`` is set, so Fabric sees processes started
    outside it and joins the process group already there (its ``launch()`` starts nothing)."""
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=dist.get_world_size(), strategy="ddp")
    fabric.launch()
    return fabric


def _steps(strategy: runtime.Strategy, rounds: int) -> tuple[Rounds, Rounds]:
    """Steps/s round by round of the runtime's step, the raw step and a second raw step (the
    control: how far two identical steps differ on this machine), and under ``ddp`` Fabric's step
    when it is installed."""
    kind = strategy.config.strategy
    x, y = _batch(strategy.to_device)

    def raw_step() -> Callable[[], None]:
        raw_model, raw_optimizer = _raw_wrapped(kind, _model())

        def raw() -> None:
            loss = torch.nn.functional.mse_loss(raw_model(x), y)
            if kind == "deepspeed":
                raw_model.backward(loss)
                raw_model.step()
            else:
                loss.backward()
                raw_optimizer.step()
                raw_optimizer.zero_grad()

        return raw

    sides = [_runtime_step(strategy, x, y), raw_step(), raw_step()]
    if kind == "ddp" and HAVE_FABRIC:
        sides.append(_fabric_step(_fabric_in_these_ranks(), x, y))
    return _interleaved_rates(rounds, *sides)


#: ``gpu``: the model and batch of the bf16 step, as (features, hidden width, batch rows). ``small``
#: is the MLP of the CPU comparisons (a GPU step of it is launch overhead: what the framework adds
#: shows most), ``wide`` keeps the GPU busy with matrix work.
BF16_SHAPES = {"small": (64, 256, 32), "wide": (1024, 4096, 1024)}


def _bf16_steps(strategy: runtime.Strategy, rounds: int, shape: str) -> tuple[Rounds, Rounds]:
    """A ``bf16-mixed`` training step through the runtime (its precision: autocast, or FSDP's
    mixed-precision policy under ``fsdp``) against raw torch doing the same (``torch.autocast`` by
    hand, wrapped in DDP under ``ddp``; ``fully_shard`` with the same policy under ``fsdp``), and raw
    again as the control, on the strategy's device."""
    kind = strategy.config.strategy
    device = strategy.root_device
    features, hidden, rows = BF16_SHAPES[shape]
    x, y = _batch(strategy.to_device, rows, features)
    ours = _runtime_step(strategy, x, y, _model(features, hidden))
    # What the runtime's FSDP gave fully_shard (its mixed-precision policy), for the raw side to match.
    policy = getattr(strategy, "fsdp_kwargs", {}).get("mp_policy")

    def raw_step() -> Callable[[], None]:
        raw_model, raw_optimizer = _raw_wrapped(kind, _model(features, hidden).to(device), policy)
        raw_x, raw_y = x.detach().clone(), y.detach().clone()
        # FSDP casts by its policy; the other raw steps autocast as a user of plain torch would.
        autocast = policy is None

        def raw() -> None:
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = torch.nn.functional.mse_loss(raw_model(raw_x), raw_y)
            loss.backward()
            raw_optimizer.step()
            raw_optimizer.zero_grad()

        return raw

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return _interleaved_rates(rounds, ours, raw_step(), raw_step(), sync=sync)


def bf16_comparison(accelerator: str, rounds: int, kinds: tuple[str, ...], shapes: tuple[str, ...]) -> None:
    """``_bf16_steps`` for each strategy kind (``single_device``, ``ddp``, ``fsdp``) and shape on
    ``accelerator``'s devices: 2 ranks where there are 2 (always on the CPU; started by fork), else
    one device in this process (``ddp``/``fsdp`` then run a process group of one), reported like
    ``steps``."""
    import attrs

    import resolver

    devices = 2 if accelerator == "cpu" or torch.cuda.device_count() >= 2 else 1
    for kind in kinds:
        if kind == "single_device" and devices > 1:
            continue
        config = resolver.resolve(accelerator=accelerator, devices=devices, strategy=kind, precision="bf16-mixed")
        if devices > 1:
            config = attrs.evolve(config, launcher="fork")  # this script must not be re-run per rank
        for shape in shapes:
            rates, cpus = runtime.build(config).launch(_bf16_steps, rounds, shape)
            report_steps(f"step bf16-mixed {accelerator} {kind} x{devices} {shape}", rates, cpus)


def _in_ranks(strategy: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(strategy, *args)`` in 2 forked CPU ranks of ``strategy`` at default settings (fork: this
    script must not be re-run, as the ddp launcher would)."""
    import attrs

    import resolver

    config = resolver.resolve(accelerator="cpu", devices=2, strategy=strategy)
    return runtime.build(attrs.evolve(config, launcher="fork")).launch(fn, *args)


# -- reporting ----------------------------------------------------------------------------------


def _line(
    name: str, ours: float, peer: float, peer_name: str, higher_is_better: bool, unit: str, side: str = "ours"
) -> None:
    ratio = ours / peer if higher_is_better else peer / ours
    print(f"{name:<44} {side} {ours:10.1f} {unit:<7} {peer_name} {peer:10.1f}   ratio {ratio:5.2f}", flush=True)


def _paired(ours: list[float], peer: list[float], higher_is_better: bool) -> str:
    """The median and range of the ratios taken round by round (ours and the peer measured next to
    each other): slow changes in the machine's load cancel out of each ratio, where the ratio of
    two medians keeps them."""
    ratios = sorted(o / p if higher_is_better else p / o for o, p in zip(ours, peer, strict=True))
    return f"round by round: median {statistics.median(ratios):.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}"


def compare(
    name: str, sides: dict[str, Callable[[], float]], repeats: int, higher_is_better: bool, unit: str
) -> dict[str, list[float]]:
    """Run every side ``repeats`` times, in rounds that each run every side once, starting each round
    one side further on (no side always follows the same one), and print each ours-vs-peer ratio."""
    samples: dict[str, list[float]] = {side: [] for side in sides}
    order = list(sides)
    for round_ in range(repeats):
        shift = round_ % len(order)
        for side in order[shift:] + order[:shift]:
            samples[side].append(_retried(side, sides[side]))
    report(name, samples, higher_is_better, unit)
    return samples


def _retried(side: str, measure: Callable[[], float], attempts: int = 3) -> float:
    """``measure()``, run again when a launch fails (gloo's threads have aborted a raw torch rank
    at exit, once in some hundred launches): the failure is printed, never hidden."""
    for attempt in range(1, attempts):
        try:
            return measure()
        except Exception as exc:  # noqa: BLE001 - any failure of one launch
            print(f"    {side}: launch {attempt} of {attempts} failed ({type(exc).__name__}: {exc})", flush=True)
    return measure()  # the last attempt: its failure is raised


def report(name: str, samples: dict[str, list[float]], higher_is_better: bool, unit: str) -> None:
    """Each ours-vs-peer ratio of the medians and round by round, then each side's spread (the load
    of a shared machine moves single runs a lot). A ``control`` side is the raw peer run a second
    time: its ratio to ``raw`` is how far two identical sides differ in this run."""
    medians = {side: statistics.median(values) for side, values in samples.items()}
    ours = [side for side in samples if side.startswith("ours")]
    peers = [side for side in samples if not side.startswith("ours") and side != "control"]
    pairs = [(mine, peer) for mine in ours for peer in peers]
    if "control" in samples:
        pairs.append(("control", "raw"))
    for mine, peer in pairs:
        _line(f"{name} [{mine} vs {peer}]", medians[mine], medians[peer], peer, higher_is_better, unit, mine)
        print(f"{'':<4}{_paired(samples[mine], samples[peer], higher_is_better)}", flush=True)
    spread = "   ".join(f"{side} {min(values):.1f}-{max(values):.1f}" for side, values in samples.items())
    print(f"{'':<4}spread ({unit}): {spread}; load average {os.getloadavg()[0]:.1f}", flush=True)


def report_steps(name: str, rates: Rounds, cpus: Rounds) -> None:
    """``_interleaved_rates``' figures of the sides ours, raw, control and (where there is one) Fabric:
    steps/s, then the main thread's CPU time per step."""
    names = ("ours", "raw", "control", "fabric")[: len(rates)]
    report(name, dict(zip(names, rates, strict=True)), True, "steps/s")
    report(f"{name}, main-thread CPU per step", dict(zip(names, cpus, strict=True)), False, "us")


def _timed(measure: Callable[[], Window], walls: list[float], cpus: list[float]) -> Callable[[], float]:
    """``measure``'s steps/s, recording the wall time of the whole launch (start-up, steps, exit) in
    ``walls`` and the training window's CPU µs per step in ``cpus``."""

    def timed() -> float:
        start = time.perf_counter()
        rate, cpu = measure()
        walls.append(time.perf_counter() - start)
        cpus.append(cpu)
        return rate

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--only", nargs="*", default=["train", "spawn", "fork", "ddp", "return", "collectives", "steps", "gpu"]
    )
    parser.add_argument(
        "--gpu-on-cpu",
        action="store_true",
        help="run the bf16 GPU step comparison on the CPU instead (checks the comparison itself)",
    )
    parser.add_argument(
        "--gpu-kinds",
        nargs="*",
        default=["single_device", "ddp", "fsdp"],
        help="the strategies of the bf16 step comparison (default: %(default)s)",
    )
    parser.add_argument(
        "--gpu-shapes",
        nargs="*",
        default=None,
        choices=sorted(BF16_SHAPES),
        help="model shapes of the bf16 step comparison (default: both on CUDA, small on the CPU)",
    )
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {_cores()} core(s); Fabric {'yes' if HAVE_FABRIC else 'not installed'}, "
        f"DeepSpeed {'yes' if HAVE_DEEPSPEED else 'not installed'}; medians of {args.repeats}, alternating; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    if "train" in args.only:
        sides = {"ours launch": runtime_train_rate, "ours run": resolver_run_rate, "raw": raw_train_rate}
        if HAVE_FABRIC:
            sides["fabric"] = fabric_train_rate
        sides["control"] = raw_train_rate  # raw again: how far two identical sides differ in this run
        walls: dict[str, list[float]] = {side: [] for side in sides}
        cpus: dict[str, list[float]] = {side: [] for side in sides}
        compare(
            "train 2 ranks",
            {side: _timed(measure, walls[side], cpus[side]) for side, measure in sides.items()},
            args.repeats,
            True,
            "steps/s",
        )
        # What the loop costs rank 0's main thread per step: the framework's own work, read finely.
        report("train 2 ranks, rank 0 main-thread CPU per step", cpus, False, "us")
        # The same launches end to end (start-up included; `ours run` also starts the CLI).
        report(f"train 2 ranks, {STEPS + 10} steps, whole launch", walls, False, "s")
    for method in ("spawn", "fork"):
        if method in args.only:
            compare(
                f"ddp_{method} call to ready",
                {
                    "ours": lambda m=method: runtime_ready_ms(m),  # type: ignore[misc]
                    "raw": lambda m=method: raw_ready_ms(m),
                },
                args.repeats,
                False,
                "ms",
            )
    if "ddp" in args.only:
        compare(
            "ddp process start to ready",
            {"ours": lambda: process_ready_ms(False), "torchrun": lambda: process_ready_ms(True)},
            args.repeats,
            False,
            "ms",
        )
    if "return" in args.only:
        sides = {"ours": lambda: return_ms("runtime")}
        if HAVE_FABRIC:
            sides["fabric"] = lambda: return_ms("fabric")
        samples = {side: statistics.median([measure() for _ in range(args.repeats)]) for side, measure in sides.items()}
        print(
            f"{'ddp ranks finished to launch() returns':<44} "
            + "   ".join(f"{side} {value:8.1f} ms" for side, value in samples.items())
            + "   (goal: ours <= 50 ms)",
            flush=True,
        )
    if "collectives" in args.only:
        results = _in_ranks("ddp", _collectives, 2 * args.repeats + 1)  # cheap rounds in running ranks
        for name, (ours, raw) in results.items():
            _line(f"collective {name}", ours, raw, "raw", False, "us")
    if "steps" in args.only:
        for kind in ("ddp", "fsdp", "deepspeed"):
            if kind == "deepspeed" and not HAVE_DEEPSPEED:
                print(f"{'step deepspeed':<44} skipped: deepspeed is not installed", flush=True)
                continue
            report_steps(f"step {kind}", *_in_ranks(kind, _steps, 2 * args.repeats + 1))
    if "gpu" in args.only:
        kinds = tuple(args.gpu_kinds)
        if args.gpu_on_cpu:
            bf16_comparison("cpu", 2 * args.repeats + 1, kinds, tuple(args.gpu_shapes or ["small"]))
        elif torch.cuda.is_available():
            bf16_comparison("cuda", 2 * args.repeats + 1, kinds, tuple(args.gpu_shapes or sorted(BF16_SHAPES)))
        else:
            print(f"{'step bf16-mixed gpu':<44} skipped: no CUDA device (--gpu-on-cpu runs it on the CPU)", flush=True)


if __name__ == "__main__":
    main()
