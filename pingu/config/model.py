"""The validated, immutable shape of a Pingu configuration.

`pingu.config.loader.load_config` turns a `config.toml` into a `Config`; everything
else in Pingu reads these dataclasses and never the raw TOML. Secrets are kept out
of `repr` so that a logged or printed config never shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

DEFAULT_LLM_NAME = "openai"
DEFAULT_MODEL = "gpt-4.1-nano"
DEFAULT_GATEWAY_ADDR = ":8484"
DEFAULT_TELEGRAM_API_BASE_URL = "https://api.telegram.org"
DEFAULT_CONFIG_PATH = Path("~/.config/pingu/config.toml")
DEFAULT_STATE_DIR = Path("~/.local/share/pingu")
DEFAULT_DB_FILENAME = "pingu.db"

# Tool names an agent profile may list; the implementations live in pingu.tools.
BUILTIN_TOOL_NAMES: tuple[str, ...] = ("message", "shell", "file", "web_fetch", "delegate")
CHANNEL_TYPES: tuple[str, ...] = ("telegram",)


def _frozen(mapping: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class LLMConfig:
    """`[llm.<name>]`: one model endpoint that speaks the Responses API."""

    name: str = DEFAULT_LLM_NAME
    model: str = DEFAULT_MODEL
    base_url: str | None = None  # None: the openai package's default (api.openai.com)
    api_key: str | None = field(default=None, repr=False)  # or OPENAI_API_KEY
    timeout_s: float = 120.0  # per model call
    max_retries: int = 3  # on 429, 5xx and connection errors
    provider: str = "openai"  # recorded in token_usage


@dataclass(frozen=True)
class GatewayConfig:
    """`[gateway]`: the HTTP API."""

    addr: str = DEFAULT_GATEWAY_ADDR  # "host:port"; ":port" means all interfaces
    token: str | None = field(default=None, repr=False)  # bearer token for /v1/*
    max_body_bytes: int = 1_048_576

    @property
    def host(self) -> str:
        host = self.addr.rpartition(":")[0].strip("[]")
        # With no token the API is never exposed beyond this machine.
        if not self.token:
            return "127.0.0.1"
        return host or "0.0.0.0"

    @property
    def port(self) -> int:
        return int(self.addr.rpartition(":")[2])


@dataclass(frozen=True)
class DBConfig:
    """`[db]`."""

    path: Path = DEFAULT_STATE_DIR / DEFAULT_DB_FILENAME


@dataclass(frozen=True)
class TelegramSettings:
    """`[channel.<name>.settings]` of a channel with `type = "telegram"`."""

    bot_token: str = field(default="", repr=False)  # or TELEGRAM_BOT_TOKEN
    allowed_users: tuple[int, ...] = ()  # empty admits nobody
    api_base_url: str = DEFAULT_TELEGRAM_API_BASE_URL  # a self-hosted Bot API server
    poll_timeout_s: int = 30  # getUpdates long-poll timeout
    edit_interval_s: float = 1.0  # throttle for progressive edits of the answer
    typing_interval_s: float = 4.0  # typing indicator refresh


@dataclass(frozen=True)
class ChannelConfig:
    """`[channel.<name>]`."""

    name: str
    type: str
    enabled: bool = True
    settings: TelegramSettings = field(default_factory=TelegramSettings)


@dataclass(frozen=True)
class AgentLimits:
    """Bounds on one turn. Top-level `[limits]` sets defaults; a profile may override."""

    max_model_calls: int = 16  # model calls per turn
    max_tool_calls: int = 64  # tool calls per turn
    tool_timeout_s: float = 120.0  # wall time per tool call
    turn_timeout_s: float = 900.0  # wall time per turn
    max_delegation_depth: int = 3


@dataclass(frozen=True)
class AgentProfile:
    """`[agent.<name>]`."""

    name: str
    system_prompt: str = ""
    tools: tuple[str, ...] = ()  # empty: all built-in tools
    llm: str | None = None  # which [llm.*]; None: default_llm
    limits: AgentLimits = field(default_factory=AgentLimits)


@dataclass(frozen=True)
class Pricing:
    """`[pricing.<model>]`: USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None  # None: same as input


@dataclass(frozen=True)
class LoggingConfig:
    """`[log]`."""

    level: str = "info"  # LOG_LEVEL overrides
    format: str = "auto"  # auto (json unless on a terminal), json, console


@dataclass(frozen=True)
class Config:
    path: Path | None = None  # the file it came from; None when defaults were used
    default_llm: str = DEFAULT_LLM_NAME
    llm: Mapping[str, LLMConfig] = field(
        default_factory=lambda: _frozen({DEFAULT_LLM_NAME: LLMConfig()})
    )
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    db: DBConfig = field(default_factory=DBConfig)
    channels: Mapping[str, ChannelConfig] = field(default_factory=_frozen)
    agents: Mapping[str, AgentProfile] = field(default_factory=_frozen)
    pricing: Mapping[str, Pricing] = field(default_factory=_frozen)
    limits: AgentLimits = field(default_factory=AgentLimits)
    log: LoggingConfig = field(default_factory=LoggingConfig)
    state_dir: Path = DEFAULT_STATE_DIR  # `[state] dir`; workspaces live below it
    workspace_dir: Path | None = None  # `[state] workspace_dir`; None: state_dir / "workspaces"

    @property
    def workspaces(self) -> Path:
        return self.workspace_dir or self.state_dir / "workspaces"

    def llm_for(self, profile: AgentProfile | None) -> LLMConfig:
        name = (profile.llm if profile else None) or self.default_llm
        return self.llm[name]

    def secrets(self) -> list[str]:
        """Every secret value in this config, for log and error redaction."""
        values = [c.api_key for c in self.llm.values()]
        values.append(self.gateway.token)
        values.extend(c.settings.bot_token for c in self.channels.values())
        return [v for v in values if v]
