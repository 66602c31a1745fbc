"""`pingu init` and `pingu config get|set|check|path`, as a user runs them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pingu.cli import main
from pingu.config import load_config

TOKEN = "123456:AAH-secret-bot-token-value"
API_KEY = "sk-test-0123456789abcdefghijkl"


def clean_env(tmp_path: Path) -> dict[str, str | None]:
    return {
        "HOME": str(tmp_path),
        "PINGU_CONFIG": None,
        "OPENAI_API_KEY": None,
        "TELEGRAM_BOT_TOKEN": None,
        "LOG_LEVEL": None,
        "PINGU_ALLOWED_USERS": None,
        "PINGU_MODEL": None,
    }


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**clean_env(tmp_path), **(env or {})})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run_subprocess(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in clean_env(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "pingu", *args],
        capture_output=True,
        text=True,
        env={**base, "HOME": str(tmp_path), **env},
        timeout=60,
    )


# --- config check through the real `python -m pingu` --------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[llm.openai]\nmodel = "a"\nbase_url = \n', "line 3: invalid TOML: "),
        ("[llm.openai]\nmodel = 5\n", "llm.openai.model: expected a string, got integer 5"),
        ('[channel.chat]\ntype = "irc"\n', "channel.chat.type: expected one of telegram, got"),
        ('[agent.a]\ntools = ["nuke"]\n', 'agent.a.tools: unknown tool string "nuke"'),
        ('default_llm = "x"\n', 'default_llm: names no [llm.*] section: got "x"'),
        ("[gateway]\ntoken = 42424242\n", "gateway.token: expected a string, got integer"),
    ],
)
def test_config_check_refuses_with_one_line_and_exit_2(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    proc = run_subprocess(tmp_path, "config", "check", "--config", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"pingu: config error: {path}")
    assert expected in lines[0]
    assert "42424242" not in proc.stderr  # the secret of the last case
    assert proc.stdout == ""


def test_config_check_via_pingu_config_env(tmp_path: Path) -> None:
    path = tmp_path / "env.toml"
    path.write_text('[log]\nlevel = "loud"\n')
    proc = run_subprocess(tmp_path, "config", "check", PINGU_CONFIG=str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"pingu: config error: {path}: log.level: expected one of debug, info, warning, error, "
        f'got string "loud"'
    )


def test_config_check_missing_explicit_file(tmp_path: Path) -> None:
    proc = run_subprocess(tmp_path, "config", "check", "--config", str(tmp_path / "no.toml"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"pingu: config error: {tmp_path / 'no.toml'}: no such file"


def test_config_check_ok_and_defaults(tmp_path: Path) -> None:
    result = run(tmp_path, "config", "check")
    assert result.exit_code == 0
    assert "no such file; the defaults are valid" in result.stdout
    path = tmp_path / "c.toml"
    path.write_text('[llm.openai]\nmodel = "gpt-5"\n[agent.coder]\ntools = ["shell"]\n')
    result = run(tmp_path, "config", "check", "--config", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"{path}: ok")
    assert "agents: coder" in result.stdout


def test_config_path(tmp_path: Path) -> None:
    result = run(tmp_path, "config", "path")
    assert result.stdout.strip() == str(tmp_path / ".config/pingu/config.toml")
    result = run(tmp_path, "config", "path", env={"PINGU_CONFIG": str(tmp_path / "x.toml")})
    assert result.stdout.strip() == str(tmp_path / "x.toml")


# --- pingu init ----------------------------------------------------------------------


def test_init_writes_a_0600_config_that_passes_check(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        "init",
        "--bot-token",
        TOKEN,
        "--allowed-users",
        "111, 222",
        "--api-key",
        API_KEY,
        "--model",
        "gpt-4.1-mini",
    )
    assert result.exit_code == 0, result.stderr
    path = tmp_path / ".config/pingu/config.toml"
    assert result.stdout.startswith(f"Wrote {path}")
    assert TOKEN not in result.stdout and API_KEY not in result.stdout
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    config = load_config(None, env={"HOME": str(tmp_path)})
    assert config.path == path
    assert config.llm["openai"].model == "gpt-4.1-mini"
    assert config.llm["openai"].api_key == API_KEY
    tg = config.channels["telegram"]
    assert tg.enabled and tg.settings.bot_token == TOKEN
    assert tg.settings.allowed_users == (111, 222)
    assert run(tmp_path, "config", "check").exit_code == 0


def test_init_takes_values_from_env(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    result = run(
        tmp_path,
        "init",
        "--config",
        str(path),
        env={
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "OPENAI_API_KEY": API_KEY,
            "PINGU_ALLOWED_USERS": "7",
            "PINGU_MODEL": "gpt-5",
        },
    )
    assert result.exit_code == 0, result.stderr
    config = load_config(path, env={})
    assert config.channels["telegram"].settings.allowed_users == (7,)
    assert config.llm["openai"].model == "gpt-5"
    assert config.llm["openai"].api_key == API_KEY


def test_init_without_bot_token_writes_no_channel(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    result = run(tmp_path, "init", "--config", str(path))  # stdin is no terminal: no prompts
    assert result.exit_code == 0, result.stderr
    assert "No Telegram channel" in result.stdout
    assert "[channel" not in path.read_text()
    config = load_config(path, env={})
    assert dict(config.channels) == {}
    assert config.llm["openai"].model == "gpt-4.1-nano"
    assert config.llm["openai"].api_key is None


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("# mine\n")
    path.chmod(0o600)
    result = run(tmp_path, "init", "--config", str(path), "--bot-token", TOKEN)
    assert result.exit_code == 1
    assert "already exists; use --force" in result.stderr
    assert path.read_text() == "# mine\n"
    result = run(tmp_path, "init", "--config", str(path), "--bot-token", TOKEN, "--force")
    assert result.exit_code == 0, result.stderr
    assert load_config(path, env={}).channels["telegram"].settings.bot_token == TOKEN
    assert mode(path) == 0o600


def test_init_rejects_bad_user_ids(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    result = run(
        tmp_path, "init", "--config", str(path), "--bot-token", TOKEN, "--allowed-users", "1,bob"
    )
    assert result.exit_code == 2
    assert "'bob'" in result.stderr
    assert not path.exists()


# --- pingu config get ----------------------------------------------------------------

CONFIG = f"""\
# Pingu config of the test user.
default_llm = "openai"  # the usual one

