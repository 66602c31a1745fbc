"""The `pingu` command line.

Each concept owns its commands in its own module; this group imports a command only
when it is invoked, so `pingu --help` and `pingu config get` stay fast and a broken
optional module cannot take the whole CLI down.
"""

from __future__ import annotations

import importlib

import click

# command name -> ("module:attribute" of a click command or group, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("pingu.config.cli:init_command", "Write a starter config file."),
    "config": ("pingu.config.cli:config_group", "Get, set and check configuration values."),
    "db": ("pingu.store.cli:db_group", "Show and apply database migrations."),
    "chat": ("pingu.agent.cli:chat_command", "Chat with an agent in the terminal."),
    "usage": ("pingu.agent.cli:usage_command", "Token usage and cost totals."),
    "gateway": ("pingu.daemon.cli:gateway_command", "Run the daemon: channels and HTTP API."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing must not import every command module.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pingu")
def main() -> None:
    """Pingu: a self-hosted LLM agent daemon."""
