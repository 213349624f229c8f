"""What the runtime uses of resolver beyond its public names: the one internal module it may import.

The runtime reads a resolved config through the public names (``resolver.ResolvedConfig``,
``resolver.Provenance``, ``resolver.Environment``, ``resolver.ResolutionError``,
``resolver.Reporter``, ``resolver.api``, ``resolver.flagsfile``, ``resolver.plugins``). What it needs
besides is re-exported here: the flag declarations (``runtime.launch()`` takes the flags as keyword
arguments, and a script's own flags are checked against them), the one check of a timeout, the
rank arithmetic the rules use, so that a launcher computes a rank exactly as the rules do, and the
one rendering of an error (``diagnostic``), so that a rank prints a runtime error as the command
line prints it.
``pyproject.toml``'s ``runtime-resolver-surface`` contract forbids the runtime every other private
module of resolver. Importing this module never imports torch, the rule engine or the rule files.
"""

from __future__ import annotations

from resolver._domain.flag_values import given_flags
from resolver._domain.flags import FLAG_DEFAULTS, FLAGS, collect_flags
from resolver._domain.functions import local_rank_in_world
from resolver._domain.timeouts import parse_timeout, timeout_problem
from resolver._engine.errors import diagnostic

__all__ = [
    "FLAGS",
    "FLAG_DEFAULTS",
    "collect_flags",
    "diagnostic",
    "given_flags",
    "local_rank_in_world",
    "parse_timeout",
    "timeout_problem",
]