[llm.openai]
model = "gpt-4.1-mini"   # cheap and good
api_key = "{API_KEY}"
# base_url = "http://localhost:8000/v1"

# The HTTP API.
[gateway]
addr = "127.0.0.1:8484"

[channel.telegram]
type = "telegram"

[channel.telegram.settings]
bot_token = "{TOKEN}"
allowed_users = "1, 2"  # me and my partner

# end of file
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    path.chmod(0o600)
    return path


def test_get_values(tmp_path: Path, config_file: Path) -> None:
    def get(key: str, *extra: str) -> Result:
        return run(tmp_path, "config", "get", key, "--config", str(config_file), *extra)

    assert get("llm.openai.model").stdout == "gpt-4.1-mini\n"
    assert get("llm.openai.timeout_s").stdout == "120.0\n"  # a default
    assert get("channel.telegram.settings.allowed_users").stdout == "[\n    1,\n    2,\n]\n"
    assert get("channel.telegram.enabled").stdout == "true\n"
    masked = get("llm.openai.api_key").stdout
    assert masked == f"****{API_KEY[-4:]}\n"
    assert get("llm.openai.api_key", "--reveal").stdout == f"{API_KEY}\n"
    table = get("channel.telegram").stdout
    assert TOKEN not in table and "bot_token = " in table and "[settings]" in table
    missing = get("llm.openai.base_url")
    assert missing.exit_code == 1
    assert "llm.openai.base_url: not set" in missing.stderr


