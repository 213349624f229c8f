"""``python restart_script.py STRATEGY MAX_RESTARTS FAILURES OUT_DIR``: ``runtime.launch(..., max_restarts=...)``
where rank 1 kills itself (``SIGKILL``) in each of the first FAILURES attempts, after the group has joined
(with ``RESTART_SCRIPT_HANG=1`` it hangs there instead; ``RESTART_SCRIPT_TIMEOUT`` is the launch timeout, 90 s).
``RESTART_SCRIPT_FAULT=checkpoint@RANK`` makes rank RANK raise torch's ``CheckpointException`` (a
``BaseException``) instead, ``sleep@RANK`` makes it sleep in Python (its work can be interrupted there).

Every rank writes ``OUT_DIR/pid-ATTEMPT-RANK``. The launching process prints one ``OUTCOME {json}``
line: rank 0's result (its attempt, ``TORCHELASTIC_RESTART_COUNT`` and an all-reduced sum), or the
error's type, rank, exit code and message.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2])]  # runtime_workers, the repository

import torch  # noqa: E402
from runtime_workers import this_process  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import runtime  # noqa: E402


def work(strategy: runtime.Strategy, out: str, failures: int) -> dict[str, object]:
    attempt = strategy.restart_count
    Path(out, f"pid-{attempt}-{strategy.global_rank}").write_text(this_process())
    total = strategy.collective.all_reduce(torch.tensor([float(strategy.global_rank + 1)]), "sum")
    kind, _, faulty = os.environ.get("RESTART_SCRIPT_FAULT", "").partition("@")
    if kind and attempt < failures and strategy.global_rank == int(faulty):
        if kind == "sleep":
            time.sleep(600)
        # What torch's distributed checkpoint raises when a save fails: it maps a rank to its error.
        raise CheckpointException("could not save epoch-1", {strategy.global_rank: OSError("disk quota exceeded")})
    if not kind and attempt < failures and strategy.global_rank == 1:
        if os.environ.get("RESTART_SCRIPT_HANG"):
            time.sleep(600)
        os.kill(os.getpid(), signal.SIGKILL)
    strategy.collective.barrier()
    return {"attempt": attempt, "variable": os.environ.get("TORCHELASTIC_RESTART_COUNT"), "sum": total.item()}


if __name__ == "__main__":
    strategy, max_restarts, failures, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    timeout = float(os.environ.get("RESTART_SCRIPT_TIMEOUT", "90"))
    try:
        result = runtime.launch(work, out, failures, accelerator="cpu", devices=2, strategy=strategy,
                                max_restarts=max_restarts, timeout=timeout)  # fmt: skip
        outcome: dict[str, object] = {"result": result}
    except (runtime.RankFailedError, runtime.LaunchTimeoutError, runtime.RuntimeConfigError) as exc:
        outcome = {"error": type(exc).__name__, "rank": getattr(exc, "rank", None),
                   "exit_code": getattr(exc, "exit_code", None), "message": str(exc)}  # fmt: skip
    if os.environ.get("RESOLVER_CONFIG") is None:  # the launching process (not a re-run rank)
        print("OUTCOME " + json.dumps(outcome) + "\n", end="", flush=True)
