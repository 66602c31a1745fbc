"""The systemd notify protocol (sd_notify), without libsystemd.

systemd passes the path of a unix datagram socket in `NOTIFY_SOCKET` (a leading `@`
means an abstract-namespace address) and, with `WatchdogSec=`, the watchdog period in
`WATCHDOG_USEC`. A state message is newline-separated `KEY=VALUE` pairs sent as one
datagram. Without `NOTIFY_SOCKET` (not run by systemd, or `Type=simple`) every call is a
no-op. Sends never block the event loop and never raise: a notification that cannot be
delivered is logged and dropped, the daemon keeps working.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, MutableMapping

import structlog

log = structlog.get_logger("pingu.daemon.notify")

# Variables systemd sets for the main process only; children (shell tools) must not see
# them, or they could send notifications in the daemon's name.
NOTIFY_ENV_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def socket_address(value: str) -> str | bytes:
    """The `sendto` address for a `NOTIFY_SOCKET` value: `@name` is abstract (`\\0name`)."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def watchdog_interval(env: Mapping[str, str]) -> float | None:
    """Seconds between WATCHDOG=1 pings (half the configured period), or None when the
    watchdog is off or meant for another process (`WATCHDOG_PID`)."""
    raw = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


class Notifier:
    """Sends state changes to systemd's notify socket."""

    def __init__(self, address: str | None, *, watchdog_s: float | None = None) -> None:
        self._address = socket_address(address) if address else None
        self.watchdog_s = watchdog_s
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, env: MutableMapping[str, str], *, unset: bool = False) -> Notifier:
        """Read `NOTIFY_SOCKET` and `WATCHDOG_USEC` from `env`; with `unset`, remove them
        so that subprocesses do not inherit them (like sd_notify's unset_environment)."""
        notifier = cls(env.get("NOTIFY_SOCKET") or None, watchdog_s=watchdog_interval(env))
        if unset:
            for name in NOTIFY_ENV_VARS:
                env.pop(name, None)
        return notifier

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send `KEY=VALUE` assignments in one datagram. True if it was sent."""
        if self._address is None or not assignments:
            return False
        message = "\n".join(assignments).encode()
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto(message, self._address)
        except OSError as exc:
            # Includes BlockingIOError (systemd not reading) and a vanished socket.
            log.warning("sd_notify_failed", error=str(exc), message=assignments[0])
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *self._status(status))

    def stopping(self, status: str | None = None) -> bool:
        return self.notify("STOPPING=1", *self._status(status))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(*self._status(text))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @staticmethod
    def _status(text: str | None) -> tuple[str, ...]:
        # STATUS is one line of free text; a newline would start a new assignment.
        return (f"STATUS={' '.join(text.split())}",) if text else ()
