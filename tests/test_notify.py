"""The systemd notify protocol against a real unix datagram socket, in-process and with
the real `pingu gateway` process (READY=1, WATCHDOG=1 pings, STOPPING=1)."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pingu.daemon.notify import Notifier, watchdog_interval
from tests.fakes.daemon import DaemonProcess, daemon_env, write_config


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A bound datagram socket standing in for systemd's; (NOTIFY_SOCKET value, socket)."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    try:
        yield str(path), sock
    finally:
        sock.close()


async def receive(sock: socket.socket, within: float = 10.0) -> str:
    loop = asyncio.get_running_loop()
    data = await asyncio.wait_for(loop.sock_recv(sock, 4096), within)
    return data.decode()


async def test_messages_arrive_as_datagrams(notify_socket: tuple[str, socket.socket]) -> None:
    address, sock = notify_socket
    notifier = Notifier(address)
    try:
        assert notifier.enabled
        assert notifier.ready("up and\nrunning")
        assert await receive(sock) == "READY=1\nSTATUS=up and running"
        assert notifier.watchdog()
        assert await receive(sock) == "WATCHDOG=1"
        assert notifier.stopping()
        assert await receive(sock) == "STOPPING=1"
        assert notifier.status("draining 2 turns")
        assert await receive(sock) == "STATUS=draining 2 turns"
    finally:
        notifier.close()


async def test_abstract_socket_address() -> None:
    name = f"pingu-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.setblocking(False)
    notifier = Notifier("@" + name)
    try:
        assert notifier.ready()
        assert await receive(sock) == "READY=1"
    finally:
        notifier.close()
        sock.close()


def test_without_notify_socket_everything_is_a_no_op() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    assert notifier.watchdog_s is None
    assert not notifier.ready()
    assert not notifier.watchdog()


def test_a_vanished_socket_is_not_an_error(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "gone.sock"))
    assert notifier.ready() is False
    notifier.close()


def test_watchdog_interval_is_half_the_period_for_this_process() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "2000000"}) == 1.0
    assert watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}) == 1.0
    assert watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "nope"}) is None
    assert watchdog_interval({}) is None


def test_from_env_can_unset_the_variables() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1000000", "PATH": "/bin"}
    notifier = Notifier.from_env(env, unset=True)
    assert notifier.enabled and notifier.watchdog_s == 0.5
    assert env == {"PATH": "/bin"}


async def test_daemon_notifies_ready_watchdog_and_stopping(
    notify_socket: tuple[str, socket.socket], fake_responses, tmp_path: Path
) -> None:
    address, sock = notify_socket
    config = write_config(tmp_path, fake_responses)
    # A 0.2 s watchdog period: pings every 0.1 s.
    env = daemon_env({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "200000"})
    daemon = await DaemonProcess.start(config, env=env, ready=False)
    try:
        received: list[str] = []
        while not any(m.startswith("READY=1") for m in received):
            received.append(await receive(sock, within=30))
        assert daemon.process.returncode is None
        ready_at = len(received)
        # Pings keep coming from the event loop once the daemon is up.
        while received[ready_at:].count("WATCHDOG=1") < 2:
            received.append(await receive(sock))
        assert "WATCHDOG=1" in received[:ready_at], "pings start before READY"

        daemon.send_signal()
        while not any(m.startswith("STOPPING=1") for m in received):
            received.append(await receive(sock))
        assert await daemon.wait() == 0
    finally:
        await daemon.kill()
    # The process started its pings itself and nobody else wrote to the socket.
    assert {m.split("\n")[0].split("=")[0] for m in received} <= {
        "READY",
        "WATCHDOG",
        "STOPPING",
        "STATUS",
    }
    ready = next(m for m in received if m.startswith("READY=1"))
    assert f"HTTP on 127.0.0.1:{daemon.find('ready')[0]['http_port']}" in ready
