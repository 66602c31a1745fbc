"""What a raw Telegram update asks of us, read straight from its JSON.

Updates are read as plain dicts, never trusted: anything missing or of the wrong type
makes the update `ignore`d rather than raising, so one odd update cannot stop the loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# What a message is.
TEXT = "text"  # something to hand to the agent
COMMAND = "command"  # /start, /new, ...
NOT_TEXT = "not_text"  # a sticker, a photo without caption, ...: answered, not run
IGNORE = "ignore"  # not for us: service messages, edits, other bots' commands, ...

# Message fields that carry content we cannot read yet (answered with a short note).
_CONTENT_FIELDS = (
    "sticker",
    "photo",
    "video",
    "voice",
    "audio",
    "document",
    "animation",
    "video_note",
    "location",
    "venue",
    "contact",
    "poll",
    "dice",
    "story",
)
_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Incoming:
    update_id: int
    kind: str
    reason: str = ""  # why it is ignored
    chat_id: int = 0
    chat_type: str = ""
    thread_id: int | None = None  # forum topic
    message_id: int | None = None
    user_id: int | None = None
    text: str = ""  # for TEXT: the text for the model; for COMMAND: the arguments
    command: str = ""

    @property
    def chat_key(self) -> str:
        return chat_key(self.chat_id, self.thread_id)

    @property
    def is_group(self) -> bool:
        return self.chat_type in ("group", "supergroup")


# json.loads pairs valid surrogates into one code point: any left in a str is lone.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def chat_key(chat_id: int, thread_id: int | None = None) -> str:
    if thread_id is not None:
        return f"telegram:{chat_id}:{thread_id}"
    return f"telegram:{chat_id}"


def update_id_of(payload: Any) -> int | None:
    if isinstance(payload, dict):
        value = payload.get("update_id")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def chat_key_of(payload: dict[str, Any]) -> str:
    """The chat key for the ledger, or "" when the update has no usable chat."""
    message = payload.get("message")
    if not isinstance(message, dict):
        return ""
    chat = message.get("chat")
    if not isinstance(chat, dict) or not _is_int(chat.get("id")):
        return ""
    return chat_key(chat["id"], _topic(message))


def parse_update(payload: dict[str, Any], *, bot_id: int, bot_username: str) -> Incoming:
    update_id = update_id_of(payload)
    assert update_id is not None, "callers check update_id first"
    message = payload.get("message")
    if not isinstance(message, dict):
        other = next((k for k in payload if k != "update_id"), "nothing")
        return Incoming(update_id, IGNORE, reason=f"not a new message ({other})")
    chat = message.get("chat")
    if not isinstance(chat, dict) or not _is_int(chat.get("id")):
        return Incoming(update_id, IGNORE, reason="message without a chat")
    sender = message.get("from")
    user_id = sender.get("id") if isinstance(sender, dict) else None
    base = Incoming(
        update_id,
        IGNORE,
        chat_id=chat["id"],
        chat_type=str(chat.get("type", "")),
        thread_id=_topic(message),
        message_id=message.get("message_id") if _is_int(message.get("message_id")) else None,
        user_id=user_id if _is_int(user_id) else None,
    )
    if base.chat_type == "channel":
        return _with(base, reason="channel post")
    if base.user_id is None:
        return _with(base, reason="message without a sender")
    if isinstance(sender, dict) and sender.get("is_bot"):
        return _with(base, reason="message from a bot")

    text = message.get("text")
    if not isinstance(text, str):
        text = message.get("caption")
    # JSON allows a lone surrogate ("\ud800"); UTF-8 (SQLite, the model's API) does not:
    # it becomes U+FFFD, as a lenient decoder would show it.
    text = _LONE_SURROGATE.sub("\ufffd", text) if isinstance(text, str) else None

    command = _COMMAND.match(text.strip()) if text and text.lstrip().startswith("/") else None
    if command:
        addressed_to = command.group(2)
        if addressed_to and addressed_to.lower() != bot_username.lower():
            return _with(base, reason="command for another bot")
        return _with(
            base,
            kind=COMMAND,
            command=command.group(1).lower(),
            text=(command.group(3) or "").strip(),
        )

    if base.is_group and not _addressed_to_bot(message, text or "", bot_id, bot_username):
        return _with(base, reason="group message not addressed to the bot")

    if text is None:
        if any(field in message for field in _CONTENT_FIELDS):
            return _with(base, kind=NOT_TEXT)
        return _with(base, reason="service message")
    if base.is_group:
        text = _strip_mention(text, bot_username)
    if not text.strip():
        return _with(base, reason="empty text")
    return _with(base, kind=TEXT, text=text.strip())


def _with(base: Incoming, **changes: Any) -> Incoming:
    values = {**base.__dict__, **changes}
    return Incoming(**values)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _topic(message: dict[str, Any]) -> int | None:
    """The forum topic a message belongs to (a reply thread in an ordinary group is not
    a topic)."""
    thread = message.get("message_thread_id")
    if message.get("is_topic_message") and _is_int(thread):
        return thread
    return None


def _addressed_to_bot(message: dict[str, Any], text: str, bot_id: int, username: str) -> bool:
    if username and re.search(rf"@{re.escape(username)}\b", text, flags=re.IGNORECASE):
        return True
    entities = message.get("entities") or message.get("caption_entities") or []
    for entity in entities if isinstance(entities, list) else []:
        if isinstance(entity, dict) and entity.get("type") == "text_mention":
            user = entity.get("user")
            if isinstance(user, dict) and user.get("id") == bot_id:
                return True
    reply = message.get("reply_to_message")
    if isinstance(reply, dict):
        author = reply.get("from")
        # In a forum every message "replies" to the topic's first message; that is
        # not a reply to the bot.
        is_topic_root = message.get("is_topic_message") and reply.get("message_id") == message.get(
            "message_thread_id"
        )
        if isinstance(author, dict) and author.get("id") == bot_id and not is_topic_root:
            return True
    return False


def _strip_mention(text: str, username: str) -> str:
    stripped = re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.IGNORECASE)
    return re.sub(r"[ \t]{2,}", " ", stripped).strip()
