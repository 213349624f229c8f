"""Rules-as-data resolution of distributed-training flags.

    >>> import resolver
    >>> cfg = resolver.resolve(devices=2, strategy="ddp", environment=resolver.Environment())
    >>> cfg.strategy, cfg.launcher, cfg.world_size
    ('ddp', 'subprocess', 2)

Importing this package never imports torch.
"""

from resolver.api import builtin_rules_dir, load_rules, resolve
from resolver.compiler import CompiledTable
from resolver.config import FrozenMapping, Provenance, ResolvedConfig
from resolver.environment import Environment
from resolver.errors import ConflictError, ResolutionError, RuleTableError, Side
from resolver.functions import register_function
from resolver.probing import register_probe
from resolver.reporter import RecordingReporter, Reporter

__all__ = [
    "CompiledTable",
    "ConflictError",
    "Environment",
    "FrozenMapping",
    "Provenance",
    "RecordingReporter",
    "Reporter",
    "ResolutionError",
    "ResolvedConfig",
    "RuleTableError",
    "Side",
    "builtin_rules_dir",
    "load_rules",
    "register_function",
    "register_probe",
    "resolve",
]

__version__ = "0.1.0"
