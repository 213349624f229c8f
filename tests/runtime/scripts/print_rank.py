"""A plain script (no torch) for ``run_script``: ``python print_rank.py OUT_DIR [FAILING_RANK CODE]``.

Prints what its environment says about its rank; the failing rank exits with CODE, the others
wait to be stopped.
"""

import json
import os
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
rank = os.environ["RANK"]
start_time = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
(out / f"pid-{rank}").write_text(f"{os.getpid()}:{start_time}")
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
names += ("MASTER_ADDR", "MASTER_PORT")
config = json.loads(os.environ["RESOLVER_CONFIG"])
line = "RANK-ENV " + json.dumps({**{n: os.environ[n] for n in names}, "config_rank": config["global_rank"]})
sys.stdout.write(line + "\n")  # one write: the ranks share the output stream
sys.stdout.flush()
if len(sys.argv) > 2:
    if rank == sys.argv[2]:
        sys.exit(int(sys.argv[3]))
    time.sleep(60)
