"""Reading torch's flight recorder from a rank process that is busy elsewhere (runtime._protocol.flight_recorder).

A real process answers on its named pipe while its main thread is held in a loop, as a hung rank's is;
the summary is checked on dumps shaped as torch writes them, one per recorder (NCCL's where torch has it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from runtime._protocol import flight_recorder

ROOT = Path(__file__).resolve().parents[3]
RANK = """
import sys, time
import torch.distributed as dist
from runtime._protocol import flight_recorder
dist.init_process_group("gloo", rank=0, world_size=1, init_method="tcp://127.0.0.1:0")
dist.all_reduce(__import__("torch").ones(3))
flight_recorder.answer_requests(sys.argv[1], 5)
time.sleep(0.5)  # its thread reaches its pipe (a launcher asking sooner tries for PIPE_WAIT)
print("ready", flush=True)
while True:  # the main thread never returns to Python's idle: only the thread can answer
    sum(range(1000))
"""


def test_a_busy_rank_answers_with_torchs_record_and_one_without_the_thread_is_not_waited_for(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rank = subprocess.Popen([sys.executable, "-c", RANK, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert rank.stdout is not None and rank.stdout.readline() == "ready\n"
        started = time.monotonic()
        dumps = flight_recorder.request_dumps(str(tmp_path), [5, 6])  # rank 6 has no pipe: not waited for
        assert time.monotonic() - started < flight_recorder.DUMP_WAIT
        assert list(dumps) == [5]
        record = dumps[5]["CPU"]
        last = record["entries"][-1]
        assert (last["profiling_name"], last["input_sizes"]) == ("gloo:all_reduce", [[3]])
        assert flight_recorder.summary(dumps) == ["rank 5: all_reduce #1 of default_pg (Float [3]), scheduled"]
        # asked again (a second stall of a restarted round): a fresh dump
        assert list(flight_recorder.request_dumps(str(tmp_path), [5])) == [5]
    finally:
        rank.kill()
        rank.wait()


def _entry(seq: int, name: str, state: str, group: str = "default_pg") -> dict[str, object]:
    return {"collective_seq_id": seq, "profiling_name": name, "state": state, "process_group": ["0", group],
            "input_sizes": [[1024]], "input_dtypes": ["Float"]}  # fmt: skip


def test_the_summary_names_each_ranks_last_collective_per_group_and_recorder() -> None:
    dumps = {
        1: {"NCCL": {"entries": [_entry(811, "nccl:all_reduce", "completed"),
                                 _entry(812, "nccl:broadcast", "started")]},
            "CPU": {"entries": [_entry(3, "gloo:barrier", "scheduled", "gloo_pg")]}},
        0: {"NCCL": {"entries": [_entry(812, "nccl:all_reduce", "started")]}, "CPU": {"entries": []}},
        2: {"unavailable": "this torch has no flight recorder dump"},
    }  # fmt: skip
    assert flight_recorder.summary(dumps) == [
        "rank 0: all_reduce #812 of default_pg, NCCL (Float [1024]), started",
        "rank 1: broadcast #812 of default_pg, NCCL (Float [1024]), started",
        "rank 1: barrier #3 of gloo_pg (Float [1024]), scheduled",
        "rank 2: no record (this torch has no flight recorder dump)",
    ]
