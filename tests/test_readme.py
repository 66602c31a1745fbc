"""The README's two commands are promises: keep them true."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text)[:2]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, test_command = readme_commands()
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_readme_install_command_starts_the_console_script_pyproject_declares() -> None:
    install_command, _ = readme_commands()
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["pingu"] == "pingu.cli:main"
    assert install_command.endswith("/bin/pingu gateway")
    assert "pip install ." in install_command
