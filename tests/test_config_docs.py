"""config.example.toml and docs/configuration.md cover every key the loader accepts."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pingu.config import load_config, loader
from pingu.config.edit import parse_key

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config.example.toml"
DOCS = ROOT / "docs" / "configuration.md"

SECTIONS = {
    "llm.openai": loader.LLM_KEYS,
    "gateway": loader.GATEWAY_KEYS,
    "db": loader.DB_KEYS,
    "channel.telegram": ("enabled", "type"),
    "channel.telegram.settings": loader.TELEGRAM_KEYS,
    "limits": loader.LIMIT_KEYS,
    "agent.researcher": loader.AGENT_KEYS,
    'pricing."gpt-4.1-nano"': loader.PRICING_KEYS,
    "log": loader.LOG_KEYS,
    "state": loader.STATE_KEYS,
}


def test_example_is_valid_without_any_environment(tmp_path: Path) -> None:
    config = load_config(EXAMPLE, env={"HOME": str(tmp_path)})
    assert config.channels["telegram"].enabled
    assert config.db.path == tmp_path / ".local/share/pingu/pingu.db"


def test_example_sets_every_key() -> None:
    data = tomllib.loads(EXAMPLE.read_text())
    assert set(data) == set(loader.TOP_LEVEL_KEYS)
    for section, keys in SECTIONS.items():
        table = data
        for name in parse_key(section):
            table = table[name]
        present = set(table) - {"settings"}
        assert present == set(keys) - {"settings"}, section


def test_docs_name_every_key_and_env_var() -> None:
    text = DOCS.read_text()
    every_key = {key for keys in SECTIONS.values() for key in keys} | {"default_llm"}
    assert sorted(key for key in every_key if f"`{key}`" not in text) == []
    sections = set(loader.TOP_LEVEL_KEYS) - {"default_llm"}
    assert sorted(s for s in sections if f"### `[{s}" not in text) == []
    for var in ("PINGU_CONFIG", "OPENAI_API_KEY", "TELEGRAM_BOT_TOKEN", "LOG_LEVEL"):
        assert f"`{var}`" in text
