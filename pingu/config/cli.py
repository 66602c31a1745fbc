"""`pingu init` and `pingu config get|set|check|path`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pingu.config.loader import (
    ENV_CONFIG_PATH,
    ENV_OPENAI_API_KEY,
    ENV_TELEGRAM_BOT_TOKEN,
    ConfigError,
    exit_config_error,
    load_config_or_exit,
    load_config_text,
    resolve_config_path,
)
from pingu.config.model import (
    DEFAULT_GATEWAY_ADDR,
    DEFAULT_LLM_NAME,
    DEFAULT_MODEL,
)

F = TypeVar("F", bound=Callable[..., Any])

ENV_ALLOWED_USERS = "PINGU_ALLOWED_USERS"
ENV_MODEL = "PINGU_MODEL"


def config_option(func: F) -> F:
    """`--config PATH` (or PINGU_CONFIG) for any command; passes `config_path: Path | None`.

    Hand it to `load_config_or_exit(config_path)`."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar=ENV_CONFIG_PATH,
        default=None,
        metavar="PATH",
        help=f"Config file (default ~/.config/pingu/config.toml; env {ENV_CONFIG_PATH}).",
    )(func)


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"pingu: {message}", err=True)
    raise SystemExit(code)


# ---------------------------------------------------------------------------
# pingu init


def _parse_user_ids(text: str) -> list[int]:
    ids = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            ids.append(int(part))
        except ValueError:
            raise click.BadParameter(
                f"expected comma-separated integer Telegram user IDs, got {part!r}",
                param_hint="--allowed-users",
            ) from None
    return ids


def _checked_user_ids(text: str) -> str:
    _parse_user_ids(text)  # raises BadParameter, which click.prompt shows before asking again
    return text


STARTER_HEADER = """\
# Pingu configuration, written by `pingu init`.
# Every key is described in docs/configuration.md and config.example.toml.
# Change values with `pingu config set KEY VALUE`; verify with `pingu config check`.

"""


def starter_document(
    *, model: str, api_key: str | None, bot_token: str | None, allowed_users: list[int]
) -> dict[str, Any]:
    llm: dict[str, Any] = {"model": model}
    if api_key:
        llm["api_key"] = api_key
    doc: dict[str, Any] = {
        "default_llm": DEFAULT_LLM_NAME,
        "llm": {DEFAULT_LLM_NAME: llm},
        "gateway": {"addr": DEFAULT_GATEWAY_ADDR},
    }
    if bot_token:
        doc["channel"] = {
            "telegram": {
                "enabled": True,
                "type": "telegram",
                "settings": {"bot_token": bot_token, "allowed_users": allowed_users},
            }
        }
    return doc


@click.command("init")
@click.option("--bot-token", envvar=ENV_TELEGRAM_BOT_TOKEN, help="Telegram bot token.")
@click.option(
    "--allowed-users",
    envvar=ENV_ALLOWED_USERS,
    help="Comma-separated Telegram user IDs the bot answers.",
)
@click.option("--api-key", envvar=ENV_OPENAI_API_KEY, help="OpenAI API key.")
@click.option("--model", envvar=ENV_MODEL, help=f"Model name (default {DEFAULT_MODEL}).")
@click.option("--force", is_flag=True, help="Overwrite an existing config file.")
@config_option
def init_command(
    bot_token: str | None,
    allowed_users: str | None,
    api_key: str | None,
    model: str | None,
    force: bool,
    config_path: Path | None,
) -> None:
    """Write a starter config file (mode 0600)."""
    import tomli_w

    from pingu.config.edit import atomic_write

    path, _ = resolve_config_path(config_path)
    if path.exists() and not force:
        _fail(f"{path} already exists; use --force to overwrite it")

    interactive = sys.stdin.isatty()
    if bot_token is None and interactive:
        bot_token = click.prompt(
            "Telegram bot token (empty: no Telegram channel)",
            default="",
            show_default=False,
            hide_input=True,
        )
    if bot_token and allowed_users is None and interactive:
        # Checked at the prompt, so a typo is asked again instead of losing every answer.
        users_text = click.prompt(
            "Telegram user IDs allowed to talk to the bot (comma-separated)",
            default="",
            show_default=False,
            value_proc=_checked_user_ids,
        )
        allowed_users = users_text
    if api_key is None and interactive:
        api_key = click.prompt(
            f"OpenAI API key (empty: use {ENV_OPENAI_API_KEY} at run time)",
            default="",
            show_default=False,
            hide_input=True,
        )
    if model is None and interactive:
        model = click.prompt("Model", default=DEFAULT_MODEL)
    users = _parse_user_ids(allowed_users or "")
    model = (model or "").strip() or DEFAULT_MODEL

    doc = starter_document(
        model=model, api_key=api_key or None, bot_token=bot_token or None, allowed_users=users
    )
    text = STARTER_HEADER + tomli_w.dumps(doc)
    try:
        load_config_text(text, file=path, env={})  # what we write must pass `config check`
    except ConfigError as exc:
        exit_config_error(exc)
    atomic_write(path, text)

    click.echo(f"Wrote {path}")
    if not bot_token:
        click.echo("No Telegram channel: no bot token given (add one with `pingu init --force`).")
    elif not users:
        click.echo(
            "Warning: no allowed users, so the bot answers nobody. Add your user ID with "
            "`pingu config set channel.telegram.settings.allowed_users '[ID]'`."
        )
    if not api_key:
        click.echo(
            f"No API key written: export {ENV_OPENAI_API_KEY} or run "
            f"`pingu config set llm.{DEFAULT_LLM_NAME}.api_key KEY`."
        )


