"""``python given_strategy.py OUT_DIR``: a ``ddp`` strategy built with ``runtime.build``, marked by its user
(``strategy.team = "vision"``), launched with ``max_restarts=1``; rank 1 kills itself (``SIGKILL``) in the
first attempt, after an all-reduce that rank 0 made too.

Every rank writes ``OUT_DIR/pid-ATTEMPT-RANK``. The launching process prints one ``OUTCOME {json}`` line: rank
0's result (its attempt, whether its strategy is the one the script launched, the mark it carries, the
all-reduced sum), or the error's type and message.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2])]  # runtime_workers, the repository

import torch  # noqa: E402
from runtime_workers import this_process  # noqa: E402

import resolver  # noqa: E402
import runtime  # noqa: E402

GIVEN: runtime.Strategy | None = None


def work(strategy: runtime.Strategy, out: str) -> dict[str, object]:
    attempt = strategy.restart_count
    Path(out, f"pid-{attempt}-{strategy.global_rank}").write_text(this_process())
    # The same call in both attempts: the restarted rank 1 compares it with rank 0 again.
    total = strategy.collective.all_reduce(torch.tensor([float(strategy.global_rank + 1)]), "sum")
    if attempt == 0 and strategy.global_rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    strategy.collective.barrier()
    return {"attempt": attempt, "given": strategy is GIVEN, "team": getattr(strategy, "team", None),
            "sum": total.item()}  # fmt: skip


if __name__ == "__main__":
    GIVEN = runtime.build(resolver.resolve("cpu", 2, "ddp"), max_restarts=1, timeout=90)
    GIVEN.team = "vision"  # type: ignore[attr-defined]  # what a user may hang on their strategy
    try:
        outcome: dict[str, object] = {"result": GIVEN.launch(work, sys.argv[1])}
    except (runtime.RankFailedError, runtime.LaunchTimeoutError) as exc:
        outcome = {"error": type(exc).__name__, "message": str(exc)}
    if os.environ.get("RESOLVER_CONFIG") is None:  # the launching process (not a re-run rank)
        print("OUTCOME " + json.dumps(outcome) + "\n", end="", flush=True)
