"""systemd/pingu.service: the directives the daemon relies on, and `systemd-analyze verify`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pingu.channels.telegram.channel import CLOSE_GRACE_S
from pingu.daemon.app import DEFAULT_GRACE_S, HTTP_SHUTDOWN_TIMEOUT_S

UNIT = Path(__file__).resolve().parents[1] / "systemd" / "pingu.service"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|sec|min)?", value)
    assert match, value
    return float(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_unit_is_a_hardened_notify_service() -> None:
    unit = parse_unit(UNIT.read_text())
    service = {key: values[-1] for key, values in unit["Service"].items()}

    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert seconds(service["WatchdogSec"]) > 0
    assert service["Restart"] == "on-failure"
    assert "pingu gateway" in service["ExecStart"]

    grace = float(re.search(r"--grace (\S+)", service["ExecStart"]).group(1))  # type: ignore[union-attr]
    assert grace == DEFAULT_GRACE_S
    # The whole stop: the grace, then Telegram deliveries, then the HTTP server.
    longest_stop = grace + CLOSE_GRACE_S + HTTP_SHUTDOWN_TIMEOUT_S
    assert seconds(service["TimeoutStopSec"]) > longest_stop, "systemd would kill a stop"

    assert service["StateDirectory"] == "pingu"
    assert "PINGU_STATE_DIR=/var/lib/pingu" in unit["Service"]["Environment"]
    assert "PINGU_CONFIG=%d/config.toml" in unit["Service"]["Environment"]
    assert service["LoadCredential"] == "config.toml:/etc/pingu/config.toml"
    assert service["EnvironmentFile"].endswith("/etc/pingu/pingu.env")
    for key, value in {
        "DynamicUser": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    }.items():
        assert service[key] == value, key
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not here")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at a binary this machine has.
    text = UNIT.read_text().replace("/usr/local/bin/pingu", shutil.which("true") or "/bin/true")
    copy = tmp_path / "pingu.service"
    copy.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "pingu.service" not in result.stderr, result.stderr
