"""`config.toml` -> `Config`, refusing anything it does not understand.

Every problem becomes one `ConfigError` whose message is a single line naming the
file, the key and what was expected. Values of secret keys never appear in a
message, even when they have the wrong type.
"""

from __future__ import annotations

import math
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn, TypeVar

from pingu.config.model import (
    BUILTIN_TOOL_NAMES,
    CHANNEL_TYPES,
    DEFAULT_CONFIG_PATH,
    DEFAULT_DB_FILENAME,
    DEFAULT_LLM_NAME,
    DEFAULT_STATE_DIR,
    DEFAULT_TELEGRAM_API_BASE_URL,
    AgentLimits,
    AgentProfile,
    ChannelConfig,
    Config,
    DBConfig,
    GatewayConfig,
    LLMConfig,
    LoggingConfig,
    Pricing,
    TelegramSettings,
)

ENV_CONFIG_PATH = "PINGU_CONFIG"
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"
ENV_TELEGRAM_BOT_TOKEN = "TELEGRAM_BOT_TOKEN"
ENV_LOG_LEVEL = "LOG_LEVEL"
# The systemd unit points every command at its StateDirectory through these.
ENV_STATE_DIR = "PINGU_STATE_DIR"
ENV_DB_PATH = "PINGU_DB"

# Keys whose values are secrets: never echoed in errors, masked by `config get`.
SECRET_KEYS = frozenset({"api_key", "token", "bot_token"})

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("auto", "json", "console")

TOP_LEVEL_KEYS = (
    "default_llm",
    "llm",
    "gateway",
    "db",
    "channel",
    "agent",
    "pricing",
    "limits",
    "log",
    "state",
)
LLM_KEYS = ("model", "base_url", "api_key", "timeout_s", "max_retries", "provider")
GATEWAY_KEYS = ("addr", "token", "max_body_bytes")
DB_KEYS = ("path",)
CHANNEL_KEYS = ("enabled", "type", "settings")
TELEGRAM_KEYS = (
    "bot_token",
    "allowed_users",
    "api_base_url",
    "poll_timeout_s",
    "edit_interval_s",
    "typing_interval_s",
)
LIMIT_KEYS = (
    "max_model_calls",
    "max_tool_calls",
    "tool_timeout_s",
    "turn_timeout_s",
    "max_delegation_depth",
)
AGENT_KEYS = ("system_prompt", "tools", "llm", *LIMIT_KEYS)
PRICING_KEYS = ("input", "output", "cached_input")
LOG_KEYS = ("level", "format")
STATE_KEYS = ("dir", "workspace_dir")

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_TOML_END = re.compile(r"\s*\(at end of document\)$")


