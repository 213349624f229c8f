"""What ``resolver check``'s local launcher can tell before it starts a rank.

A rendezvous that cannot work whatever the ranks do is found here in a fraction of a second, as
``resolver run`` finds it, instead of after the ranks import torch and wait out the timeout: a
main port another process listens on (named, with the process where it can be told), a main
address this host cannot resolve or route to, and, where every rank runs here, a main address that
is not this host's. No rank is started then: the others would only wait for rank 0.
"""

from __future__ import annotations

import socket
from collections.abc import MutableMapping, Sequence

from resolver import ResolvedConfig
from runtime._gloo_interface import choose_gloo_interface
from runtime._protocol.port_holder import port_holder
from runtime._protocol.ports import host_holds, port_is_free
from runtime.errors import busy_port_fix
from runtime.preflight.report import FAIL, Check

__all__ = ["QUIET_TORCH_LOG", "before_ranks", "quiet_torch_log"]

#: What keeps torch's C++ log (c10d's ``TCPStore ... retrying`` warnings, each with a stack of ``frame #N``
#: lines) out of a check's ranks: the check reports each failure itself, from the Python error.
QUIET_TORCH_LOG = {"TORCH_CPP_LOG_LEVEL": "FATAL"}

_NOT_STARTED = "no rank was started: the others could only wait for rank 0"


def before_ranks(config: ResolvedConfig, ranks: Sequence[int], address: str, port: int, source: str) -> Check | None:
    """The rendezvous check's failure when this node's ``ranks`` cannot meet at ``address:port``, else None.

    ``source`` names where the port came from (``MASTER_PORT``, ``--master-port``, ...), for the message.
    """
    from runtime.errors import RuntimeConfigError

    host = socket.gethostname()
    if config.node_rank == 0 and not port_is_free(port):
        holder = port_holder(port)
        by = f" ({holder})" if holder else ""
        fix = busy_port_fix(source, port)
        if "ss -ltnp" not in fix:
            fix += f"; or stop what holds it (`ss -ltnp sport = :{port}`)"
        return Check("rendezvous", FAIL,
                     f"rank 0 on {host} cannot listen on port {port} (from {source}): another process uses it{by}; "
                     f"{_NOT_STARTED}", (0,), (host,), fix=fix)  # fmt: skip
    try:
        choose_gloo_interface(address, {})  # resolves the name and finds a route, or says why not
    except RuntimeConfigError as exc:
        return Check("rendezvous", FAIL, f"{_span(ranks)} on {host}: {exc.message}; no rank was started", ranks,
                     [host] * len(ranks), fix=exc.hint or "set MASTER_ADDR to an address of rank 0's host")  # fmt: skip
    if config.num_nodes == 1 and not host_holds(address):
        return Check("rendezvous", FAIL,
                     f"rank 0 on {host}: the main address {address} is not an address of this host, where every "
                     f"rank of this run starts, so rank 0 cannot host the rendezvous there; {_NOT_STARTED}",
                     (0,), (host,),
                     fix=f"set MASTER_ADDR (or --master-addr) to this host ({host}), one of its addresses, or "
                     "127.0.0.1, or unset it")  # fmt: skip
    return None


def _span(ranks: Sequence[int]) -> str:
    return f"ranks {min(ranks)}-{max(ranks)}" if len(ranks) > 1 else f"rank {ranks[0]}"


def quiet_torch_log(environ: MutableMapping[str, str]) -> None:
    """Quiet torch's C++ log in the process ``environ`` is given to (this one: before torch is
    imported), unless the user chose a level (``TORCH_CPP_LOG_LEVEL`` set: theirs stays)."""
    for name, value in QUIET_TORCH_LOG.items():
        if not environ.get(name, "").strip():
            environ[name] = value
