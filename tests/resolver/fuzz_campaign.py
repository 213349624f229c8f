"""A large seeded fuzz campaign against resolve(), without hypothesis's per-example overhead.

Draws flags and environments from the same value pools as tests/resolver/test_fuzz_resolve.py (known
values, garbage of every type, tricky integer text, cluster variables in and out of range) with a
seeded ``random.Random``, and counts outcomes: configs (each checked against the invariants),
ResolutionErrors, and crashes (anything else), grouped by exception type and place.

    python tests/resolver/fuzz_campaign.py --count 100000 --seed 1
"""

from __future__ import annotations

import argparse
import random
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from test_fuzz_resolve import (  # noqa: E402
    _CLUSTER_VARIABLES,
    _TRICKY_TEXT,
    ACCELERATORS,
    CLUSTERS,
    PLUGINS,
    PRECISIONS,
    STRATEGIES,
    check_invariants,
    cluster_job,
)

from resolver import Environment, ResolutionError, resolve  # noqa: E402

_BIG = [2**31, 2**63, 10**8, 4096, 4097, -(2**63), 10**100, 10**4299, 10**4300, 10**6 + 1]


def _int(rng: random.Random) -> int:
    return rng.randint(-3, 20) if rng.random() < 0.8 else rng.choice(_BIG)


def _text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_TRICKY_TEXT)
    alphabet = "0123456789-+, abcxyz²①٣\x00é"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))


def _garbage(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth == 0 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return _int(rng)
    if kind == 3:
        return rng.choice([0.5, -1.0, 2.0, float("nan"), float("inf")])
    if kind in (4, 5):
        return _text(rng)
    if kind == 6:
        return [_garbage(rng, 1) for _ in range(rng.randint(0, 4))]
    if kind == 7:
        return {_text(rng): _int(rng) for _ in range(rng.randint(0, 2))}
    return tuple(rng.randint(-1, 9) for _ in range(rng.randint(1, 3)))


def _flag(rng: random.Random, known: tuple[Any, ...], garbage: float) -> Any:
    return _garbage(rng) if rng.random() < garbage else rng.choice(known)


def flags(rng: random.Random) -> dict[str, Any]:
    garbage = 0.0 if rng.random() < 0.5 else 0.3  # half the inputs use known values only
    devices_known = ("auto", "-1", "2", "0,1", "1,", [0, 2], [1], (0, 1), [0, 0], 1, 2, 3, 4, 8, -1, 0)
    plugins = (
        [rng.choice(PLUGINS) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.5 + (0.5 - garbage)
        else (rng.choice(PLUGINS) if rng.random() < 0.5 else _garbage(rng))
    )
    chosen = {
        "accelerator": _flag(rng, ACCELERATORS, garbage),
        "devices": _flag(rng, devices_known, garbage),
        "strategy": _flag(rng, STRATEGIES, garbage),
        "precision": _flag(rng, PRECISIONS, garbage),
        "num_nodes": _flag(rng, (1, 1, 2, 3, 4, 0, -1, "2"), garbage),
        "cluster_environment": _flag(rng, CLUSTERS, garbage),
        "plugins": plugins,
    }
    return {name: value for name, value in chosen.items() if rng.random() < 0.5}  # the rest: defaults


def environment(rng: random.Random) -> Environment:
    variables: dict[str, str] = {}
    for name in rng.sample(sorted(_CLUSTER_VARIABLES), rng.randint(0, 2)):
        coherent = rng.random() < 0.5
        for variable in _CLUSTER_VARIABLES[name]:
            if coherent:
                variables[variable] = str(rng.randint(-1, 3))
            elif rng.random() < 0.5:
                variables[variable] = str(rng.randint(-2, 9)) if rng.random() < 0.5 else _text(rng).replace("\x00", "")
    if "LSB_MCPU_HOSTS" in variables and rng.random() < 0.5:
        variables["LSB_MCPU_HOSTS"] = rng.choice(["batch 1 node-a 4", "batch 1 host 2 node-b 2", ""])
    return Environment(
        cuda_device_count=rng.randint(0, 9) if rng.random() < 0.9 else rng.choice([4096, 10**6]),
        mps_available=rng.random() < 0.3,
        xla_device_count=rng.randint(0, 8) if rng.random() < 0.3 else 0,
        torch_xla_available=rng.random() < 0.3,
        horovod_available=rng.random() < 0.3,
        deepspeed_available=rng.random() < 0.3,
        interactive=rng.random() < 0.3,
        fork_available=rng.random() < 0.8,
        hostname=rng.choice(["node-a", "node-b", "host"]),
        variables=variables,
    )


def _shown(given: Any) -> str:
    try:
        return repr(given)[:300]
    except ValueError:  # an int too long to print
        return "<holds an int too long to print>"


def campaign(count: int, seed: int) -> tuple[Counter[str], Counter[str], list[str]]:
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    crashes: Counter[str] = Counter()
    examples: list[str] = []
    for _ in range(count):
        given, env = cluster_job(rng) if rng.random() < 0.4 else (flags(rng), environment(rng))
        try:
            config = resolve(**given, environment=env)
        except ResolutionError as error:
            outcomes["resolution_error"] += 1
            error.diagnostic()  # rendering the message must not fail either
            continue
        except Exception as exc:  # noqa: BLE001 - what the campaign counts
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            key = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            crashes[key] += 1
            outcomes["crash"] += 1
            if crashes[key] == 1:
                examples.append(f"{key}: flags={_shown(given)} environment={_shown(env)}")
            continue
        try:
            check_invariants(config)
            outcomes[f"config ({config.cluster_environment})"] += 1
        except AssertionError:
            outcomes["invariant_broken"] += 1
            key = f"invariant: {config.cluster_environment}"
            crashes[key] += 1
            if crashes[key] == 1:
                examples.append(f"{key}: flags={_shown(given)} environment={_shown(env)}")
    return outcomes, crashes, examples


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    outcomes, crashes, examples = campaign(args.count, args.seed)
    print(f"inputs: {args.count}  " + "  ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())))
    for key, value in crashes.most_common():
        print(f"  {value:6d}  {key}")
    for example in examples:
        print(f"  e.g. {example}")
    sys.exit(1 if crashes else 0)
