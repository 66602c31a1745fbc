"""Configuration: `config.toml` -> validated, immutable `Config`.

from pingu.config import load_config_or_exit, config_option

@click.command()
@config_option                      # --config PATH / PINGU_CONFIG -> config_path
def chat(config_path: Path | None) -> None:
    config = load_config_or_exit(config_path)   # bad config: one line, exit 2
"""

from pingu.config.cli import config_option
from pingu.config.loader import (
    ConfigError,
    load_config,
    load_config_or_exit,
    load_config_text,
    resolve_config_path,
)
from pingu.config.model import Config

__all__ = [
    "Config",
    "ConfigError",
    "config_option",
    "load_config",
    "load_config_or_exit",
    "load_config_text",
    "resolve_config_path",
]
