"""Reading and changing single keys of a config file.

`set_value` edits the file through tomlkit so that every comment, blank line and key
order outside the changed key stays as the user wrote it; the result is validated
with the real loader and written atomically (temp file + rename) with mode 0600.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
import tomlkit
import tomlkit.container
import tomlkit.items

from pingu.config.loader import (
    SECRET_KEYS,
    ConfigError,
    format_key,
    load_config_text,
    parse_toml,
)
from pingu.config.model import Config

FILE_MODE = 0o600
DIR_MODE = 0o700


class KeyNotFound(LookupError):
    """`config get` of a key the effective configuration does not have."""


def parse_key(key: str) -> tuple[str, ...]:
    """`llm.openai.model` -> ("llm", "openai", "model"); TOML quoting is understood,
    so `pricing."gpt-4.1".input` works for names with dots."""
    if not key.strip():
        raise ValueError("empty key")
    try:
        data = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        raise ValueError(f"not a valid dotted key: {key!r}") from None
    parts: list[str] = []
    node: Any = data
    while isinstance(node, dict):
        if len(node) != 1:
            raise ValueError(f"not a valid dotted key: {key!r}")
        name, node = next(iter(node.items()))
        parts.append(name)
    return tuple(parts)


def parse_value(text: str) -> Any:
    """A TOML value when `text` is one (5, true, [1, 2], "quoted"), else the string itself."""
    try:
        data = tomllib.loads(f"value = {text}")
    except tomllib.TOMLDecodeError:
        return text
    if list(data) != ["value"]:  # text smuggled in more than one value
        return text
    return data["value"]


def is_secret_key(parts: tuple[str, ...]) -> bool:
    return bool(parts) and parts[-1] in SECRET_KEYS


def mask(secret: str) -> str:
    """Enough to tell two keys apart, not enough to use one."""
    if len(secret) >= 20:
        return "****" + secret[-4:]
    return "****"


# ---------------------------------------------------------------------------
# get: over the effective configuration (file + defaults + environment)


def config_to_dict(config: Config) -> dict[str, Any]:
    """The effective configuration in config-file shape (None values left out)."""
    llm = {
        name: _drop_none(
            {
                "model": c.model,
                "base_url": c.base_url,
                "api_key": c.api_key,
                "timeout_s": c.timeout_s,
                "max_retries": c.max_retries,
                "provider": c.provider,
            }
        )
        for name, c in config.llm.items()
    }
    channel = {
        name: {
            "enabled": c.enabled,
            "type": c.type,
            "settings": {
                "bot_token": c.settings.bot_token,
                "allowed_users": list(c.settings.allowed_users),
                "api_base_url": c.settings.api_base_url,
                "poll_timeout_s": c.settings.poll_timeout_s,
                "edit_interval_s": c.settings.edit_interval_s,
                "typing_interval_s": c.settings.typing_interval_s,
            },
        }
        for name, c in config.channels.items()
    }
    agent = {
        name: _drop_none(
            {
                "system_prompt": p.system_prompt,
                "tools": list(p.tools),
                "llm": p.llm,
                **_limits_dict(p.limits),
            }
        )
        for name, p in config.agents.items()
    }
    pricing = {
        model: _drop_none({"input": p.input, "output": p.output, "cached_input": p.cached_input})
        for model, p in config.pricing.items()
    }
    return {
        "default_llm": config.default_llm,
        "llm": llm,
        "gateway": _drop_none(
            {
                "addr": config.gateway.addr,
                "token": config.gateway.token,
                "max_body_bytes": config.gateway.max_body_bytes,
            }
        ),
        "db": {"path": str(config.db.path)},
        "channel": channel,
        "agent": agent,
        "pricing": pricing,
        "limits": _limits_dict(config.limits),
        "log": {"level": config.log.level, "format": config.log.format},
        "state": {"dir": str(config.state_dir), "workspace_dir": str(config.workspaces)},
    }


def _limits_dict(limits: Any) -> dict[str, Any]:
    return {
        "max_model_calls": limits.max_model_calls,
        "max_tool_calls": limits.max_tool_calls,
        "tool_timeout_s": limits.tool_timeout_s,
        "turn_timeout_s": limits.turn_timeout_s,
        "max_delegation_depth": limits.max_delegation_depth,
    }


def _drop_none(mapping: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if v is not None}


def get_value(config: Config, parts: tuple[str, ...]) -> Any:
    node: Any = config_to_dict(config)
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            raise KeyNotFound(format_key(parts[: i + 1]))
        node = node[part]
    return node


def mask_secrets(value: Any, *, key_is_secret: bool = False) -> Any:
    if key_is_secret and isinstance(value, str) and value:
        return mask(value)
    if isinstance(value, dict):
        return {k: mask_secrets(v, key_is_secret=k in SECRET_KEYS) for k, v in value.items()}
    return value


def render_value(value: Any) -> str:
    """How `config get` prints a value: strings bare, tables as TOML, the rest as TOML."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return tomli_w.dumps(value).rstrip("\n")
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