# ---------------------------------------------------------------------------
# pingu config ...


@click.group("config")
def config_group() -> None:
    """Get, set and check configuration values."""


@config_group.command("path")
@config_option
def path_command(config_path: Path | None) -> None:
    """Print the config file in use (it may not exist yet)."""
    path, explicit = resolve_config_path(config_path)
    click.echo(str(path))
    if not path.exists():
        note = "does not exist" if explicit else "does not exist; defaults are in use"
        click.echo(f"pingu: {path} {note}", err=True)


@config_group.command("check")
@config_option
def check_command(config_path: Path | None) -> None:
    """Validate the config file (exit 2 with one line naming the problem)."""
    config = load_config_or_exit(config_path)
    if config.path is None:
        path, _ = resolve_config_path(config_path)
        click.echo(f"{path}: no such file; the defaults are valid")
        return
    enabled = [c.name for c in config.channels.values() if c.enabled]
    click.echo(
        f"{config.path}: ok ({len(config.llm)} llm, default {config.default_llm}; "
        f"channels: {', '.join(enabled) or 'none'}; "
        f"agents: {', '.join(config.agents) or 'none'})"
    )


@config_group.command("get")
@click.argument("key")
@click.option("--reveal", is_flag=True, help="Print secrets in full.")
@config_option
def get_command(key: str, reveal: bool, config_path: Path | None) -> None:
    """Print the effective value of KEY (file, defaults and environment), e.g. llm.openai.model.

    Secret values (api_key, token, bot_token) are masked unless --reveal."""
    from pingu.config.edit import (
        KeyNotFound,
        get_value,
        is_secret_key,
        mask,
        mask_secrets,
        parse_key,
        render_value,
    )

    parts = _parse_key_or_fail(key, parse_key)
    config = load_config_or_exit(config_path)
    try:
        value = get_value(config, parts)
    except KeyNotFound as exc:
        _fail(f"config: {exc.args[0]}: not set")
    if not reveal:
        if is_secret_key(parts) and isinstance(value, str) and value:
            value = mask(value)
        else:
            value = mask_secrets(value)
    click.echo(render_value(value))


# Negative numbers (`config set limits.x -1`) are values, not options.
@config_group.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("key")
@click.argument("value")
@config_option
def set_command(key: str, value: str, config_path: Path | None) -> None:
    """Set KEY to VALUE in the config file, keeping its comments and layout.

    VALUE is read as TOML when it is a TOML value (42, true, [1, 2], "text"),
    otherwise as a string. The whole file is validated before anything is written."""
    from pingu.config.edit import (
        is_secret_key,
        mask_secrets,
        parse_key,
        parse_value,
        render_value,
        set_value,
    )

    parts = _parse_key_or_fail(key, parse_key)
    path, _ = resolve_config_path(config_path)
    new_value = parse_value(value)
    try:
        result = set_value(path, parts, new_value, env=os.environ)
    except ConfigError as exc:
        exit_config_error(exc)
    if is_secret_key(parts):
        shown = "(secret)"
    elif isinstance(new_value, dict):  # a whole table may hold secrets: mask them
        shown = render_value(mask_secrets(new_value)).replace("\n", "; ")
    else:
        shown = value
    verb = "Created" if result.created else "Updated"
    click.echo(f"{verb} {result.path}: {key} = {shown}")


def _parse_key_or_fail(key: str, parse_key: Callable[[str], tuple[str, ...]]) -> tuple[str, ...]:
    try:
        return parse_key(key)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="KEY") from None
