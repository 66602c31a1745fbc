"""The `pingu` command line.

Each concept owns its commands in its own module; this group imports a command only
when it is invoked, so `pingu --help` and `pingu config get` stay fast and a broken
optional module cannot take the whole CLI down.
"""

from __future__ import annotations

import importlib

import click

# command name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "init": "pingu.config.cli:init_command",
    "config": "pingu.config.cli:config_group",
    "db": "pingu.store.cli:db_group",
    "chat": "pingu.agent.cli:chat_command",
    "usage": "pingu.agent.cli:usage_command",
    "gateway": "pingu.daemon.cli:gateway_command",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pingu")
def main() -> None:
    """Pingu: a self-hosted LLM agent daemon."""