# ---------------------------------------------------------------------------
# set: edit the file itself


@dataclass(frozen=True)
class SetResult:
    path: Path
    created: bool  # the file did not exist before


def set_value(
    path: Path,
    parts: tuple[str, ...],
    value: Any,
    *,
    env: Mapping[str, str] | None = None,
) -> SetResult:
    """Set one key in the file at `path`, creating missing tables (and the file).

    Raises ConfigError when the file is not valid TOML or the result would not load;
    the file is then left exactly as it was."""
    target = Path(os.path.realpath(path))  # edit through a symlink, do not replace it
    try:
        original = target.read_text(encoding="utf-8")
        created = False
    except FileNotFoundError:
        original = ""
        created = True
    except UnicodeDecodeError:
        parse_toml(target.read_bytes(), file=path)  # raises the ConfigError with the line
        raise
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read: {exc.strerror or exc}") from None

    parse_toml(original, file=path)  # refuse to edit what we cannot read
    doc = tomlkit.parse(original)
    _assign(doc, parts, value, file=path)
    updated = tomlkit.dumps(doc)
    if updated.endswith("\n\n") and not original.endswith("\n\n"):
        updated = updated.rstrip("\n") + "\n"  # the blank line added after a new last table
    load_config_text(updated, file=path, env=env)
    atomic_write(target, updated)
    return SetResult(path=path, created=created)


def _assign(doc: tomlkit.TOMLDocument, parts: tuple[str, ...], value: Any, *, file: Path) -> None:
    container: Any = doc
    created: tomlkit.items.Table | None = None
    moved: list[Any] = []
    for i, part in enumerate(parts[:-1]):
        if part not in container:
            # `[llm.openai]` rather than an empty `[llm]` followed by `[llm.openai]`.
            table = tomlkit.table(is_super_table=i + 1 < len(parts) - 1)
            if created is None:
                moved = _take_trailing_comments(container)
            container[part] = table
            created = table
        node = container[part]
        if not isinstance(node, tomlkit.items.Table | tomlkit.items.InlineTable | dict):
            raise ConfigError(
                file, format_key(parts[: i + 1]), "is a value, not a table; cannot set a key in it"
            )
        container = node
    _put(container, parts[-1], _to_item(value))
    if created is not None:
        # A blank line before whatever follows, and the comments that introduced the
        # next table (moved out of the table we were added after) back in front of it.
        for item in moved or [tomlkit.nl()]:
            container.add(item)


def _take_trailing_comments(container: Any) -> list[Any]:
    """Detach the comment lines at the end of the last table rendered inside `container`:
    a new table is placed right after that table, and those comments belong to what came
    after it."""
    owner = container.value if isinstance(container, tomlkit.items.Table) else container
    leaf = None
    while True:
        tables = [item for _, item in owner.body if isinstance(item, tomlkit.items.Table)]
        if not tables:
            break
        leaf = tables[-1]
        owner = leaf.value
    if leaf is None:
        return []
    body = leaf.value.body
    start = len(body)
    while (
        start > 0
        and body[start - 1][0] is None
        and isinstance(body[start - 1][1], tomlkit.items.Comment | tomlkit.items.Whitespace)
    ):
        start -= 1
    if start == 0:
        return []  # a table holding only comments: they are its own
    # Comments right under the last key (`# api_key = ...`) stay; those after a blank
    # line introduce what follows.
    blank = max(
        (i for i in range(start, len(body)) if isinstance(body[i][1], tomlkit.items.Whitespace)),
        default=None,
    )
    if blank is None or not any(
        isinstance(item, tomlkit.items.Comment) for _, item in body[blank:]
    ):
        return []
    run = [item for _, item in body[blank:]]
    del body[blank:]
    leaf.value.append(None, tomlkit.nl())  # keep the blank line before the new table
    return run


def _put(container: Any, key: str, item: Any) -> None:
    """Replace a key in place, or add it right after the table's last key: not after the
    comments and blank lines that introduce the next table."""
    if key in container or isinstance(item, tomlkit.items.Table):
        container[key] = item
        return
    body_owner = container.value if isinstance(container, tomlkit.items.Table) else container
    if not isinstance(body_owner, tomlkit.container.Container):
        container[key] = item
        return
    last_key = None
    for body_key, body_item in body_owner.body:
        if isinstance(body_item, tomlkit.items.Table | tomlkit.items.AoT):
            break  # top level: keys must stay above the first table
        if body_key is not None and not body_key.is_dotted():
            last_key = body_key
    if last_key is None:
        container[key] = item
        return
    body_owner._insert_after(last_key, key, item)


def _to_item(value: Any) -> Any:
    if isinstance(value, dict):  # `config set llm.x '{model = "m"}'`: keep it inline
        table = tomlkit.inline_table()
        for key, inner in value.items():
            table[key] = _to_item(inner)
        return table
    return tomlkit.item(value)


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600: a temp file in the same directory, then rename,
    so a reader never sees half a file and a crash never leaves one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
