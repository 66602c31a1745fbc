import subprocess
import sys


def test_pingu_help_lists_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pingu", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("init", "config", "db", "chat", "usage", "gateway"):
        assert command in out
