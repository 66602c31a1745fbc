"""Channels bring user messages to the dispatcher and carry the agent's answers back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pingu.channels.base import Channel

if TYPE_CHECKING:
    from pingu.agent.runtime import AgentRuntime
    from pingu.config.model import ChannelConfig, Config
    from pingu.dispatcher import Dispatcher
    from pingu.store.db import Database

__all__ = ["Channel", "UnknownChannelType", "build_channel"]


class UnknownChannelType(ValueError):
    """A `[channel.<name>]` whose `type` no channel implements."""


def build_channel(
    cfg: ChannelConfig,
    *,
    config: Config,
    dispatcher: Dispatcher,
    db: Database,
    runtime: AgentRuntime,
) -> Channel:
    if cfg.type == "telegram":
        # Imported here: python-telegram-bot is only loaded when a Telegram channel exists.
        from pingu.channels.telegram.channel import TelegramChannel

        return TelegramChannel(cfg, config=config, dispatcher=dispatcher, db=db, runtime=runtime)
    raise UnknownChannelType(f"channel.{cfg.name}: unknown type {cfg.type!r} (known: telegram)")
