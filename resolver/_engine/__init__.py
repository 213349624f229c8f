"""The rule engine, domain-free: rule files in, a compiled table, an evaluation with its reasons out.

It knows slots, rules, stages, conditions and functions, nothing about accelerators or clusters, and
imports nothing of ``resolver`` outside this package (only attrs, cattrs and networkx besides the
standard library); the ``resolver-engine`` import contract in ``pyproject.toml`` keeps it so.
"""
