"""The first host of a compressed SLURM-style host list (``node[001-004,007],login2``).

The rules compute the rendezvous address with it (``resolver.functions.first_host``); kept here
under its old name for callers of the runtime.
"""

from resolver.functions import first_host

__all__ = ["first_host"]
