"""`load_config`: defaults, the Go Pingu keys, our extensions, environment, and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from pingu.config import Config, ConfigError, load_config
from pingu.config.model import BUILTIN_TOOL_NAMES

TOKEN = "123456:AAH-secret-bot-token"


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Config:
    return load_config(write(tmp_path, text), env={"HOME": str(tmp_path), **(env or {})})


def refuse(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"HOME": str(tmp_path), **(env or {})})
    err = info.value
    line = str(err)
    assert "\n" not in line
    assert line.startswith(str(path))
    assert err.file == path
    return err


# --- defaults -----------------------------------------------------------------


def test_missing_default_file_means_defaults(tmp_path: Path) -> None:
    config = load_config(None, env={"HOME": str(tmp_path)})
    assert config.path is None
    assert config.default_llm == "openai"
    assert list(config.llm) == ["openai"]
    assert config.llm["openai"].model == "gpt-4.1-nano"
    assert config.llm["openai"].api_key is None
    assert config.gateway.addr == ":8484"
    assert config.gateway.port == 8484
    assert config.db.path == tmp_path / ".local/share/pingu/pingu.db"
    assert config.state_dir == tmp_path / ".local/share/pingu"
    assert config.workspaces == tmp_path / ".local/share/pingu/workspaces"
    assert dict(config.channels) == {}
    assert dict(config.agents) == {}
    assert config.log.level == "info"


def test_default_path_is_used_when_it_exists(tmp_path: Path) -> None:
    path = tmp_path / ".config/pingu/config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('[llm.openai]\nmodel = "gpt-5"\n')
    config = load_config(None, env={"HOME": str(tmp_path)})
    assert config.path == path
    assert config.llm["openai"].model == "gpt-5"


def test_pingu_config_env_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[gateway]\naddr = "127.0.0.1:9000"\n', "elsewhere.toml")
    config = load_config(None, env={"HOME": str(tmp_path), "PINGU_CONFIG": str(path)})
    assert config.gateway.addr == "127.0.0.1:9000"


def test_explicit_path_wins_over_env(tmp_path: Path) -> None:
    a = write(tmp_path, '[gateway]\naddr = ":1"\n', "a.toml")
    b = write(tmp_path, '[gateway]\naddr = ":2"\n', "b.toml")
    config = load_config(a, env={"HOME": str(tmp_path), "PINGU_CONFIG": str(b)})
    assert config.gateway.addr == ":1"


@pytest.mark.parametrize("via_env", [False, True])
def test_explicit_missing_file_is_an_error(tmp_path: Path, via_env: bool) -> None:
    missing = tmp_path / "nope.toml"
    env = {"HOME": str(tmp_path)}
    if via_env:
        env["PINGU_CONFIG"] = str(missing)
    with pytest.raises(ConfigError) as info:
        load_config(None if via_env else missing, env=env)
    assert str(info.value) == f"{missing}: no such file"


def test_tilde_is_expanded_in_config_path_and_paths(tmp_path: Path) -> None:
    write(tmp_path, '[db]\npath = "~/data/p.db"\n[state]\ndir = "~/state"\n', "c.toml")
    config = load_config(Path("~/c.toml"), env={"HOME": str(tmp_path)})
    assert config.path == tmp_path / "c.toml"
    assert config.db.path == tmp_path / "data/p.db"
    assert config.state_dir == tmp_path / "state"


def test_db_path_defaults_below_state_dir_and_relative_paths_follow_the_file(
    tmp_path: Path,
) -> None:
    config = load(tmp_path, '[state]\ndir = "/srv/pingu"\nworkspace_dir = "ws"\n')
    assert config.db.path == Path("/srv/pingu/pingu.db")
    assert config.workspaces == tmp_path / "ws"
    config = load(tmp_path, '[db]\npath = "rel/p.db"\n')
    assert config.db.path == tmp_path / "rel/p.db"


# --- the Go Pingu keys and ours -----------------------------------------------------

FULL = f"""
default_llm = "fast"

[llm.openai]
model = "gpt-4.1"
api_key = "sk-file-key"

[llm.fast]
model = "gpt-4.1-nano"
base_url = "http://127.0.0.1:9999/v1/"
timeout_s = 30
max_retries = 0
provider = "local"

