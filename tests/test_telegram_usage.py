"""/usage in a Telegram chat: every session of the chat, however many sessions the
database holds, and nothing of other chats or of a group's topics."""

from __future__ import annotations

from pathlib import Path

from pingu.channels.telegram.channel import TelegramChannel
from pingu.channels.telegram.updates import COMMAND, Incoming
from pingu.config.model import ChannelConfig, Config, TelegramSettings
from pingu.store.db import Database
from pingu.store.usage import UsageRecord

CHAT = 5


async def record(db: Database, session_id: str, tokens: int, cost: float | None) -> None:
    await db.history.ensure_session(session_id, "telegram")
    await db.usage.record(
        UsageRecord(
            provider="openai",
            model="gpt-4.1-nano",
            input_tokens=tokens,
            output_tokens=1,
            session_id=session_id,
            cost_estimate=cost,
        )
    )


async def test_usage_counts_every_session_of_the_chat_among_many(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "pingu.db")
    try:
        # The chat's sessions, all older than a thousand sessions of other chats.
        await record(db, "telegram:5", 100, 0.01)
        await record(db, "telegram:5#2", 200, 0.02)
        await record(db, "telegram:5#2:delegate:researcher", 400, None)
        # Not this chat: another chat whose id starts alike, and a topic of a group.
        await record(db, "telegram:50", 10_000, 1.0)
        await record(db, "telegram:5:77", 20_000, 2.0)
        for n in range(1001):
            await db.history.ensure_session(f"http:other-{n}", "http")

        settings = TelegramSettings(bot_token="1:AAtest", allowed_users=(CHAT,))
        cfg = ChannelConfig(name="tg", type="telegram", settings=settings)
        channel = TelegramChannel(
            cfg,
            config=Config(),
            dispatcher=None,
            db=db,
            runtime=None,  # type: ignore[arg-type]
        )
        try:
            incoming = Incoming(1, COMMAND, chat_id=CHAT, chat_type="private", command="usage")
            text = await channel._usage_text(incoming)
        finally:
            await channel.close()
    finally:
        await db.close()
    assert text == (
        "Usage in this chat (2 conversations, 3 model calls):\n"
        "Input tokens: 700 (0 cached)\n"
        "Output tokens: 3\nTotal tokens: 703\n"
        "Estimated cost: $0.0300 (plus 1 model calls with no known price)"
    )
