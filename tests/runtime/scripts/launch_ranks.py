"""A user script for the subprocess launcher: ``python launch_ranks.py OUT_DIR MODE``.

MODE ``identities`` prints one JSON line with what every rank knows about itself; MODE
``fail`` makes rank 1 raise (rank 0 waits for it in a barrier); ``hang`` makes rank 1 hang;
``two_launches`` calls a fork launch before the ddp one (a re-run worker reaches the wrong
call first); ``skip_launch`` makes the re-run worker exit before it reaches launch().
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2])]  # runtime_workers, the repository

from runtime_workers import fail_on_rank, gather_identities, hang_on_rank  # noqa: E402

import runtime  # noqa: E402

out, mode = Path(sys.argv[1]), sys.argv[2]
print(f"script started as RANK={__import__('os').environ.get('RANK', 'launcher')}", flush=True)
if mode == "identities":
    result = runtime.launch(gather_identities, devices=2, strategy="ddp", timeout=60)
    if result[0]["pid"] == __import__("os").getpid():  # the launching process (rank 0) prints
        print("IDENTITIES " + json.dumps(result) + "\n", end="", flush=True)
elif mode == "fail":
    runtime.launch(fail_on_rank, 1, str(out), devices=2, strategy="ddp", timeout=60)
elif mode == "hang":
    runtime.launch(hang_on_rank, 1, str(out), devices=2, strategy="ddp", timeout=float(sys.argv[3]))
elif mode == "two_launches":
    print("SPAWN", len(runtime.launch(gather_identities, devices=2, strategy="ddp_fork", timeout=60)), flush=True)
    runtime.launch(gather_identities, devices=2, strategy="ddp", timeout=60)
elif mode == "skip_launch":
    if __import__("os").environ.get("RANK") == "1":
        sys.exit(0)
    runtime.launch(gather_identities, devices=2, strategy="ddp", timeout=60)
