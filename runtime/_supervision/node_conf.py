"""The ``--rdzv-conf`` settings of nodes that restart together (torch's c10d rendezvous reads them, as torchrun
takes them), checked before anything starts: apart from :mod:`runtime._supervision.node_rendezvous`, so that
checking them imports no part of torch."""

from __future__ import annotations

from collections.abc import Mapping

from runtime.errors import RuntimeConfigError

__all__ = ["RENDEZVOUS_CONF_KEYS", "check_rendezvous_conf", "is_host_setting"]

#: The ``--rdzv-conf`` keys torch's c10d rendezvous reads (seconds, counts, booleans), as torchrun takes them.
RENDEZVOUS_CONF_KEYS = ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout",
                        "keep_alive_interval", "keep_alive_max_attempt", "read_timeout", "is_host")  # fmt: skip

_BOOLEANS = {"1": True, "true": True, "yes": True, "y": True, "on": True,
             "0": False, "false": False, "no": False, "n": False, "off": False}  # fmt: skip


def check_rendezvous_conf(conf: Mapping[str, str]) -> None:
    """Refuse a ``--rdzv-conf`` key torch's c10d rendezvous does not read, or a value it cannot take."""
    for key, value in conf.items():
        where = f"--rdzv-conf {key}={value}"
        if key not in RENDEZVOUS_CONF_KEYS:
            raise RuntimeConfigError(
                f"{where}: torch's c10d rendezvous has no setting {key!r}",
                hint=f"use one of {', '.join(RENDEZVOUS_CONF_KEYS)}",
            )
        if key == "is_host":
            if value.strip().lower() not in _BOOLEANS:
                raise RuntimeConfigError(f"{where}: not a yes or no", hint="write is_host=1 or is_host=0")
        elif not (value.strip().isascii() and value.strip().isdigit() and int(value) > 0):
            raise RuntimeConfigError(f"{where}: not a whole number above 0", hint=f"e.g. {key}=30")


def is_host_setting(value: str) -> bool:
    """``--rdzv-conf is_host=VALUE`` as a yes or no (checked by :func:`check_rendezvous_conf`)."""
    return _BOOLEANS[value.strip().lower()]