[gateway]
addr = "0.0.0.0:8080"
token = "gw-token"
max_body_bytes = 2048

[db]
path = "/var/lib/pingu/pingu.db"

[channel.telegram]
enabled = true
type = "telegram"

[channel.telegram.settings]
bot_token = "{TOKEN}"
allowed_users = "111, 222,333"
api_base_url = "http://127.0.0.1:8081"
poll_timeout_s = 10
edit_interval_s = 0.5
typing_interval_s = 3

[channel.old]
enabled = false
type = "telegram"

[agent.orchestrator]
system_prompt = "You coordinate."
tools = ["message", "delegate"]
llm = "openai"
max_model_calls = 4

[agent.coder]
system_prompt = "You write code."
tools = ["shell", "file"]
tool_timeout_s = 30

[limits]
max_model_calls = 8
max_tool_calls = 20
tool_timeout_s = 60
turn_timeout_s = 300
max_delegation_depth = 2

[pricing."gpt-4.1"]
input = 2.0
output = 8
cached_input = 0.5

[log]
level = "DEBUG"
format = "json"

[state]
dir = "/var/lib/pingu"
workspace_dir = "/var/lib/pingu/ws"
"""


def test_full_config(tmp_path: Path) -> None:
    config = load(tmp_path, FULL)
    assert config.default_llm == "fast"
    fast = config.llm["fast"]
    assert (fast.model, fast.base_url, fast.timeout_s, fast.max_retries, fast.provider) == (
        "gpt-4.1-nano",
        "http://127.0.0.1:9999/v1",
        30.0,
        0,
        "local",
    )
    assert config.llm["openai"].api_key == "sk-file-key"
    assert config.gateway.token == "gw-token"
    assert (config.gateway.host, config.gateway.port) == ("0.0.0.0", 8080)
    assert config.gateway.max_body_bytes == 2048
    assert config.db.path == Path("/var/lib/pingu/pingu.db")
    tg = config.channels["telegram"]
    assert (tg.type, tg.enabled) == ("telegram", True)
    assert tg.settings.bot_token == TOKEN
    assert tg.settings.allowed_users == (111, 222, 333)
    assert tg.settings.api_base_url == "http://127.0.0.1:8081"
    assert tg.settings.poll_timeout_s == 10
    assert tg.settings.edit_interval_s == 0.5
    assert config.channels["old"].enabled is False
    orch = config.agents["orchestrator"]
    assert orch.tools == ("message", "delegate")
    assert config.llm_for(orch).name == "openai"
    assert config.llm_for(config.agents["coder"]).name == "fast"
    # profile keys override [limits]; the rest come from [limits]
    assert orch.limits.max_model_calls == 4
    assert orch.limits.max_tool_calls == 20
    assert config.agents["coder"].limits.tool_timeout_s == 30.0
    assert config.agents["coder"].limits.max_model_calls == 8
    assert config.limits.turn_timeout_s == 300.0
    assert config.pricing["gpt-4.1"].output == 8.0
    assert config.pricing["gpt-4.1"].cached_input == 0.5
    assert (config.log.level, config.log.format) == ("debug", "json")
    assert config.workspaces == Path("/var/lib/pingu/ws")
    assert sorted(config.secrets()) == sorted(["sk-file-key", "gw-token", TOKEN])
    # secrets stay out of repr
    assert TOKEN not in repr(config) and "sk-file-key" not in repr(config)


def test_allowed_users_as_list_of_integers(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        f'[channel.tg]\ntype = "telegram"\n[channel.tg.settings]\n'
        f'bot_token = "{TOKEN}"\nallowed_users = [5, 6]\n',
    )
    assert config.channels["tg"].settings.allowed_users == (5, 6)
    assert config.channels["tg"].settings.api_base_url == "https://api.telegram.org"


def test_channel_named_telegram_may_omit_type(tmp_path: Path) -> None:
    config = load(tmp_path, f'[channel.telegram.settings]\nbot_token = "{TOKEN}"\n')
    assert config.channels["telegram"].type == "telegram"


def test_agent_with_no_tools_means_all(tmp_path: Path) -> None:
    config = load(tmp_path, '[agent.helper]\nsystem_prompt = "hi"\n')
    assert config.agents["helper"].tools == ()
    assert config.agents["helper"].llm is None


def test_single_llm_not_named_openai_is_the_default(tmp_path: Path) -> None:
    config = load(tmp_path, '[llm.local]\nmodel = "m"\n')
    assert config.default_llm == "local"
    assert list(config.llm) == ["local"]


# --- environment ------------------------------------------------------------------


def test_env_secrets_fill_only_what_the_file_leaves_out(tmp_path: Path) -> None:
    text = (
        '[llm.openai]\nmodel = "a"\n[llm.other]\nmodel = "b"\napi_key = "sk-own"\n'
        '[channel.telegram]\ntype = "telegram"\n'
        '[channel.second]\ntype = "telegram"\n[channel.second.settings]\nbot_token = "own:tok"\n'
    )
    env = {"OPENAI_API_KEY": "sk-env", "TELEGRAM_BOT_TOKEN": "env:tok"}
    config = load(tmp_path, text, env)
    assert config.llm["openai"].api_key == "sk-env"
    assert config.llm["other"].api_key == "sk-own"
    assert config.channels["telegram"].settings.bot_token == "env:tok"
    assert config.channels["second"].settings.bot_token == "own:tok"


def test_env_api_key_fills_the_default_llm(tmp_path: Path) -> None:
    config = load_config(None, env={"HOME": str(tmp_path), "OPENAI_API_KEY": "sk-env"})
    assert config.llm["openai"].api_key == "sk-env"


def test_log_level_env_overrides(tmp_path: Path) -> None:
    config = load(tmp_path, '[log]\nlevel = "error"\n', {"LOG_LEVEL": "WARNING"})
    assert config.log.level == "warning"


def test_state_dir_and_db_env_override_the_file(tmp_path: Path) -> None:
    text = '[state]\ndir = "/srv/file-state"\n'
    moved = load(tmp_path, text, {"PINGU_STATE_DIR": "/var/lib/pingu"})
    assert moved.state_dir == Path("/var/lib/pingu")
    assert moved.db.path == Path("/var/lib/pingu/pingu.db")
    assert moved.workspaces == Path("/var/lib/pingu/workspaces")
    both = load(tmp_path, text + '[db]\npath = "/srv/x.db"\n', {"PINGU_DB": "/tmp/y.db"})
    assert both.db.path == Path("/tmp/y.db")
    assert both.state_dir == Path("/srv/file-state")


def test_state_dir_env_does_not_hide_a_bad_file_value(tmp_path: Path) -> None:
    err = refuse(tmp_path, "[state]\ndir = 5\n", {"PINGU_STATE_DIR": "/var/lib/pingu"})
    assert "state.dir" in str(err)


def test_disabled_telegram_channel_needs_no_token(tmp_path: Path) -> None:
    config = load(tmp_path, '[channel.tg]\ntype = "telegram"\nenabled = false\n')
    assert config.channels["tg"].enabled is False


# --- refusals: one line, file, key, what was expected ----------------------------------

ERRORS = [
    pytest.param(
        "[llm.openai]\nmodel = 5\n",
        "llm.openai.model: expected a string, got integer 5",
        id="wrong-type",
    ),
    pytest.param(
        '[llm.openai]\nmodle = "x"\n',
        "llm.openai.modle: unknown key (expected one of: model, base_url, api_key,",
        id="unknown-key",
    ),
    pytest.param(
        '[telegram]\nbot_token = "x"\n',
        "telegram: unknown section (expected one of: default_llm, llm, gateway,",
        id="unknown-section",
    ),
    pytest.param("verbose = true\n", "verbose: unknown key", id="unknown-top-level-key"),
    pytest.param(
        'default_llm = "claude"\n[llm.openai]\nmodel = "m"\n',
        'default_llm: names no [llm.*] section: got "claude", have [llm.openai]',
        id="default-llm-unknown",
    ),
    pytest.param(
        'default_llm = "openai"\n[llm.a]\nmodel = "m"\n',
        'default_llm: names no [llm.*] section: got "openai", have [llm.a]',
        id="default-llm-missing-openai",
    ),
    pytest.param(
        '[llm.a]\nmodel = "m"\n[llm.b]\nmodel = "n"\n',
        "default_llm: required when there are several [llm.*] sections",
        id="default-llm-ambiguous",
    ),
    pytest.param(
        '[agent.coder]\ntools = ["shell", "rm_rf"]\n',
        'agent.coder.tools: unknown tool string "rm_rf" (expected: '
        + ", ".join(BUILTIN_TOOL_NAMES),
        id="unknown-tool",
    ),
    pytest.param(
        '[agent.coder]\ntools = "shell"\n',
        'agent.coder.tools: expected an array of tool names, got string "shell"',
        id="tools-not-a-list",
    ),
    pytest.param(
        '[agent.coder]\nllm = "nope"\n',
        'agent.coder.llm: names no [llm.*] section: got "nope"',
        id="agent-llm-unknown",
    ),
    pytest.param(
        "[agent.coder]\nmax_tool_callz = 3\n",
        "agent.coder.max_tool_callz: unknown key",
        id="agent-unknown-key",
    ),
    pytest.param(
        '[channel.chat]\ntype = "discord"\n',
        'channel.chat.type: expected one of telegram, got string "discord"',
        id="unknown-channel-type",
    ),
    pytest.param(
        "[channel.chat]\nenabled = true\n",
        "channel.chat.type: missing (expected one of: telegram)",
        id="channel-type-missing",
    ),
    pytest.param(
        '[channel.tg]\ntype = "telegram"\n',
        "channel.tg.settings.bot_token: missing: an enabled telegram channel needs a bot token"
        " (set it here or in TELEGRAM_BOT_TOKEN)",
        id="telegram-no-token",
    ),
    pytest.param(
        f'[channel.tg]\ntype = "telegram"\n[channel.tg.settings]\nbot_token = "{TOKEN}"\n'
        'allowed_users = "12, bob"\n',
        'channel.tg.settings.allowed_users: expected comma-separated integer user IDs, got "bob"',
        id="allowed-users-string-entry",
    ),
    pytest.param(
        f'[channel.tg]\ntype = "telegram"\n[channel.tg.settings]\nbot_token = "{TOKEN}"\n'
        'allowed_users = [12, "13"]\n',
        'channel.tg.settings.allowed_users: expected a list of integer user IDs, got string "13"',
        id="allowed-users-list-entry",
    ),
    pytest.param(
        f'[channel.tg]\ntype = "telegram"\n[channel.tg.settings]\nbot_token = "{TOKEN}"\n'
        "chat_id = 5\n",
        "channel.tg.settings.chat_id: unknown key (expected one of: bot_token,",
        id="telegram-unknown-setting",
    ),
    pytest.param(
        '[channel.tg]\ntype = "telegram"\nenabled = "yes"\n',
        'channel.tg.enabled: expected a boolean (true or false), got string "yes"',
        id="enabled-not-bool",
    ),
    pytest.param(
        '[gateway]\naddr = "localhost"\n',
        'gateway.addr: expected "host:port" or ":port", got string "localhost"',
        id="gateway-addr-no-port",
    ),
    pytest.param(
        '[gateway]\naddr = ":99999"\n',
        'gateway.addr: expected "host:port" or ":port", got string ":99999"',
        id="gateway-addr-port-range",
    ),
    pytest.param(
        "[gateway]\nmax_body_bytes = 0\n",
        "gateway.max_body_bytes: expected a positive integer, got 0",
        id="max-body-not-positive",
    ),
    pytest.param(
        "[llm.openai]\ntimeout_s = -1\n",
        "llm.openai.timeout_s: expected a positive number, got -1",
        id="timeout-negative",
    ),
    pytest.param(
        "[llm.openai]\nmax_retries = -1\n",
        "llm.openai.max_retries: expected an integer >= 0, got -1",
        id="retries-negative",
    ),
    pytest.param(
        "[llm.openai]\ntimeout_s = true\n",
        "llm.openai.timeout_s: expected a number, got boolean true",
        id="bool-is-not-a-number",
    ),
    pytest.param(
        '[llm.openai]\nbase_url = "api.example.com"\n',
        'llm.openai.base_url: expected an http:// or https:// URL, got string "api.example.com"',
        id="base-url-not-url",
    ),
    pytest.param(
        "[limits]\nmax_model_calls = 0\n",
        "limits.max_model_calls: expected a positive integer, got 0",
        id="limits-not-positive",
    ),
    pytest.param(
        "[limits]\nturn_timeout_s = 1.5e400\n",
        "limits.turn_timeout_s: expected a positive number, got inf",
        id="limits-infinite",
    ),
    pytest.param(
        '[pricing."gpt-4.1"]\ninput = 2\n',
        'pricing."gpt-4.1".output: missing (expected USD per million tokens)',
        id="pricing-missing-output",
    ),
    pytest.param(
        '[pricing."gpt-4.1"]\ninput = -2\noutput = 1\n',
        'pricing."gpt-4.1".input: expected a number >= 0, got -2',
        id="pricing-negative",
    ),
    pytest.param(
        '[log]\nlevel = "verbose"\n',
        'log.level: expected one of debug, info, warning, error, got string "verbose"',
        id="log-level",
    ),
    pytest.param(
        '[log]\nformat = "xml"\n',
        'log.format: expected one of auto, json, console, got string "xml"',
        id="log-format",
    ),
    pytest.param('llm = "openai"\n', "llm: expected a table, got string", id="llm-not-a-table"),
    pytest.param(
        '[llm]\nopenai = "gpt"\n',
        'llm.openai: expected a table [llm.openai], got string "gpt"',
        id="llm-entry-not-a-table",
    ),
    pytest.param('[db]\npath = ""\n', "db.path: expected a non-empty string", id="db-path-empty"),
    pytest.param(
        '[state]\ndirectory = "/x"\n', "state.directory: unknown key", id="state-unknown-key"
    ),
    pytest.param(
        "[llm.openai]\nmodel = 2024-01-01\n",
        "llm.openai.model: expected a string, got date 2024-01-01",
        id="date-is-not-a-string",
    ),
]


@pytest.mark.parametrize(("text", "expected"), ERRORS)
def test_bad_config_is_refused_with_one_line(tmp_path: Path, text: str, expected: str) -> None:
    err = refuse(tmp_path, text)
    assert f": {expected}" in str(err)
    assert err.key is not None and str(err).startswith(f"{err.file}: {err.key}: ")
    assert err.line is None


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    err = refuse(tmp_path, '[llm.openai]\nmodel = "a"\nbase_url = \n')
    assert err.line == 3
    assert str(err).startswith(f"{err.file} line 3: invalid TOML: ")
    assert "column" in str(err)


def test_invalid_toml_duplicate_table(tmp_path: Path) -> None:
    err = refuse(tmp_path, "[gateway]\n[db]\n[gateway]\n")
    assert err.line == 3
    assert "invalid TOML" in str(err)


def test_invalid_toml_unterminated_string_at_end(tmp_path: Path) -> None:
    err = refuse(tmp_path, '[llm.openai]\nmodel = "gpt')
    assert err.line == 2
    assert "invalid TOML" in str(err)


def test_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'[llm.openai]\nmodel = "caf\xe9"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert str(info.value) == f"{path} line 2: invalid TOML: not UTF-8 text"


def test_config_path_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert str(info.value) == f"{tmp_path}: is a directory, expected a TOML file"


def test_bad_log_level_env_names_the_variable(tmp_path: Path) -> None:
    err = refuse(tmp_path, "", {"LOG_LEVEL": "loud"})
    assert str(err).endswith(
        'LOG_LEVEL (environment): expected one of debug, info, warning, error, got "loud"'
    )


@pytest.mark.parametrize(
    ("text", "secret", "key"),
    [
        ("[llm.openai]\napi_key = 987654321987\n", "987654321987", "llm.openai.api_key"),
        ("[gateway]\ntoken = 31337424242\n", "31337424242", "gateway.token"),
        (
            '[channel.tg]\ntype = "telegram"\n[channel.tg.settings]\nbot_token = 12345.678\n',
            "12345.678",
            "channel.tg.settings.bot_token",
        ),
        ('[llm]\napi_key = "sk-misplaced-secret"\n', "sk-misplaced-secret", "llm.api_key"),
    ],
)
def test_secret_values_never_appear_in_errors(
    tmp_path: Path, text: str, secret: str, key: str
) -> None:
    err = refuse(tmp_path, text)
    assert key in str(err)
    assert secret not in str(err)
    assert secret not in repr(err.args)
