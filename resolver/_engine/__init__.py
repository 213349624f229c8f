"""The rule engine, domain-free: rule files in, a compiled table, an evaluation with its reasons out.

It knows slots, rules, stages, conditions and functions, nothing about accelerators or clusters, and
imports nothing of ``resolver`` outside this package (only attrs, cattrs and networkx besides the
standard library); the ``resolver-engine`` import contract in ``pyproject.toml`` keeps it so.

Its classes are frozen attrs classes. Those a table is made of (rules, slots, conditions, values,
the table itself) are ``eq=False``: each is one object, compared by identity, and an attrs
``__eq__`` and ``__hash__`` would cost every process compiling them at import (about 0.1 ms a
class). What a caller compares (``Provenance``, ``Side``) keeps value equality.
"""