def test_get_defaults_and_env_secret(tmp_path: Path) -> None:
    result = run(tmp_path, "config", "get", "gateway.addr")
    assert result.stdout == ":8484\n"
    result = run(tmp_path, "config", "get", "llm.openai.api_key", env={"OPENAI_API_KEY": API_KEY})
    assert result.stdout == f"****{API_KEY[-4:]}\n"


def test_get_on_a_bad_config_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[gateway]\nport = 1\n")
    result = run(tmp_path, "config", "get", "gateway.addr", "--config", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"pingu: config error: {path}: gateway.port: unknown key")


# --- pingu config set ----------------------------------------------------------------


def set_(tmp_path: Path, path: Path, key: str, value: str, **env: str) -> Result:
    return run(tmp_path, "config", "set", key, value, "--config", str(path), env=env)


def test_set_replaces_a_value_and_keeps_every_other_line(tmp_path: Path, config_file: Path) -> None:
    result = set_(tmp_path, config_file, "llm.openai.model", "gpt-5")
    assert result.exit_code == 0, result.stderr
    before = CONFIG.splitlines()
    after = config_file.read_text().splitlines()
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [4]
    assert after[4] == 'model = "gpt-5"   # cheap and good'
    assert mode(config_file) == 0o600
    assert load_config(config_file, env={}).llm["openai"].model == "gpt-5"


def test_set_adds_keys_and_tables_without_touching_the_rest(
    tmp_path: Path, config_file: Path
) -> None:
    steps = [
        ("llm.openai.timeout_s", "30"),
        ("llm.fast.model", "gpt-4.1-nano"),
        ("gateway.token", "gw-secret-token"),
        ("log.level", "debug"),
        ("agent.coder.tools", '["shell", "file"]'),
        ("agent.coder.system_prompt", '"You write code."'),
        ("channel.telegram.settings.allowed_users", "[1, 2, 3]"),
    ]
    for key, value in steps:
        result = set_(tmp_path, config_file, key, value)
        assert result.exit_code == 0, result.stderr
    assert "gw-secret-token" not in result.stdout
    text = config_file.read_text()
    untouched = [line for line in CONFIG.splitlines() if "allowed_users" not in line]
    lines = text.splitlines()
    # every line the user wrote is still there, unchanged and in the same order
    positions = [lines.index(line, 0) for line in untouched if line]
    assert positions == sorted(positions)
    assert "allowed_users = [1, 2, 3]  # me and my partner" in lines
    # the comment that introduced [gateway] still sits right above it
    assert lines[lines.index("[gateway]") - 1] == "# The HTTP API."
    config = load_config(config_file, env={})
    assert config.llm["openai"].timeout_s == 30.0
    assert config.llm["fast"].model == "gpt-4.1-nano"
    assert config.gateway.token == "gw-secret-token"
    assert config.log.level == "debug"
    assert config.agents["coder"].tools == ("shell", "file")
    assert config.agents["coder"].system_prompt == "You write code."
    assert mode(config_file) == 0o600


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("42", 42),
        ("2.5", 2.5),
        ("true", True),
        ("[1, 2]", [1, 2]),
        ('"quoted 42"', "quoted 42"),
        ("plain words", "plain words"),
        ("1,2", "1,2"),
        ("x = 1", "x = 1"),
        ("1\nother = 2", "1\nother = 2"),
    ],
)
def test_set_value_parsing(value: str, expected: object) -> None:
    from pingu.config.edit import parse_value

    assert parse_value(value) == expected