class ConfigError(Exception):
    """A configuration the daemon refuses. `str()` is the one line to show the user."""

    def __init__(
        self,
        file: Path | None,
        key: str | None,
        message: str,
        *,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.key = key
        self.line = line
        self.message = " ".join(message.split())  # one line, always
        super().__init__(str(self))

    def __str__(self) -> str:
        where = str(self.file) if self.file is not None else "<config>"
        if self.line is not None:
            where += f" line {self.line}"
        parts = [where]
        if self.key:
            parts.append(self.key)
        parts.append(self.message)
        return ": ".join(parts)


def format_key(parts: tuple[str, ...] | list[str]) -> str:
    """A dotted key as it would be written in TOML (`pricing."gpt-4.1".input`)."""
    return ".".join(p if _BARE_KEY.match(p) else _quote(p) for p in parts)


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def type_name(value: object) -> str:
    """The TOML name of a parsed value's type."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__  # datetime, date, time


def _describe(value: object, *, secret: bool) -> str:
    """`integer 5`, `string "abc"`; secrets are described by type alone."""
    name = type_name(value)
    if secret or isinstance(value, list | dict):
        return name
    shown = _quote(value) if isinstance(value, str) else str(value)
    if isinstance(value, bool):
        shown = "true" if value else "false"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{name} {shown}"


def expand_path(value: str | Path, env: Mapping[str, str] | None = None) -> Path:
    """Expand a leading `~` (using HOME from `env` when it has one)."""
    text = str(value)
    home = (env or {}).get("HOME")
    if home and (text == "~" or text.startswith("~/")):
        return Path(home + text[1:])
    return Path(os.path.expanduser(text))


def resolve_config_path(
    path: Path | str | None = None, env: Mapping[str, str] | None = None
) -> tuple[Path, bool]:
    """The config file to read and whether it was named explicitly.

    `--config` beats `PINGU_CONFIG` beats the default location. Only a missing file at
    the default location means "use defaults"."""
    env = os.environ if env is None else env
    if path is not None and str(path) != "":
        return expand_path(path, env), True
    from_env = env.get(ENV_CONFIG_PATH)
    if from_env:
        return expand_path(from_env, env), True
    return expand_path(DEFAULT_CONFIG_PATH, env), False


def load_config(path: Path | None = None, *, env: Mapping[str, str] | None = None) -> Config:
    """Read, validate and complete (defaults, environment) a config file."""
    env = os.environ if env is None else env
    file, explicit = resolve_config_path(path, env)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(file, None, "no such file") from None
        return parse_config({}, file=None, env=env)
    except IsADirectoryError:
        raise ConfigError(file, None, "is a directory, expected a TOML file") from None
    except OSError as exc:
        raise ConfigError(file, None, f"cannot read: {exc.strerror or exc}") from None
    return load_config_text(raw, file=file, env=env)


def load_config_text(
    text: str | bytes, *, file: Path | None, env: Mapping[str, str] | None = None
) -> Config:
    """Validate config text (as `config set` does before writing)."""
    env = os.environ if env is None else env
    data = parse_toml(text, file=file)
    return parse_config(data, file=file, env=env)


def parse_toml(text: str | bytes, *, file: Path | None) -> dict[str, Any]:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = text[: exc.start].count(b"\n") + 1
            raise ConfigError(file, None, "invalid TOML: not UTF-8 text", line=line) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        line = None
        match = _TOML_POSITION.search(message)
        if match:
            line = int(match.group(1))
            message = message[: match.start()] + f" (column {match.group(2)})"
        elif _TOML_END.search(message):
            line = text.count("\n") + 1
            message = _TOML_END.sub(" (at end of file)", message)
        raise ConfigError(file, None, f"invalid TOML: {message}", line=line) from None


def load_config_or_exit(
    path: Path | None = None, *, env: Mapping[str, str] | None = None
) -> Config:
    """`load_config` for commands: on a bad config print one line and exit 2."""
    try:
        return load_config(path, env=env)
    except ConfigError as exc:
        exit_config_error(exc)


def exit_config_error(exc: ConfigError) -> NoReturn:
    print(f"pingu: config error: {exc}", file=sys.stderr)
    raise SystemExit(2)


# ---------------------------------------------------------------------------
# Validation of the parsed document

T = TypeVar("T")
_MISSING: Any = object()


class _Table:
    """One TOML table being validated: typed getters that name the full key on error."""

    def __init__(
        self,
        data: Mapping[str, Any],
        prefix: tuple[str, ...],
        file: Path | None,
        allowed: tuple[str, ...],
        *,
        kind: str = "key",
    ) -> None:
        self.data = data
        self.prefix = prefix
        self.file = file
        for key, value in data.items():
            if key not in allowed:
                what = "section" if isinstance(value, dict) and kind == "section" else "key"
                raise self.error(key, f"unknown {what} (expected one of: {', '.join(allowed)})")

    def key(self, name: str) -> str:
        return format_key((*self.prefix, name))

    def error(self, name: str | None, message: str) -> ConfigError:
        key = self.key(name) if name is not None else format_key(self.prefix) or None
        return ConfigError(self.file, key, message)

    def has(self, name: str) -> bool:
        return name in self.data

    def _get(self, name: str, check: Callable[[Any], bool], expected: str) -> Any:
        value = self.data.get(name, _MISSING)
        if value is _MISSING:
            return _MISSING
        if not check(value):
            got = _describe(value, secret=name in SECRET_KEYS)
            raise self.error(name, f"expected {expected}, got {got}")
        return value

    def string(
        self,
        name: str,
        default: T,
        *,
        choices: tuple[str, ...] | None = None,
        non_empty: bool = False,
    ) -> str | T:
        value = self._get(name, lambda v: isinstance(v, str), "a string")
        if value is _MISSING:
            return default
        if choices is not None:
            folded = value.lower()
            if folded not in choices:
                got = _describe(value, secret=name in SECRET_KEYS)
                raise self.error(name, f"expected one of {', '.join(choices)}, got {got}")
            return folded
        if non_empty and not value.strip():
            raise self.error(name, "expected a non-empty string")
        return value

    def url(self, name: str, default: T) -> str | T:
        value = self.string(name, default)
        if value is default:
            return default
        assert isinstance(value, str)
        if not re.match(r"^https?://[^\s/]+", value):
            raise self.error(
                name, f"expected an http:// or https:// URL, got {_describe(value, secret=False)}"
            )
        return value.rstrip("/")

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name, lambda v: isinstance(v, bool), "a boolean (true or false)")
        return default if value is _MISSING else value

    def integer(self, name: str, default: int, *, minimum: int) -> int:
        value = self._get(name, _is_int, "an integer")
        if value is _MISSING:
            return default
        if value < minimum:
            bound = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.error(name, f"expected {bound}, got {value}")
        return value

    def number(self, name: str, default: T, *, positive: bool = True) -> float | T:
        """A float (an integer is accepted); `positive` means > 0, otherwise >= 0."""
        value = self._get(name, _is_number, "a number")
        if value is _MISSING:
            return default
        value = float(value)
        if not math.isfinite(value) or (value <= 0 if positive else value < 0):
            bound = "a positive number" if positive else "a number >= 0"
            raise self.error(name, f"expected {bound}, got {_fmt_number(value)}")
        return value

    def table(self, name: str) -> dict[str, Any]:
        value = self._get(name, lambda v: isinstance(v, dict), "a table")
        return {} if value is _MISSING else value

    def sub(self, name: str, allowed: tuple[str, ...], *, kind: str = "key") -> _Table:
        return _Table(self.table(name), (*self.prefix, name), self.file, allowed, kind=kind)

    def named_tables(self, name: str) -> dict[str, dict[str, Any]]:
        """`[name.<x>]` tables: every value under `name` must itself be a table."""
        outer = self.table(name)
        for inner, value in outer.items():
            if not isinstance(value, dict):
                key = format_key((*self.prefix, name, inner))
                got = _describe(value, secret=inner in SECRET_KEYS)
                raise ConfigError(self.file, key, f"expected a table [{key}], got {got}")
        return outer


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fmt_number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _path(value: str, *, base: Path | None, env: Mapping[str, str]) -> Path:
    path = expand_path(value, env)
    # Relative paths are relative to the config file, not to wherever the daemon started.
    if not path.is_absolute() and base is not None:
        path = base / path
    return path


def parse_config(
    data: Mapping[str, Any], *, file: Path | None, env: Mapping[str, str] | None = None
) -> Config:
    """Validate a parsed TOML document and build the `Config`."""
    env = os.environ if env is None else env
    root = _Table(data, (), file, TOP_LEVEL_KEYS, kind="section")
    base = file.parent if file is not None else None

    llms = _parse_llms(root, env)
    default_llm = _parse_default_llm(root, llms)
    gateway = _parse_gateway(root)

    state = root.sub("state", STATE_KEYS)
    # The file's values are validated even when the environment overrides them.
    state_text = state.string("dir", str(DEFAULT_STATE_DIR), non_empty=True)
    # A path from the environment is relative to the working directory, not the file.
    state_env = env.get(ENV_STATE_DIR)
    state_dir = _path(state_env or state_text, base=None if state_env else base, env=env)
    workspace_text = state.string("workspace_dir", None, non_empty=True)
    workspace_dir = _path(workspace_text, base=base, env=env) if workspace_text else None

    db = root.sub("db", DB_KEYS)
    db_text = db.string("path", None, non_empty=True)
    if db_env := env.get(ENV_DB_PATH):
        db_path = _path(db_env, base=None, env=env)
    elif db_text:
        db_path = _path(db_text, base=base, env=env)
    else:
        db_path = state_dir / DEFAULT_DB_FILENAME

    limits = _parse_limits(root.sub("limits", LIMIT_KEYS), AgentLimits())
    channels = _parse_channels(root, env)
    agents = _parse_agents(root, llms, limits)
    pricing = _parse_pricing(root)
    log = _parse_log(root, env, file)

    return Config(
        path=file,
        default_llm=default_llm,
        llm=MappingProxyType(llms),
        gateway=gateway,
        db=DBConfig(path=db_path),
        channels=MappingProxyType(channels),
        agents=MappingProxyType(agents),
        pricing=MappingProxyType(pricing),
        limits=limits,
        log=log,
        state_dir=state_dir,
        workspace_dir=workspace_dir,
    )


def _parse_llms(root: _Table, env: Mapping[str, str]) -> dict[str, LLMConfig]:
    env_key = env.get(ENV_OPENAI_API_KEY) or None
    tables = root.named_tables("llm")
    if not tables:
        return {DEFAULT_LLM_NAME: LLMConfig(name=DEFAULT_LLM_NAME, api_key=env_key)}
    llms: dict[str, LLMConfig] = {}
    defaults = LLMConfig()
    for name, data in tables.items():
        t = _Table(data, ("llm", name), root.file, LLM_KEYS)
        llms[name] = LLMConfig(
            name=name,
            model=t.string("model", defaults.model, non_empty=True),
            base_url=t.url("base_url", None),
            api_key=t.string("api_key", None) or env_key,
            timeout_s=t.number("timeout_s", defaults.timeout_s),
            max_retries=t.integer("max_retries", defaults.max_retries, minimum=0),
            provider=t.string("provider", defaults.provider, non_empty=True),
        )
    return llms


def _parse_default_llm(root: _Table, llms: dict[str, LLMConfig]) -> str:
    known = ", ".join(f"[{format_key(('llm', n))}]" for n in llms)
    if root.has("default_llm"):
        name = root.string("default_llm", DEFAULT_LLM_NAME)
        if name not in llms:
            raise root.error(
                "default_llm", f"names no [llm.*] section: got {_quote(name)}, have {known}"
            )
        return name
    if DEFAULT_LLM_NAME in llms:
        return DEFAULT_LLM_NAME
    if len(llms) == 1:
        return next(iter(llms))
    raise root.error(
        "default_llm",
        f"required when there are several [llm.*] sections and none is named "
        f"{DEFAULT_LLM_NAME} (have {known})",
    )


def _parse_gateway(root: _Table) -> GatewayConfig:
    t = root.sub("gateway", GATEWAY_KEYS)
    defaults = GatewayConfig()
    addr = t.string("addr", defaults.addr)
    if not _valid_addr(addr):
        raise t.error(
            "addr", f'expected "host:port" or ":port", got {_describe(addr, secret=False)}'
        )
    return GatewayConfig(
        addr=addr,
        token=t.string("token", None) or None,
        max_body_bytes=t.integer("max_body_bytes", defaults.max_body_bytes, minimum=1),
    )


def _valid_addr(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return False
    if host.startswith("["):
        return host.endswith("]") and len(host) > 2  # [::1]:8484
    return ":" not in host and not any(c.isspace() for c in host)


def _parse_limits(t: _Table, base: AgentLimits) -> AgentLimits:
    return AgentLimits(
        max_model_calls=t.integer("max_model_calls", base.max_model_calls, minimum=1),
        max_tool_calls=t.integer("max_tool_calls", base.max_tool_calls, minimum=0),
        tool_timeout_s=t.number("tool_timeout_s", base.tool_timeout_s),
        turn_timeout_s=t.number("turn_timeout_s", base.turn_timeout_s),
        max_delegation_depth=t.integer(
            "max_delegation_depth", base.max_delegation_depth, minimum=0
        ),
    )


def _parse_channels(root: _Table, env: Mapping[str, str]) -> dict[str, ChannelConfig]:
    env_token = env.get(ENV_TELEGRAM_BOT_TOKEN) or ""
    channels: dict[str, ChannelConfig] = {}
    for name, data in root.named_tables("channel").items():
        t = _Table(data, ("channel", name), root.file, CHANNEL_KEYS)
        # `[channel.telegram]` may leave out `type = "telegram"`.
        default_type = name if name in CHANNEL_TYPES else None
        kind = t.string("type", default_type, choices=CHANNEL_TYPES)
        if kind is None:
            raise t.error("type", f"missing (expected one of: {', '.join(CHANNEL_TYPES)})")
        enabled = t.boolean("enabled", True)
        s = t.sub("settings", TELEGRAM_KEYS)
        defaults = TelegramSettings()
        settings = TelegramSettings(
            bot_token=s.string("bot_token", "") or env_token,
            allowed_users=_allowed_users(s),
            api_base_url=s.url("api_base_url", DEFAULT_TELEGRAM_API_BASE_URL),
            poll_timeout_s=s.integer("poll_timeout_s", defaults.poll_timeout_s, minimum=0),
            edit_interval_s=s.number("edit_interval_s", defaults.edit_interval_s),
            typing_interval_s=s.number("typing_interval_s", defaults.typing_interval_s),
        )
        if enabled and not settings.bot_token:
            raise s.error(
                "bot_token",
                f"missing: an enabled telegram channel needs a bot token "
                f"(set it here or in {ENV_TELEGRAM_BOT_TOKEN})",
            )
        channels[name] = ChannelConfig(name=name, type=kind, enabled=enabled, settings=settings)
    return channels


def _allowed_users(s: _Table) -> tuple[int, ...]:
    """A list of integers, or the Go Pingu form: a comma-separated string of them."""
    value = s.data.get("allowed_users", _MISSING)
    if value is _MISSING:
        return ()
    if isinstance(value, str):
        entries: list[Any] = [part.strip() for part in value.split(",") if part.strip()]
        for entry in entries:
            if not re.fullmatch(r"-?\d+", entry):
                raise s.error(
                    "allowed_users",
                    f"expected comma-separated integer user IDs, got {_quote(entry)}",
                )
        return tuple(int(e) for e in entries)
    if isinstance(value, list):
        for entry in value:
            if not _is_int(entry):
                raise s.error(
                    "allowed_users",
                    f"expected a list of integer user IDs, got {_describe(entry, secret=False)}",
                )
        return tuple(value)
    raise s.error(
        "allowed_users",
        f"expected a list of integers or a comma-separated string, "
        f"got {_describe(value, secret=False)}",
    )


def _parse_agents(
    root: _Table, llms: dict[str, LLMConfig], limits: AgentLimits
) -> dict[str, AgentProfile]:
    agents: dict[str, AgentProfile] = {}
    for name, data in root.named_tables("agent").items():
        t = _Table(data, ("agent", name), root.file, AGENT_KEYS)
        tools = t._get("tools", lambda v: isinstance(v, list), "an array of tool names")
        if tools is _MISSING:
            tools = []
        for tool in tools:
            if not isinstance(tool, str) or tool not in BUILTIN_TOOL_NAMES:
                got = _describe(tool, secret=False)
                raise t.error(
                    "tools", f"unknown tool {got} (expected: {', '.join(BUILTIN_TOOL_NAMES)})"
                )
        llm = t.string("llm", None, non_empty=True)
        if llm is not None and llm not in llms:
            known = ", ".join(f"[{format_key(('llm', n))}]" for n in llms)
            raise t.error("llm", f"names no [llm.*] section: got {_quote(llm)}, have {known}")
        agents[name] = AgentProfile(
            name=name,
            system_prompt=t.string("system_prompt", ""),
            tools=tuple(dict.fromkeys(tools)),
            llm=llm,
            limits=_parse_limits(t, limits),
        )
    return agents


def _parse_pricing(root: _Table) -> dict[str, Pricing]:
    pricing: dict[str, Pricing] = {}
    for model, data in root.named_tables("pricing").items():
        t = _Table(data, ("pricing", model), root.file, PRICING_KEYS)
        for required in ("input", "output"):
            if not t.has(required):
                raise t.error(required, "missing (expected USD per million tokens)")
        pricing[model] = Pricing(
            input=t.number("input", 0.0, positive=False),
            output=t.number("output", 0.0, positive=False),
            cached_input=t.number("cached_input", None, positive=False),
        )
    return pricing


def _parse_log(root: _Table, env: Mapping[str, str], file: Path | None) -> LoggingConfig:
    t = root.sub("log", LOG_KEYS)
    defaults = LoggingConfig()
    level = t.string("level", defaults.level, choices=LOG_LEVELS)
    env_level = env.get(ENV_LOG_LEVEL)
    if env_level:
        level = env_level.strip().lower()
        if level == "warn":
            level = "warning"
        if level not in LOG_LEVELS:
            raise ConfigError(
                file,
                f"{ENV_LOG_LEVEL} (environment)",
                f"expected one of {', '.join(LOG_LEVELS)}, got {_quote(env_level)}",
            )
    return LoggingConfig(
        level=level, format=t.string("format", defaults.format, choices=LOG_FORMATS)
    )
