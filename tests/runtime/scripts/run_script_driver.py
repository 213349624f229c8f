"""What ``resolver run --devices 2 --strategy ddp SCRIPT ARGS...`` does: ``python run_script_driver.py SCRIPT ARGS...``.

The config is resolved once here, with ``use_distributed_sampler=False`` added so the ranks can
show they received this config rather than resolving their own.
"""

import sys
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import resolver  # noqa: E402
import runtime  # noqa: E402

config = resolver.resolve(devices=2, strategy="ddp")
config = attrs.evolve(config, strategy_options={"use_distributed_sampler": False})
sys.exit(runtime.run_script(config, sys.argv[1], sys.argv[2:], timeout=60))
