"""``runtime.launched_config()``: the resolved config a launcher handed this process, if one did.

A rank that ``resolver run`` or a launcher of ``runtime.launch`` started reads its config (with its own
``global_rank`` and ``local_rank``) here, before its strategy exists or without one; the launcher and its
ranks share the variable that carries it (:mod:`runtime._protocol.rank_environment`).
"""

from __future__ import annotations

from runtime._protocol.rank_environment import launched_config

__all__ = ["launched_config"]
