"""Functions that run inside the ranks of the checkpoint trust and damage tests (module level, picklable)."""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from sharded_workers import sgd, small_model, train

from runtime import Strategy
from runtime.checkpoint import mark_complete
from runtime.errors import CheckpointError


class Payload:
    """A pickle that, if unpickled with ``weights_only=False``, creates the file ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def attempt(call: Any) -> dict[str, Any]:
    """What a load did: ``ok``, or the error's type and message."""
    try:
        call()
    except CheckpointError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"ok": True}


def _plant_in_files(directory: Path, pattern: str, payload: Payload) -> list[str]:
    planted = sorted(directory.rglob(pattern))
    for file in planted:
        torch.save({"module": payload, "optimizer_state_dict": payload}, file)
    return [str(file.relative_to(directory)) for file in planted]


def _plant_in_byte_item(directory: Path, payload: Payload) -> None:
    """Save the sharded checkpoint again (one process) with the optimizer's ``lr`` a payload: a genuine DCP
    directory whose shard holds it as a non-tensor item."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    flat = directory.parent / f"{directory.name}.flat.pt"
    dcp_to_torch_save(directory, flat)
    state = torch.load(flat, weights_only=False)
    flat.unlink()
    state["optimizer"]["param_groups"][0]["lr"] = payload
    for file in [*directory.glob("*.distcp"), directory / ".metadata"]:
        file.unlink()
    dcp.save(state, checkpoint_id=directory, no_dist=True)


def planted_loads(strategy: Strategy, folder: str, marker: str, kind: str) -> dict[str, Any]:
    """Save a genuine checkpoint of ``kind`` and load it; then plant a payload in each kind of file its
    loader reads (in a copy, sealed again with the ``.complete`` mark) and load each copy."""
    base = Path(folder)
    model, optimizer = strategy.setup_module_and_optimizer(small_model(), partial(sgd, momentum=0.9))
    train(strategy, model, optimizer, 2)
    state = {"model": model, "optimizer": optimizer}
    genuine = base / "genuine"
    strategy.save_checkpoint(genuine, {**state, "step": 2})
    report: dict[str, Any] = {"genuine": attempt(lambda: strategy.load_checkpoint(genuine, state))}

    payload = Payload(marker)
    copies: dict[str, Any] = {}
    if strategy.is_global_zero:
        if genuine.is_dir():
            plans: dict[str, Any] = {
                "fsdp": {
                    "entries.pt": lambda d: _plant_in_files(d, "entries.pt", payload),
                    ".metadata": lambda d: (d / ".metadata").write_bytes(__import__("pickle").dumps(payload)),
                    "byte item": lambda d: _plant_in_byte_item(d, payload),
                },
                "deepspeed": {
                    "model states": lambda d: _plant_in_files(d, "*model_states.pt", payload),
                    "optimizer states": lambda d: _plant_in_files(d, "*optim_states.pt", payload),
                },
            }[kind]
            for name, plant in plans.items():
                copy = base / name.replace(" ", "-")
                shutil.copytree(genuine, copy)
                plant(copy)
                mark_complete(copy)  # sealed again: a consistent directory, as a crafted one would be
                copies[name] = str(copy)
        else:
            copy = base / "planted.pt"
            torch.save({"model": payload, "optimizer": payload, "step": 2}, copy)
            copies["single file"] = str(copy)
    copies = strategy.collective.broadcast_object(copies)
    for name, copy in copies.items():
        report[name] = attempt(lambda copy=copy: strategy.load_checkpoint(copy, state))
    report["marker"] = Path(marker).exists()
    return report


def _damage(target: Path, how: str) -> None:
    data = target.read_bytes()
    if how == "truncated":
        target.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        target.write_bytes(b"")
    elif how == "random bytes":
        target.write_bytes(bytes(random.Random(0).getrandbits(8) for _ in range(len(data))))
    elif how == "missing":
        target.unlink()


def _newest(entry: Path) -> None:
    """Make ``entry`` the newest checkpoint (a copy keeps the original's times)."""
    evidence = entry / ".complete" if entry.is_dir() else entry
    later = time.time() + 10
    os.utime(evidence, (later, later))


def damaged_cases(strategy: Strategy, folder: str, cases: list[tuple[str, str]]) -> dict[str, Any]:
    """Save a good checkpoint; for each ``(how, part)`` case, a folder with it and a newer copy damaged so
    (``part``: the file of a directory checkpoint to damage, a glob; ``""`` for a single file;
    ``"legacy:<glob>"``: the copy's mark is an older version's, without the list of files). Report what
    ``latest_checkpoint`` returned and printed, and what loading the damaged copy raised."""
    base = Path(folder)
    model, optimizer = strategy.setup_module_and_optimizer(small_model(), partial(sgd, momentum=0.9))
    train(strategy, model, optimizer, 2)
    state = {"model": model, "optimizer": optimizer}
    good = base / "good"
    strategy.save_checkpoint(good, {**state, "step": 2})
    if strategy.is_global_zero:
        for index, (how, part) in enumerate(cases):
            case = base / f"case-{index}"
            case.mkdir()
            copy = shutil.copytree if good.is_dir() else shutil.copy2
            copy(good, case / "epoch-0")
            copy(good, case / "epoch-1")
            damaged = case / "epoch-1"
            if part.startswith("legacy:"):
                part = part.removeprefix("legacy:")
                (damaged / ".complete").write_text("every rank finished writing this checkpoint\n")
            target = sorted(damaged.glob(part))[0] if part else damaged
            _damage(target, how)
            _newest(damaged)
    strategy.collective.barrier()
    report: dict[str, Any] = {}
    for index, (how, part) in enumerate(cases):
        case = base / f"case-{index}"
        printed = io.StringIO()
        with contextlib.redirect_stderr(printed):
            latest = strategy.latest_checkpoint(case)
        report[f"{how} {part}"] = {
            "latest": latest.name if latest is not None else None,
            "printed": printed.getvalue(),
            "load damaged": attempt(lambda case=case: strategy.load_checkpoint(case / "epoch-1", state)),
            "load latest": attempt(lambda latest=latest: strategy.load_checkpoint(latest, state)),
        }
    return report


def _fill(filler: Path, leave: int) -> None:
    """Fill the file system holding ``filler`` to the last byte, then give back ``leave`` bytes."""
    block = b"\0" * (1 << 16)
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(block)
                handle.flush()
        except OSError:
            pass
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))


def save_on_a_full_disk(strategy: Strategy, folder: str) -> dict[str, Any]:
    """Save a checkpoint; fill the disk but a few KiB; save the next one. Report every rank's error, what
    the folder holds afterwards, and whether the first checkpoint is still the latest and loads."""
    base = Path(folder)
    model, optimizer = strategy.setup_module_and_optimizer(small_model(), partial(sgd, momentum=0.9))
    train(strategy, model, optimizer, 2)
    state = {"model": model, "optimizer": optimizer}
    strategy.save_checkpoint(base / "epoch-0", {**state, "step": 0})
    if strategy.is_global_zero:
        _fill(base / "filler", leave=8192)
    strategy.collective.barrier()
    outcome = attempt(lambda: strategy.save_checkpoint(base / "epoch-1", {**state, "step": 1}))
    outcomes = strategy.collective.all_gather_object(outcome)
    strategy.collective.barrier()
    latest = strategy.latest_checkpoint(base)
    return {
        "outcomes": outcomes,
        "listing": sorted(entry.name for entry in base.iterdir()),
        "latest": None if latest is None else latest.name,
        "loaded": attempt(lambda: strategy.load_checkpoint(base / "epoch-0", state)),
    }