def test_set_quoted_key_for_model_names_with_dots(tmp_path: Path, config_file: Path) -> None:
    result = set_(tmp_path, config_file, 'pricing."gpt-4.1"', "{input = 2, output = 8}")
    assert result.exit_code == 0, result.stderr
    assert load_config(config_file, env={}).pricing["gpt-4.1"].output == 8.0


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("gateway.addr", "localhost", 'gateway.addr: expected "host:port" or ":port"'),
        ("llm.openai.timeout_s", "-5", "llm.openai.timeout_s: expected a positive number"),
        ("agent.a.tools", '["rm"]', 'agent.a.tools: unknown tool string "rm"'),
        ("default_llm", "nope", "default_llm: names no [llm.*] section"),
        ("channel.telegram.type", "irc", "channel.telegram.type: expected one of telegram"),
        ("gateway.colour", "blue", "gateway.colour: unknown key"),
        ("llm.openai.model.name", "x", "llm.openai.model: is a value, not a table"),
    ],
)
def test_set_refuses_invalid_values_and_leaves_the_file_byte_identical(
    tmp_path: Path, config_file: Path, key: str, value: str, expected: str
) -> None:
    before = config_file.read_bytes()
    result = set_(tmp_path, config_file, key, value)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"pingu: config error: {config_file}: ")
    assert expected in result.stderr
    assert config_file.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]  # no temp file left


def test_set_never_echoes_a_secret_in_its_error(tmp_path: Path, config_file: Path) -> None:
    before = config_file.read_bytes()
    result = set_(tmp_path, config_file, "llm.openai.api_key", "98765432109876")
    assert result.exit_code == 2
    assert "llm.openai.api_key: expected a string, got integer" in result.stderr
    assert "98765432109876" not in result.stderr + result.stdout
    assert config_file.read_bytes() == before


def test_set_of_a_whole_table_masks_the_secrets_it_holds(tmp_path: Path, config_file: Path) -> None:
    result = set_(
        tmp_path, config_file, "llm.openai", '{model = "m", api_key = "sk-in-a-table-1234"}'
    )
    assert result.exit_code == 0, result.stderr
    assert "sk-in-a-table-1234" not in result.stdout + result.stderr
    assert 'model = "m"' in result.stdout
    config = load_config(config_file, env={"HOME": str(tmp_path)})
    assert config.llm["openai"].api_key == "sk-in-a-table-1234"


def test_set_refuses_to_edit_invalid_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"[gateway\naddr = 1\n")
    result = set_(tmp_path, path, "gateway.addr", ":1")
    assert result.exit_code == 2
    assert f"{path} line 1: invalid TOML" in result.stderr
    assert path.read_bytes() == b"[gateway\naddr = 1\n"


def test_set_creates_the_file_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "new/dir/config.toml"
    result = set_(tmp_path, path, "llm.openai.model", "gpt-5")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"Created {path}")
    assert mode(path) == 0o600
    assert path.read_text() == '[llm.openai]\nmodel = "gpt-5"\n'


def test_set_makes_a_readable_file_0600(tmp_path: Path, config_file: Path) -> None:
    config_file.chmod(0o644)
    assert set_(tmp_path, config_file, "log.format", "json").exit_code == 0
    assert mode(config_file) == 0o600


def test_set_validates_with_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("")
    refused = set_(tmp_path, path, "channel.telegram.enabled", "true")
    assert refused.exit_code == 2
    assert "channel.telegram.settings.bot_token: missing" in refused.stderr
    accepted = set_(tmp_path, path, "channel.telegram.enabled", "true", TELEGRAM_BOT_TOKEN=TOKEN)
    assert accepted.exit_code == 0, accepted.stderr
    assert TOKEN not in path.read_text()


def test_set_through_a_symlink_edits_the_target(tmp_path: Path, config_file: Path) -> None:
    link = tmp_path / "link.toml"
    link.symlink_to(config_file)
    assert set_(tmp_path, link, "log.level", "warning").exit_code == 0
    assert link.is_symlink()
    assert load_config(config_file, env={}).log.level == "warning"


def test_set_bad_key_is_a_usage_error(tmp_path: Path, config_file: Path) -> None:
    result = set_(tmp_path, config_file, "llm..model", "x")
    assert result.exit_code == 2
    assert "not a valid dotted key" in result.stderr
