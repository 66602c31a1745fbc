"""Reading raw Telegram updates: what is a message for the agent, a command, or not for us."""

from __future__ import annotations

from typing import Any

import pytest

from pingu.channels.telegram.updates import (
    COMMAND,
    IGNORE,
    NOT_TEXT,
    TEXT,
    chat_key_of,
    parse_update,
)

BOT_ID = 42
BOT = "pingu_bot"


def message(text: str | None = "hi", *, chat: dict | None = None, **extra: Any) -> dict:
    msg: dict[str, Any] = {
        "message_id": 7,
        "date": 0,
        "chat": chat or {"id": 111, "type": "private"},
        "from": {"id": 111, "is_bot": False, "first_name": "A"},
        **extra,
    }
    if text is not None:
        msg["text"] = text
    return {"update_id": 1, "message": msg}


def parse(update: dict) -> Any:
    return parse_update(update, bot_id=BOT_ID, bot_username=BOT)


GROUP = {"id": -100, "type": "supergroup"}


def test_private_text() -> None:
    incoming = parse(message("hello"))
    assert (incoming.kind, incoming.text, incoming.chat_key) == (TEXT, "hello", "telegram:111")
    assert incoming.user_id == 111


def test_commands_with_and_without_bot_name() -> None:
    assert (parse(message("/new")).kind, parse(message("/new")).command) == (COMMAND, "new")
    addressed = parse(message(f"/status@{BOT}"))
    assert (addressed.kind, addressed.command) == (COMMAND, "status")
    assert parse(message("/status@other_bot", chat=GROUP)).kind == IGNORE


def test_group_messages_need_a_mention_or_a_reply() -> None:
    assert parse(message("hello all", chat=GROUP)).kind == IGNORE
    mentioned = parse(message(f"@{BOT} what time is it?", chat=GROUP))
    assert (mentioned.kind, mentioned.text) == (TEXT, "what time is it?")
    reply = parse(
        message("and then?", chat=GROUP, reply_to_message={"message_id": 3, "from": {"id": BOT_ID}})
    )
    assert reply.kind == TEXT


def test_forum_topic_has_its_own_chat_key_and_the_topic_root_is_not_a_reply() -> None:
    update = message(
        "hello",
        chat={"id": -100, "type": "supergroup", "is_forum": True},
        message_thread_id=5,
        is_topic_message=True,
        reply_to_message={"message_id": 5, "from": {"id": BOT_ID}},
    )
    incoming = parse(update)
    assert incoming.kind == IGNORE  # not mentioned: the topic root is no reply to the bot
    assert chat_key_of(update) == "telegram:-100:5"
    update["message"]["text"] = f"@{BOT} hello"
    incoming = parse(update)
    assert (incoming.kind, incoming.thread_id, incoming.chat_key) == (TEXT, 5, "telegram:-100:5")


def test_media_without_text_gets_a_note_and_captions_are_text() -> None:
    assert parse(message(None, sticker={"file_id": "x"})).kind == NOT_TEXT
    captioned = parse(message(None, photo=[{"file_id": "x"}], caption="what is this?"))
    assert (captioned.kind, captioned.text) == (TEXT, "what is this?")


@pytest.mark.parametrize(
    "update",
    [
        {"update_id": 1, "edited_message": {"message_id": 1}},
        {"update_id": 1, "channel_post": {"chat": {"id": -5, "type": "channel"}, "text": "x"}},
        {"update_id": 1, "callback_query": {"id": "q"}},
        {"update_id": 1, "message": "not an object"},
        {"update_id": 1, "message": {"chat": {"id": "NaN"}}},
        {"update_id": 1, "message": {"chat": {"id": 1, "type": "private"}, "text": "no sender"}},
        {"update_id": 1},
        message(None, new_chat_members=[{"id": 5}]),
        message("hi", **{"from": {"id": 9, "is_bot": True}}),
    ],
)
def test_everything_else_is_ignored_without_raising(update: dict) -> None:
    assert parse(update).kind == IGNORE
