"""The result ``runtime.launch`` returns on a node whose ranks it started as a member of torch's c10d
rendezvous (nodes that restart together): the node's first rank pickles its function's return value into
the folder :data:`NODE_RESULT_VARIABLE` names, each round over the last, and the launching process reads
it once the run succeeded."""

from __future__ import annotations

import os
from typing import Any

from runtime._protocol.rank_files import RankFiles

__all__ = ["NODE_RESULT_VARIABLE", "keep_node_result", "node_result"]

#: The folder where a node's first rank leaves its result for the launching process.
NODE_RESULT_VARIABLE = "RUNTIME_NODE_RESULT_DIR"


def keep_node_result(result: Any, local_rank: int) -> bool:
    """In a rank: leave ``result`` for the launching process, if it asked for it and this is its first rank;
    whether it was left (the launching process goes on with it, as this node's first rank)."""
    directory = os.environ.get(NODE_RESULT_VARIABLE)
    if not directory or local_rank != 0 or not os.path.isdir(directory):
        return False
    RankFiles(directory).write_result(0, result)
    return True


def node_result(directory: str) -> Any:
    """In the launching process: what the node's first rank returned in the last round (``None``: nothing)."""
    files = RankFiles(directory)
    return files.read_result(0) if files.has_result(0) else None
