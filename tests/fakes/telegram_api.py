"""A fake Telegram Bot API server on 127.0.0.1 for end-to-end tests with the real PTB.

It speaks the Bot API over HTTP and is as strict as the real service where our code can trip: the
same status codes, envelopes and `description` strings, so python-telegram-bot raises the same
exceptions it would raise against api.telegram.org.

Pointing a client at it
-----------------------
The Bot API serves methods at ``{api_base_url}/bot<token>/<method>`` and files at
``{api_base_url}/file/bot<token>/<file_path>``. With ``api_base_url = fake.url`` (config key
``channel.<name>.settings.api_base_url``)::

    Bot(token, base_url=f"{api_base_url}/bot", base_file_url=f"{api_base_url}/file/bot")

(PTB appends the token to both; for the real service ``api_base_url`` is ``https://api.telegram.org``.)

Requests are accepted the way the real server accepts them: GET query strings, POST
``application/x-www-form-urlencoded`` (what PTB sends: strings as they are, every other value JSON
encoded), ``multipart/form-data`` (PTB, when a file is uploaded) and ``application/json``.

Test-side API (``FakeTelegram``)
--------------------------------
Identity: ``fake.url`` (``http://127.0.0.1:<port>``), ``fake.token``, ``fake.bot_id``,
``fake.bot_user`` (the bot's username, no ``@``), ``fake.bot_user_dict`` (the getMe ``User``).

Incoming traffic, each returns the new ``update_id`` (users and chats are created on first use; a
private chat's id must equal the user's id, group and supergroup ids must be negative):

- ``push_text(chat_id, user_id, text, *, chat_type="private", thread_id=None,
  reply_to_message_id=None, username=None, first_name=None, mention_bot=False, chat_title=None)``:
  a ``message``. ``mention_bot`` prefixes ``@<bot_user> ``; ``mention`` entities are made for every
  ``@name`` and a ``bot_command`` entity for a leading ``/command``, as Telegram does.
  ``thread_id`` in a supergroup makes the chat a forum and the message a topic message (the topic
  is created on first use; as on the real service, a topic message without an explicit reply carries
  ``reply_to_message`` = the topic's ``forum_topic_created`` service message).
- ``push_edit(chat_id, message_id, text)``: an ``edited_message`` of a message pushed before.
- ``push_channel_post(chat_id, text)``: a ``channel_post`` (chat type ``channel``, no ``from``).
- ``push_sticker(chat_id, user_id, emoji="👍", ...)``, ``push_photo(chat_id, user_id, data=...,
  caption=None, ...)``, ``push_document(chat_id, user_id, data, file_name=..., mime_type=...,
  caption=None, ...)``: media messages; their files can be fetched with getFile and downloaded.
- ``push_new_members(chat_id, user_ids, *, chat_type="group")``: a ``new_chat_members`` service
  message (the first id is the user who added them).
- ``push_callback_query(chat_id, user_id, message_id, data)``: a ``callback_query`` on a message
  the bot sent.
- ``push_raw(update)``: any dict as an update, malformed or of an unknown type; ``update_id`` is
  added when missing.

What the bot did:

- ``sent``: every call to a Bot API method, in order of completion, as ``ApiCall(method, params,
  status, response)``; ``calls(method)`` filters by method name (case-insensitive). ``params`` are
  decoded (ints, booleans and JSON fields parsed). A request the client abandoned (PTB cancels its
  long poll when it stops) is logged with status 499.
- ``chat_messages(chat_id, thread_id=None)``: the bot's messages in that chat as a user would see
  them now (text after the last edit, deleted ones gone, ordered by ``message_id``);
  ``thread_id=None`` means every thread, otherwise only that topic/thread. ``chat_texts(...)``
  gives just the texts.
- ``message(chat_id, message_id)``: the stored ``Message`` dict of any message (bot's or user's).
- ``edits`` (``EditRecord(chat_id, message_id, old_text, new_text)``), ``chat_actions``
  (``ChatActionRecord(chat_id, action, thread_id)``), ``callback_answers``, ``commands(scope=None,
  language_code="")``, ``webhook_url``, ``pending_update_ids`` (pushed, not yet confirmed),
  ``is_polling`` (a getUpdates long poll is waiting now).

Control:

- ``flood(method, retry_after=1, times=1)``: the next ``times`` calls to ``method`` answer 429
  ``Too Many Requests: retry after N`` with ``parameters.retry_after`` (PTB raises ``RetryAfter``).
- ``fail(method, status, description, times=1)``: the next calls answer any error you like
  (e.g. 502 "Bad Gateway"; PTB raises ``NetworkError`` for it).
- ``block(user_id)``: from now on every call naming that private chat answers 403 ``Forbidden: bot
  was blocked by the user`` (PTB raises ``Forbidden``).
- ``await wait_for(predicate, timeout=5.0)``: returns the predicate's first truthy value, waking on
  every request and push; ``TimeoutError`` names what it waited for.
- ``await wait_until_idle(quiet_s=0.2, timeout=10.0)``: until every pushed update has been confirmed
  (a later getUpdates with a higher offset), no request other than a long poll is in flight, and
  none has arrived for ``quiet_s``.

Real-service behaviour worth knowing
------------------------------------
- Wrong token of the right shape -> 401 ``Unauthorized``; malformed token or unknown method -> 404
  ``Not Found`` (PTB raises ``InvalidToken`` for both).
- getUpdates: ``offset`` forgets every update with a smaller id for good (negative: keep only the
  last ``-offset``); ``timeout`` long-polls and returns as soon as an update arrives; ``limit``
  1-100; ``allowed_updates`` is remembered across calls and updates of other types are dropped. A
  getUpdates that is going to wait (``timeout`` > 0, nothing pending) while another one waits
  terminates the older one with 409 ``Conflict: terminated by other getUpdates request; make sure
  that only one bot instance is running`` and waits in its place (as telegram-bot-api does: one
  409 at once per 3 s, further ones after a 3 s delay). While a webhook is set, getUpdates is a 409
  as well.
- Text: ``parse_mode`` HTML is parsed like tdlib does it (supported tags only, byte offsets in the
  errors, ``&lt; &gt; &amp; &quot;`` and numeric entities decoded, other ``&...;`` kept as text),
  MarkdownV2 and Markdown are parsed with their reserved characters; the result is trimmed and
  must be 1..4096 UTF-16 code units. sendMessage says ``message is too long``, editMessageText says
  ``MESSAGE_TOO_LONG`` (as the real service does).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import secrets
import string
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from aiohttp import web

T = TypeVar("T")

MAX_MESSAGE_LENGTH = 4096  # UTF-16 code units, after entity parsing
MAX_DOWNLOAD_SIZE = 20 * 1024 * 1024  # getFile refuses bigger files
DEFAULT_BOT_ID = 7_000_000_001
DEFAULT_BOT_USERNAME = "pingu_test_bot"

CONFLICT_OTHER_POLL = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is "
    "running"
)
CONFLICT_WEBHOOK = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete "
    "the webhook first"
)
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
QUERY_TOO_OLD = "Bad Request: query is too old and response timeout expired or query ID is invalid"

CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
# Update types delivered when allowed_updates is empty or was never set.
DEFAULT_EXCLUDED_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})

_INT_PARAMS = frozenset(
    {
        "chat_id",
        "message_id",
        "message_thread_id",
        "reply_to_message_id",
        "offset",
        "limit",
        "timeout",
        "from_chat_id",
        "user_id",
        "cache_time",
        "max_connections",
    }
)
_BOOL_PARAMS = frozenset(
    {
        "disable_notification",
        "protect_content",
        "allow_sending_without_reply",
        "drop_pending_updates",
        "show_alert",
        "disable_web_page_preview",
        "allow_paid_broadcast",
    }
)
_JSON_PARAMS = frozenset(
    {
        "reply_markup",
        "entities",
        "caption_entities",
        "reply_parameters",
        "link_preview_options",
        "allowed_updates",
        "commands",
        "scope",
        "media",
    }
)
_TOKEN_SHAPE = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{30,50}")
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
_MENTION = re.compile(r"(?<![\w@])@([A-Za-z][A-Za-z0-9_]{3,31})(?![\w@])")
_BOT_COMMAND = re.compile(r"/[A-Za-z0-9_]{1,64}(?:@[A-Za-z][A-Za-z0-9_]{2,31})?(?![\w/])")


class ApiError(Exception):
    """An error answer of the Bot API: HTTP status, description and optional parameters."""

    def __init__(self, status: int, description: str, parameters: dict | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


def _bad(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


class EntityParseError(Exception):
    """Markup that Telegram refuses; the message follows "Bad Request: can't parse entities: "."""


# --------------------------------------------------------------------------------------------
# Text measurement


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's limits and entity offsets."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _utf16_offsets(text: str) -> list[int]:
    """offsets[k] = UTF-16 offset of code point k (with one extra entry for the end)."""
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + (2 if ord(ch) > 0xFFFF else 1))
    return offsets


# --------------------------------------------------------------------------------------------
# HTML, following tdlib's parse_html (td/telegram/MessageEntity.cpp) and its unit tests.

_HTML_TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)
_HTML_ENTITY_TYPE = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "u": "underline",
    "ins": "underline",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "pre": "pre",
    "code": "code",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
    "a": "text_link",
}
_SPACE_BYTES = frozenset(b" \t\r\n\v\0")
_NAME_TOKEN_BYTES = frozenset((string.ascii_letters + string.digits + ".-").encode())
_INVALID_SURROGATE = (
    "Text contains invalid Unicode characters after decoding HTML entities, check for unmatched "
    "surrogate code units"
)


def _decode_html_entity(data: bytes, pos: int) -> tuple[int, int] | None:
    """(code point, position after it) for an entity at data[pos] == '&', or None if not one."""
    n = len(data)

    def at(k: int) -> int:
        return data[k] if k < n else 0

    end = pos + 1
    value = 0
    if at(end) == ord("#"):
        end += 1
        if at(end) == ord("x"):
            end += 1
            while chr(at(end)) in string.hexdigits and at(end) != 0:
                value = value * 16 + int(chr(at(end)), 16)
                end += 1
                if value >= 0x10FFFF:
                    return None
        else:
            while chr(at(end)).isdigit() and at(end) != 0:
                value = value * 10 + at(end) - ord("0")
                end += 1
                if value >= 0x10FFFF:
                    return None
        if value == 0 or end - pos >= 10:
            return None
    else:
        while chr(at(end)).isascii() and chr(at(end)).isalpha():
            end += 1
        name = data[pos + 1 : end]
        known = {b"lt": ord("<"), b"gt": ord(">"), b"amp": ord("&"), b"quot": ord('"')}
        if name not in known:
            return None
        value = known[name]
    if at(end) == ord(";"):
        end += 1
    return value, end


def _normalize_url(url: str) -> str:
    """As Telegram stores a link: scheme added, "/" after a bare host ("t.me?x" -> "http://t.me/?x")."""
    url = url.strip()
    if "://" not in url and not url.lower().startswith(("tg:", "mailto:")):
        url = "http://" + url
    scheme, sep, rest = url.partition("://")
    if sep and scheme.lower() in ("http", "https"):
        host_end = min((k for k in (rest.find(c) for c in "/?#") if k != -1), default=len(rest))
        if rest[host_end : host_end + 1] != "/":
            url = f"{scheme}://{rest[:host_end]}/{rest[host_end:]}"
    return url


def parse_html(text: str) -> tuple[str, list[dict]]:
    """Telegram's HTML -> (plain text, entities at UTF-16 offsets); EntityParseError if refused."""
    data = text.encode("utf-8", "surrogatepass")
    n = len(data)

    def at(k: int) -> int:
        return data[k] if k < n else 0

    out = bytearray()
    stack: list[tuple[str, str, int]] = []  # (tag, argument, start in out)
    spans: list[tuple[str, str, int, int]] = []  # (tag, argument, start, end) in out bytes
    i = 0
    while i < n:
        c = data[i]
        if c == ord("&"):
            decoded = _decode_html_entity(data, i)
            if decoded is not None:
                code_point, i = decoded
                if 0xD800 <= code_point <= 0xDFFF:
                    raise EntityParseError(_INVALID_SURROGATE)
                out += chr(code_point).encode()
                continue
        if c != ord("<"):
            out.append(c)
            i += 1
            continue
        begin = i
        i += 1
        if at(i) != ord("/"):
            while at(i) not in _SPACE_BYTES and at(i) != ord(">"):
                i += 1
            if i >= n:
                raise EntityParseError(f"Unclosed start tag at byte offset {begin}")
            tag = data[begin + 1 : i].decode("utf-8", "replace").lower()
            if tag not in _HTML_TAGS:
                raise EntityParseError(f'Unsupported start tag "{tag}" at byte offset {begin}')
            argument = ""
            while at(i) != ord(">"):
                while i < n and at(i) in _SPACE_BYTES:
                    i += 1
                if at(i) == ord(">"):
                    break
                if i >= n:
                    raise EntityParseError(f"Unclosed start tag at byte offset {begin}")
                attr_begin = i
                while at(i) not in _SPACE_BYTES and at(i) not in (ord("="), ord(">")):
                    i += 1
                attr_name = data[attr_begin:i]
                if not attr_name:
                    raise EntityParseError(
                        f'Empty attribute name in the tag "{tag}" at byte offset {begin}'
                    )
                while i < n and at(i) in _SPACE_BYTES:
                    i += 1
                value = ""
                if at(i) == ord("="):
                    i += 1
                    while i < n and at(i) in _SPACE_BYTES:
                        i += 1
                    if i >= n:
                        raise EntityParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                    if at(i) not in (ord("'"), ord('"')):
                        token_begin = i
                        while at(i) in _NAME_TOKEN_BYTES:
                            i += 1
                        value = data[token_begin:i].decode().lower()
                        if at(i) not in _SPACE_BYTES and at(i) != ord(">"):
                            raise EntityParseError(
                                f"Unexpected end of name token at byte offset {token_begin}"
                            )
                    else:
                        quote = at(i)
                        i += 1
                        raw = bytearray()
                        while i < n and at(i) != quote:
                            if at(i) == ord("&"):
                                decoded = _decode_html_entity(data, i)
                                if decoded is not None:
                                    raw += chr(decoded[0]).encode("utf-8", "surrogatepass")
                                    i = decoded[1]
                                    continue
                            raw.append(at(i))
                            i += 1
                        if at(i) == quote and i < n:
                            i += 1
                        value = raw.decode("utf-8", "replace")
                if i >= n:
                    raise EntityParseError(f"Unclosed start tag at byte offset {begin}")
                if tag == "a" and attr_name == b"href":
                    argument = value
                elif tag == "code" and attr_name == b"class" and value.startswith("language-"):
                    argument = value[len("language-") :]
                elif tag == "span" and attr_name == b"class" and value.startswith("tg-"):
                    argument = value[len("tg-") :]
                elif tag == "tg-emoji" and attr_name == b"emoji-id":
                    argument = value
                elif tag == "blockquote" and attr_name == b"expandable":
                    argument = "1"
            if tag == "span" and argument != "spoiler":
                raise EntityParseError(
                    f'Tag "span" must have class "tg-spoiler" at byte offset {begin}'
                )
            stack.append((tag, argument, len(out)))
            i += 1  # the '>'
        else:
            if not stack:
                raise EntityParseError(f"Unexpected end tag at byte offset {begin}")
            while at(i) not in _SPACE_BYTES and at(i) != ord(">"):
                i += 1
            end_tag = data[begin + 2 : i].decode("utf-8", "replace")
            while i < n and at(i) in _SPACE_BYTES:
                i += 1
            if at(i) != ord(">"):
                raise EntityParseError(f"Unclosed end tag at byte offset {begin}")
            tag, argument, start = stack.pop()
            if end_tag and end_tag != tag:
                raise EntityParseError(
                    f'Unmatched end tag at byte offset {begin}, expected "</{tag}>", '
                    f'found "</{end_tag}>"'
                )
            i += 1
            if len(out) > start:
                spans.append((tag, argument, start, len(out)))
    if stack:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    plain = out.decode("utf-8", "surrogatepass")
    return plain, _html_spans_to_entities(out, spans)


def _html_spans_to_entities(out: bytearray, spans: list[tuple[str, str, int, int]]) -> list[dict]:
    def utf16_at(byte_pos: int) -> int:
        return utf16_len(out[:byte_pos].decode("utf-8", "surrogatepass"))

    entities: list[dict] = []
    for tag, argument, start, end in spans:
        kind = _HTML_ENTITY_TYPE[tag]
        entity: dict[str, Any] = {"type": kind}
        if kind == "text_link":
            # <a> without href links its text when that is a URL; unusable links are dropped.
            url = argument or out[start:end].decode("utf-8", "surrogatepass")
            if not _valid_link(url):
                continue
            entity["url"] = _normalize_url(url)
        elif kind == "blockquote" and argument:
            entity["type"] = "expandable_blockquote"
        elif kind == "custom_emoji":
            if not argument.isdigit():
                continue
            entity["custom_emoji_id"] = argument
        elif kind == "code" and argument:
            entity["language"] = argument
        offset = utf16_at(start)
        entity = {"offset": offset, "length": utf16_at(end) - offset, **entity}
        entities.append(entity)
    # <pre><code class="language-x"> (either nesting) is one pre entity with a language.
    merged: list[dict] = []
    for entity in entities:
        partner = next(
            (
                other
                for other in entities
                if other is not entity
                and {other["type"], entity["type"]} == {"pre", "code"}
                and other["offset"] == entity["offset"]
                and other["length"] == entity["length"]
            ),
            None,
        )
        if partner is None:
            merged.append(entity)
        elif entity["type"] == "pre":
            language = partner.get("language") or entity.get("language")
            merged.append({**entity, **({"language": language} if language else {})})
    merged.sort(key=lambda e: (e["offset"], -e["length"]))
    return merged


# --------------------------------------------------------------------------------------------
# MarkdownV2 and legacy Markdown, following tdlib's parse_markdown_v2 / parse_markdown.

_MDV2_RESERVED = frozenset("_*[]()~`>#+-=|{}.!")
_MDV2_TYPE_NAME = {
    "bold": "Bold",
    "italic": "Italic",
    "underline": "Underline",
    "strikethrough": "Strikethrough",
    "spoiler": "Spoiler",
    "code": "Code",
    "pre": "Pre",
    "pre_code": "PreCode",
    "text_link": "TextUrl",
    "custom_emoji": "CustomEmoji",
}
_CODE_KINDS = frozenset({"code", "pre", "pre_code"})
_MD_SPACES = " \t\r\n"
_URL_WITHOUT_SCHEME = re.compile(r"[\w-]+(\.[\w-]+)*\.[A-Za-z]{2,}([/?#:]\S*)?")


@dataclass
class _OpenMd:
    kind: str
    out_start: int  # code point index into the output
    byte_offset: int  # where the marker starts in the input, for errors
    argument: str = ""


@dataclass
class _OpenQuote:
    out_start: int
    depth: int  # entities open when the quote began; those opened inside must close inside
    expandable: bool = False


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogatepass"))


def _unclosed(opened: _OpenMd) -> EntityParseError:
    return EntityParseError(
        f"Can't find end of {_MDV2_TYPE_NAME[opened.kind]} entity at byte offset "
        f"{opened.byte_offset}"
    )


def _valid_link(url: str) -> bool:
    if not url or any(ch.isspace() for ch in url):
        return False
    scheme, sep, rest = url.partition("://")
    if sep:
        return scheme.lower() in ("http", "https", "ftp", "tonsite") and bool(rest)
    return bool(_URL_WITHOUT_SCHEME.fullmatch(url))


def _custom_emoji_id(url: str) -> str:
    scheme, _, rest = url.partition(":")
    if scheme.lower() != "tg":
        raise EntityParseError("Custom emoji URL must have scheme tg")
    host = re.split(r"[/?#]", rest.removeprefix("//"), maxsplit=1)[0]
    if host.lower() != "emoji":
        raise EntityParseError('Custom emoji URL must have host "emoji"')
    query = rest.partition("?")[2].partition("#")[0]
    ids = [v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "id"]
    if not ids:
        raise EntityParseError("Custom emoji URL must have an emoji identifier")
    if not ids[0].isdigit() or ids[0].startswith("0"):
        raise EntityParseError("Invalid custom emoji identifier specified")
    return ids[0]


def parse_markdown_v2(text: str) -> tuple[str, list[dict]]:
    """Telegram's MarkdownV2, after tdlib's parse_markdown_v2 and its unit tests."""
    out: list[str] = []
    stack: list[_OpenMd] = []
    spans: list[tuple[str, int, int, str]] = []
    quote: _OpenQuote | None = None
    # A line "starts" until it has output other than '\r' or its '>' marker was read.
    line_started = False
    n = len(text)
    i = 0

    def emit(ch: str) -> None:
        nonlocal line_started
        out.append(ch)
        if ch == "\n":
            line_started = False
        elif ch != "\r":
            line_started = True

    def close_quote() -> None:
        nonlocal quote
        assert quote is not None
        if len(stack) > quote.depth:
            raise _unclosed(stack[-1])
        kind = "expandable_blockquote" if quote.expandable else "blockquote"
        if len(out) > quote.out_start:
            spans.append((kind, quote.out_start, len(out), ""))
        quote = None

    while i < n:
        c = text[i]
        top = stack[-1].kind if stack else None
        # A quote is made of lines starting with '>' (lines as they come out, after markers).
        if top not in _CODE_KINDS and not line_started:
            if c == ">":
                if quote is None:
                    quote = _OpenQuote(len(out), len(stack))
                line_started = True
                i += 1
                continue
            if quote is not None:
                close_quote()
        if c == "\\" and i + 1 < n and 0 < ord(text[i + 1]) <= 126:
            emit(text[i + 1])
            i += 2
            continue
        if top in _CODE_KINDS and c != "`":
            emit(c)
            i += 1
            continue
        if c not in _MDV2_RESERVED:
            emit(c)  # including a '\\' that escapes nothing
            i += 1
            continue
        is_end = (
            top is not None
            and {
                "bold": c == "*",
                "italic": c == "_" and text[i + 1 : i + 2] != "_",
                "code": c == "`",
                "pre": text.startswith("```", i),
                "pre_code": text.startswith("```", i),
                "text_link": c == "]",
                "custom_emoji": c == "]",
                "underline": text.startswith("__", i),
                "strikethrough": c == "~",
                "spoiler": text.startswith("||", i),
            }[top]
        )
        if not is_end:
            if (
                quote is not None
                and text.startswith("||", i)
                and (i + 2 >= n or text[i + 2] in "\r\n")
            ):
                quote.expandable = True  # '||' ending a quote's last line
                i += 2
                continue
            begin = i
            argument = ""
            if c == "_" and text.startswith("__", i):
                kind, i = "underline", i + 2
            elif c == "_":
                kind, i = "italic", i + 1
            elif c == "*":
                kind, i = "bold", i + 1
            elif c == "~":
                kind, i = "strikethrough", i + 1
            elif text.startswith("||", i):
                kind, i = "spoiler", i + 2
            elif c == "[":
                kind, i = "text_link", i + 1
            elif text.startswith("![", i):
                kind, i = "custom_emoji", i + 2
            elif text.startswith("```", i):
                i += 3
                language_end = i
                while language_end < n and text[language_end] not in _MD_SPACES + "`":
                    language_end += 1
                if language_end > i and language_end < n and text[language_end] in _MD_SPACES:
                    kind, argument, i = "pre_code", text[i:language_end], language_end
                    if text[i : i + 2] in ("\r\n", "\n\r"):
                        i += 2
                    elif text[i : i + 1] in ("\r", "\n"):
                        i += 1
                else:
                    kind = "pre"
            elif c == "`":
                kind, i = "code", i + 1
            else:
                raise EntityParseError(
                    f"Character '{c}' is reserved and must be escaped with the preceding '\\'"
                )
            stack.append(_OpenMd(kind, len(out), _byte_offset(text, begin), argument))
            continue
        opened = stack.pop()
        i += {"underline": 2, "spoiler": 2, "pre": 3, "pre_code": 3}.get(opened.kind, 1)
        argument = opened.argument
        if opened.kind in ("text_link", "custom_emoji"):
            has_url = text[i : i + 1] == "("
            url_chars: list[str] = []
            if has_url:
                url_begin = i + 1
                i += 1
                while i < n and text[i] != ")":
                    if text[i] == "\\" and i + 1 < n and 0 < ord(text[i + 1]) <= 126:
                        url_chars.append(text[i + 1])
                        i += 2
                        continue
                    url_chars.append(text[i])
                    i += 1
                if i >= n:
                    what = "a custom emoji URL" if opened.kind == "custom_emoji" else "a URL"
                    raise EntityParseError(
                        f"Can't find end of {what} at byte offset {_byte_offset(text, url_begin)}"
                    )
                i += 1
            if opened.kind == "custom_emoji":
                if not has_url:
                    raise EntityParseError("Custom emoji entity must contain a tg://emoji URL")
                argument = _custom_emoji_id("".join(url_chars))
            else:
                url = "".join(url_chars) if has_url else "".join(out[opened.out_start :])
                if not _valid_link(url):
                    continue  # Telegram keeps the text and drops a link it can't use
                argument = url
        if len(out) > opened.out_start:
            spans.append((opened.kind, opened.out_start, len(out), argument))
    if stack:
        raise _unclosed(stack[-1])
    if quote is not None:
        close_quote()
    plain = "".join(out)
    return plain, _md_spans_to_entities(plain, spans)


def parse_markdown(text: str) -> tuple[str, list[dict]]:
    """Legacy Markdown: *bold* _italic_ `code` ```pre``` [text](url), '\\' escapes those."""
    out: list[str] = []
    spans: list[tuple[str, int, int, str]] = []
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "_*`[":
            out.append(text[i + 1])
            i += 2
            continue
        if c not in "_*`[":
            out.append(c)
            i += 1
            continue
        begin = _byte_offset(text, i)
        start = len(out)
        if c == "[":
            close = text.find("]", i + 1)
            if close == -1 or text[close + 1 : close + 2] != "(":
                out.append(c)
                i += 1
                continue
            url_end = text.find(")", close + 2)
            if url_end == -1:
                raise EntityParseError(
                    f"Can't find end of the entity starting at byte offset {begin}"
                )
            out.extend(text[i + 1 : close])
            spans.append(("text_link", start, len(out), text[close + 2 : url_end]))
            i = url_end + 1
            continue
        marker = "```" if text[i : i + 3] == "```" else c
        end = text.find(marker, i + len(marker))
        if end == -1:
            raise EntityParseError(f"Can't find end of the entity starting at byte offset {begin}")
        inner = text[i + len(marker) : end]
        kind = {"*": "bold", "_": "italic", "`": "code", "```": "pre"}[marker]
        argument = ""
        if kind == "pre" and "\n" in inner:
            first, rest = inner.split("\n", 1)
            if first and " " not in first:
                argument, inner = first, rest
        out.extend(inner)
        spans.append(("pre_code" if argument else kind, start, len(out), argument))
        i = end + len(marker)
    plain = "".join(out)
    return plain, _md_spans_to_entities(plain, spans)


def _md_spans_to_entities(plain: str, spans: list[tuple[str, int, int, str]]) -> list[dict]:
    offsets = _utf16_offsets(plain)
    entities = []
    for kind, start, end, argument in spans:
        entity: dict[str, Any] = {"offset": offsets[start], "length": offsets[end] - offsets[start]}
        if kind == "pre_code":
            entity.update(type="pre", language=argument)
        elif kind == "text_link":
            entity.update(type="text_link", url=_normalize_url(argument))
        elif kind == "custom_emoji":
            entity.update(type="custom_emoji", custom_emoji_id=argument)
        else:
            entity["type"] = kind
        entities.append(entity)
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return entities


def _trim(text: str, entities: list[dict]) -> tuple[str, list[dict]]:
    """Telegram trims surrounding whitespace; entities are shifted and clipped to what is left."""
    stripped_left = text.lstrip(" \t\r\n")
    result = stripped_left.rstrip(" \t\r\n")
    shift = utf16_len(text) - utf16_len(stripped_left)
    limit = utf16_len(result)
    fixed = []
    for entity in entities:
        start = max(entity["offset"] - shift, 0)
        end = min(entity["offset"] + entity["length"] - shift, limit)
        if end > start:
            fixed.append({**entity, "offset": start, "length": end - start})
    return result, fixed


def format_text(
    text: str, parse_mode: str | None, entities: list[dict] | None
) -> tuple[str, list[dict]]:
    """Apply parse_mode/entities the way sendMessage does; ApiError for what Telegram refuses."""
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        raise _bad("text must be encoded in UTF-8")
    if entities is not None:
        if not isinstance(entities, list):
            raise _bad("can't parse entities JSON object")
        units = utf16_len(text)
        parsed = []
        for entity in entities:
            if not isinstance(entity, dict) or not isinstance(entity.get("type"), str):
                raise _bad('can\'t parse MessageEntity: Field "type" must be of type String')
            offset, length = entity.get("offset"), entity.get("length")
            if not isinstance(offset, int) or not isinstance(length, int):
                raise _bad('can\'t parse MessageEntity: Field "offset" must be of type Number')
            # tdlib clips entities to the text and drops empty ones rather than failing.
            end = min(offset + length, units)
            offset = max(offset, 0)
            if end > offset:
                parsed.append({**entity, "offset": offset, "length": end - offset})
        plain = text
    elif parse_mode is None or parse_mode == "":
        plain, parsed = text, []
    else:
        mode = parse_mode.lower()
        parser = {"html": parse_html, "markdownv2": parse_markdown_v2, "markdown": parse_markdown}
        if mode not in parser:
            raise _bad(f'unsupported parse_mode "{parse_mode}"')
        try:
            plain, parsed = parser[mode](text)
        except EntityParseError as exc:
            raise _bad(f"can't parse entities: {exc}") from None
    return _trim(plain, parsed)


def detect_entities(text: str, *, command_allowed: bool = True) -> list[dict]:
    """The entities Telegram attaches to a user's plain text: mentions and a leading bot_command."""
    offsets = _utf16_offsets(text)
    entities = []
    if command_allowed:
        command = _BOT_COMMAND.match(text)
        if command:
            entities.append({"offset": 0, "length": offsets[command.end()], "type": "bot_command"})
    for match in _MENTION.finditer(text):
        start, end = offsets[match.start()], offsets[match.end()]
        entities.append({"offset": start, "length": end - start, "type": "mention"})
    entities.sort(key=lambda e: e["offset"])
    return entities


# --------------------------------------------------------------------------------------------
# Records for tests


@dataclass(frozen=True)
class ApiCall:
    """One Bot API request: method as called, decoded parameters, HTTP status and JSON answer."""

    method: str
    params: dict[str, Any]
    status: int
    response: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass(frozen=True)
class BotMessage:
    """A message of the bot as it is visible in the chat now."""

    chat_id: int
    message_id: int
    text: str | None
    entities: list[dict]
    thread_id: int | None
    reply_to_message_id: int | None
    reply_markup: dict | None
    edit_count: int
    kind: str  # "text", "document", "photo", ...


@dataclass(frozen=True)
class EditRecord:
    chat_id: int
    message_id: int
    old_text: str | None
    new_text: str


@dataclass(frozen=True)
class ChatActionRecord:
    chat_id: int
    action: str
    thread_id: int | None


@dataclass(frozen=True)
class CallbackAnswer:
    callback_query_id: str
    text: str | None
    show_alert: bool


@dataclass
class _Chat:
    id: int
    type: str
    title: str | None = None
    username: str | None = None
    first_name: str | None = None
    is_forum: bool = False
    next_message_id: int = 1
    topics: dict[int, str] = field(default_factory=dict)

    def to_api(self) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.type == "private":
            chat["first_name"] = self.first_name or "User"
            if self.username:
                chat["username"] = self.username
        else:
            chat["title"] = self.title or f"Chat {self.id}"
            if self.username:
                chat["username"] = self.username
            if self.is_forum:
                chat["is_forum"] = True
        return chat


@dataclass
class _Stored:
    chat_id: int
    message_id: int
    from_bot: bool
    payload: dict[str, Any]
    thread_id: int | None
    kind: str
    edit_count: int = 0
    deleted: bool = False

    @property
    def text(self) -> str | None:
        return self.payload.get("text", self.payload.get("caption"))

    @property
    def entities(self) -> list[dict]:
        return list(self.payload.get("entities", self.payload.get("caption_entities", [])))


@dataclass
class _File:
    file_id: str
    file_unique_id: str
    data: bytes
    file_path: str


@dataclass
class _Poll:
    terminated: bool = False


@dataclass
class _Injected:
    status: int
    description: str
    parameters: dict | None
    remaining: int


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise _bad(f"wrong parameter {name} specified")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise _bad(f"invalid {name} specified") from None


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "1")


def _decode_params(raw: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, str):
            if key in _JSON_PARAMS:
                try:
                    value = json.loads(value)
                except ValueError:
                    raise _bad(f"can't parse {key} JSON object") from None
            elif key in _BOOL_PARAMS:
                value = _as_bool(value)
            elif key in _INT_PARAMS and re.fullmatch(r"\s*-?\d+\s*", value):
                value = int(value)
        params[key] = value
    return params


# --------------------------------------------------------------------------------------------
# The server


class FakeTelegram:
    """The fake Bot API: `await start()`, point the bot at `url`, push updates, assert, `stop()`."""

    def __init__(
        self,
        *,
        bot_id: int = DEFAULT_BOT_ID,
        bot_username: str = DEFAULT_BOT_USERNAME,
        bot_first_name: str = "Pingu Test",
    ) -> None:
        alphabet = string.ascii_letters + string.digits
        self.bot_id = bot_id
        self.token = f"{bot_id}:AA" + "".join(secrets.choice(alphabet) for _ in range(33))
        self.bot_user = bot_username
        self.bot_user_dict: dict[str, Any] = {
            "id": bot_id,
            "is_bot": True,
            "first_name": bot_first_name,
            "username": bot_username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }
        self.sent: list[ApiCall] = []
        self.edits: list[EditRecord] = []
        self.chat_actions: list[ChatActionRecord] = []
        self.callback_answers: list[CallbackAnswer] = []
        self.webhook_url: str = ""
        self._chats: dict[int, _Chat] = {}
        self._users: dict[int, dict[str, Any]] = {}
        self._messages: dict[tuple[int, int], _Stored] = {}
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(100_000_001)
        self._allowed_updates: frozenset[str] | None = None
        self._poll: _Poll | None = None
        self._files: dict[str, _File] = {}
        self._file_counter = itertools.count(1)
        self._callbacks: dict[str, bool] = {}  # id -> answered
        self._blocked: set[int] = set()
        self._next_conflict_at = 0.0
        self._commands: dict[tuple[str, str], list[dict[str, str]]] = {}
        self._injected: dict[str, list[_Injected]] = {}
        self._stalls: dict[str, list[float]] = {}  # method -> response delays, in order
        self._changed = asyncio.Event()
        self._in_flight = 0
        self._last_activity = time.monotonic()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # ----- lifecycle

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeTelegram is not started")
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> FakeTelegram:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_method)
        app.router.add_route("GET", "/file/bot{token}/{path:.+}", self._handle_file)
        # A client that hangs up mid long-poll must not stay "the" poller.
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[union-attr]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        self._closing = True
        self._notify()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTelegram:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ----- control

    def flood(self, method: str, retry_after: float = 1, times: int = 1) -> None:
        """The next `times` calls of `method` answer 429 (flood control). The real API's
        retry_after is whole seconds; a fraction keeps a test fast."""
        self._injected.setdefault(method.lower(), []).append(
            _Injected(
                429,
                f"Too Many Requests: retry after {retry_after}",
                {"retry_after": retry_after},
                times,
            )
        )

    def block(self, user_id: int) -> None:
        """The user blocks the bot: every call naming their chat answers 403 from now on."""
        self._blocked.add(user_id)

    def fail(self, method: str, status: int, description: str, times: int = 1) -> None:
        self._injected.setdefault(method.lower(), []).append(
            _Injected(status, description, None, times)
        )

    def stall(self, method: str, seconds: float, times: int = 1) -> None:
        """The next `times` calls of `method` take effect (a message is sent, ...), then
        their response is held back `seconds`: a client's read timeout after delivery."""
        self._stalls.setdefault(method.lower(), []).extend([seconds] * times)

    async def wait_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = self._changed
            value = predicate()
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                name = getattr(predicate, "__name__", repr(predicate))
                raise TimeoutError(f"fake Telegram: condition {name} not met within {timeout}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    async def wait_until_idle(
        self,
        quiet_s: float = 0.2,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            quiet_for = time.monotonic() - self._last_activity
            if not self._updates and self._in_flight == 0 and quiet_for >= quiet_s:
                return
            if loop.time() >= deadline:
                raise TimeoutError(
                    f"fake Telegram not idle after {timeout}s: {len(self._updates)} unconfirmed "
                    f"updates, {self._in_flight} requests in flight"
                )
            await asyncio.sleep(min(quiet_s / 2, 0.05))

    # ----- views

    def calls(self, method: str) -> list[ApiCall]:
        return [call for call in self.sent if call.method.lower() == method.lower()]

    def chat_messages(self, chat_id: int, thread_id: int | None = None) -> list[BotMessage]:
        stored = sorted(
            (
                m
                for m in self._messages.values()
                if m.chat_id == chat_id
                and m.from_bot
                and not m.deleted
                and (thread_id is None or m.thread_id == thread_id)
            ),
            key=lambda m: m.message_id,
        )
        return [
            BotMessage(
                chat_id=m.chat_id,
                message_id=m.message_id,
                text=m.text,
                entities=m.entities,
                thread_id=m.thread_id,
                reply_to_message_id=(m.payload.get("reply_to_message") or {}).get("message_id"),
                reply_markup=m.payload.get("reply_markup"),
                edit_count=m.edit_count,
                kind=m.kind,
            )
            for m in stored
        ]

    def chat_texts(self, chat_id: int, thread_id: int | None = None) -> list[str | None]:
        return [m.text for m in self.chat_messages(chat_id, thread_id)]

    def message(self, chat_id: int, message_id: int) -> dict[str, Any] | None:
        stored = self._messages.get((chat_id, message_id))
        return None if stored is None or stored.deleted else stored.payload

    def commands(self, scope: dict | None = None, language_code: str = "") -> list[dict[str, str]]:
        return list(self._commands.get((self._scope_key(scope), language_code), []))

    @property
    def is_polling(self) -> bool:
        """True while a getUpdates long poll is waiting."""
        return self._poll is not None

    @property
    def pending_update_ids(self) -> list[int]:
        return [u["update_id"] for u in self._updates]

    # ----- pushing updates

    def push_text(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        chat_type: str = "private",
        thread_id: int | None = None,
        reply_to_message_id: int | None = None,
        username: str | None = None,
        first_name: str | None = None,
        mention_bot: bool = False,
        chat_title: str | None = None,
    ) -> int:
        if mention_bot:
            text = f"@{self.bot_user} {text}"
        chat = self._ensure_chat(chat_id, chat_type, user_id, username, first_name, chat_title)
        user = self._ensure_user(user_id, username, first_name)
        message = self._new_message(chat, user, thread_id, reply_to_message_id)
        message["text"] = text
        entities = detect_entities(text)
        if entities:
            message["entities"] = entities
        self._store(chat, message, from_bot=False, thread_id=thread_id, kind="text")
        return self._enqueue("message", message)

    def push_edit(self, chat_id: int, message_id: int, text: str) -> int:
        stored = self._messages.get((chat_id, message_id))
        if stored is None or stored.from_bot:
            raise ValueError(f"no user message {message_id} in chat {chat_id} to edit")
        payload = dict(stored.payload)
        payload["text"] = text
        payload["edit_date"] = int(time.time())
        entities = detect_entities(text)
        payload.pop("entities", None)
        if entities:
            payload["entities"] = entities
        stored.payload = payload
        stored.edit_count += 1
        return self._enqueue("edited_message", payload)

    def push_channel_post(self, chat_id: int, text: str, *, title: str | None = None) -> int:
        if chat_id >= 0:
            raise ValueError("channel ids are negative")
        chat = self._chats.get(chat_id) or self._add_chat(_Chat(chat_id, "channel", title=title))
        message = {
            "message_id": self._next_id(chat),
            "date": int(time.time()),
            "chat": chat.to_api(),
            "sender_chat": chat.to_api(),
            "text": text,
        }
        self._store(chat, message, from_bot=False, thread_id=None, kind="text")
        return self._enqueue("channel_post", message)

    def push_sticker(
        self, chat_id: int, user_id: int, emoji: str = "👍", *, chat_type: str = "private"
    ) -> int:
        chat = self._ensure_chat(chat_id, chat_type, user_id, None, None, None)
        user = self._ensure_user(user_id, None, None)
        file = self._add_file(b"RIFF\x00\x00\x00\x00WEBPVP8 ", "stickers", "webp")
        message = self._new_message(chat, user, None, None)
        message["sticker"] = {
            "file_id": file.file_id,
            "file_unique_id": file.file_unique_id,
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": emoji,
            "set_name": "PinguTestStickers",
            "file_size": len(file.data),
        }
        self._store(chat, message, from_bot=False, thread_id=None, kind="sticker")
        return self._enqueue("message", message)

    def push_photo(
        self,
        chat_id: int,
        user_id: int,
        data: bytes = b"\xff\xd8\xff\xe0fake-jpeg\xff\xd9",
        *,
        caption: str | None = None,
        chat_type: str = "private",
    ) -> int:
        chat = self._ensure_chat(chat_id, chat_type, user_id, None, None, None)
        user = self._ensure_user(user_id, None, None)
        thumb = self._add_file(data[: max(1, len(data) // 4)], "photos", "jpg")
        full = self._add_file(data, "photos", "jpg")
        message = self._new_message(chat, user, None, None)
        message["photo"] = [
            {
                "file_id": f.file_id,
                "file_unique_id": f.file_unique_id,
                "file_size": len(f.data),
                "width": w,
                "height": h,
            }
            for f, w, h in ((thumb, 90, 67), (full, 1280, 960))
        ]
        if caption is not None:
            message["caption"] = caption
        self._store(chat, message, from_bot=False, thread_id=None, kind="photo")
        return self._enqueue("message", message)

    def push_document(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        *,
        file_name: str = "file.txt",
        mime_type: str = "text/plain",
        caption: str | None = None,
        chat_type: str = "private",
    ) -> int:
        chat = self._ensure_chat(chat_id, chat_type, user_id, None, None, None)
        user = self._ensure_user(user_id, None, None)
        file = self._add_file(data, "documents", file_name.rpartition(".")[2] or "bin")
        message = self._new_message(chat, user, None, None)
        message["document"] = {
            "file_id": file.file_id,
            "file_unique_id": file.file_unique_id,
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": len(data),
        }
        if caption is not None:
            message["caption"] = caption
        self._store(chat, message, from_bot=False, thread_id=None, kind="document")
        return self._enqueue("message", message)

    def push_new_members(
        self, chat_id: int, user_ids: Iterable[int], *, chat_type: str = "group"
    ) -> int:
        ids = list(user_ids)
        if not ids:
            raise ValueError("need at least one user id")
        chat = self._ensure_chat(chat_id, chat_type, ids[0], None, None, None)
        members = [self._ensure_user(uid, None, None) for uid in ids]
        message = self._new_message(chat, members[0], None, None)
        message["new_chat_members"] = members
        self._store(chat, message, from_bot=False, thread_id=None, kind="service")
        return self._enqueue("message", message)

    def push_callback_query(self, chat_id: int, user_id: int, message_id: int, data: str) -> int:
        stored = self._messages.get((chat_id, message_id))
        if stored is None or not stored.from_bot:
            raise ValueError(f"no bot message {message_id} in chat {chat_id}")
        user = self._ensure_user(user_id, None, None)
        query_id = str(secrets.randbelow(10**18))
        self._callbacks[query_id] = False
        query = {
            "id": query_id,
            "from": user,
            "message": stored.payload,
            "chat_instance": str(abs(chat_id) * 7919),
            "data": data,
        }
        return self._enqueue("callback_query", query)

    def push_raw(self, update: dict[str, Any]) -> int:
        update = dict(update)
        if "update_id" not in update:
            update["update_id"] = next(self._update_ids)
        self._updates.append(update)
        self._notify()
        return update["update_id"]

    # ----- state helpers

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _enqueue(self, kind: str, payload: dict[str, Any]) -> int:
        update_id = next(self._update_ids)
        self._updates.append({"update_id": update_id, kind: payload})
        self._notify()
        return update_id

    def _add_chat(self, chat: _Chat) -> _Chat:
        self._chats[chat.id] = chat
        return chat

    def _ensure_user(
        self, user_id: int, username: str | None, first_name: str | None
    ) -> dict[str, Any]:
        if user_id <= 0:
            raise ValueError("user ids are positive")
        user = self._users.get(user_id)
        if user is None:
            user = {
                "id": user_id,
                "is_bot": False,
                "first_name": first_name or f"User{user_id}",
                "language_code": "en",
            }
            self._users[user_id] = user
        if username:
            user["username"] = username
        if first_name:
            user["first_name"] = first_name
        return dict(user)

    def _ensure_chat(
        self,
        chat_id: int,
        chat_type: str,
        user_id: int,
        username: str | None,
        first_name: str | None,
        title: str | None,
    ) -> _Chat:
        if chat_type not in ("private", "group", "supergroup"):
            raise ValueError(f"unknown chat type {chat_type!r}")
        if chat_type == "private" and chat_id != user_id:
            raise ValueError("a private chat's id is the user's id")
        if chat_type != "private" and chat_id >= 0:
            raise ValueError("group and supergroup ids are negative")
        chat = self._chats.get(chat_id)
        if chat is None:
            chat = self._add_chat(_Chat(chat_id, chat_type, title=title))
        elif chat.type != chat_type:
            raise ValueError(f"chat {chat_id} is a {chat.type}, not a {chat_type}")
        if chat_type == "private":
            user = self._ensure_user(user_id, username, first_name)
            chat.first_name = user["first_name"]
            chat.username = user.get("username")
        elif title:
            chat.title = title
        return chat

    def _next_id(self, chat: _Chat) -> int:
        message_id = chat.next_message_id
        chat.next_message_id += 1
        return message_id

    def _ensure_topic(self, chat: _Chat, thread_id: int) -> dict[str, Any]:
        if chat.type != "supergroup":
            raise ValueError("forum topics exist only in supergroups")
        chat.is_forum = True
        key = (chat.id, thread_id)
        if thread_id not in chat.topics:
            if key in self._messages:
                raise ValueError(f"message {thread_id} exists and is not a topic")
            chat.topics[thread_id] = f"Topic {thread_id}"
            chat.next_message_id = max(chat.next_message_id, thread_id + 1)
            created = {
                "message_id": thread_id,
                "date": int(time.time()),
                "chat": chat.to_api(),
                "message_thread_id": thread_id,
                "forum_topic_created": {"name": chat.topics[thread_id], "icon_color": 7322096},
                "is_topic_message": True,
            }
            self._messages[key] = _Stored(chat.id, thread_id, False, created, thread_id, "service")
        return self._messages[key].payload

    def _new_message(
        self,
        chat: _Chat,
        sender: dict[str, Any],
        thread_id: int | None,
        reply_to_message_id: int | None,
    ) -> dict[str, Any]:
        topic_message = None
        if thread_id is not None:
            topic_message = self._ensure_topic(chat, thread_id)
        message: dict[str, Any] = {
            "message_id": self._next_id(chat),
            "from": sender,
            "date": int(time.time()),
            "chat": chat.to_api(),
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to_message_id is not None:
            target = self._messages.get((chat.id, reply_to_message_id))
            if target is None:
                raise ValueError(f"no message {reply_to_message_id} in chat {chat.id}")
            message["reply_to_message"] = self._quoted(target.payload)
        elif topic_message is not None:
            message["reply_to_message"] = self._quoted(topic_message)
        return message

    @staticmethod
    def _quoted(payload: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in payload.items() if k != "reply_to_message"}

    def _store(
        self,
        chat: _Chat,
        message: dict[str, Any],
        *,
        from_bot: bool,
        thread_id: int | None,
        kind: str,
    ) -> _Stored:
        stored = _Stored(chat.id, message["message_id"], from_bot, message, thread_id, kind)
        self._messages[(chat.id, message["message_id"])] = stored
        return stored

    def _add_file(self, data: bytes, folder: str, extension: str) -> _File:
        number = next(self._file_counter)
        file = _File(
            file_id=f"AgAC{secrets.token_hex(12)}{number}",
            file_unique_id=f"AQAD{number:06d}",
            data=data,
            file_path=f"{folder}/file_{number}.{extension}",
        )
        self._files[file.file_id] = file
        return file

    @staticmethod
    def _scope_key(scope: Any) -> str:
        """Validates a BotCommandScope as the Bot API does and gives a key for it."""
        if not scope:
            return json.dumps({"type": "default"})
        if not isinstance(scope, dict):
            raise _bad("can't parse BotCommandScope: Object expected")
        needs = {
            "default": (),
            "all_private_chats": (),
            "all_group_chats": (),
            "all_chat_administrators": (),
            "chat": ("chat_id",),
            "chat_administrators": ("chat_id",),
            "chat_member": ("chat_id", "user_id"),
        }
        kind = scope.get("type")
        if kind not in needs:
            raise _bad("can't parse BotCommandScope: Unsupported type specified")
        for name in needs[kind]:
            if name not in scope:
                raise _bad(f"can't parse BotCommandScope: Can't find field \"{name}\"")
        return json.dumps({k: scope[k] for k in ("type", *needs[kind])}, sort_keys=True)

    @staticmethod
    def _language(params: dict[str, Any]) -> str:
        code = str(params.get("language_code", "") or "")
        if code and not re.fullmatch(r"[a-z]{2}", code):
            raise _bad("LANG_CODE_INVALID")
        return code

    # ----- HTTP

    async def _read_params(self, request: web.Request) -> dict[str, Any]:
        raw: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                try:
                    body = await request.json()
                except ValueError:
                    raise _bad("can't parse JSON") from None
                if isinstance(body, dict):
                    raw.update(body)
            elif request.content_type in (
                "application/x-www-form-urlencoded",
                "multipart/form-data",
            ):
                form = await request.post()
                for key, value in form.items():
                    if isinstance(value, web.FileField):
                        raw[key] = {"filename": value.filename, "data": value.file.read()}
                    else:
                        raw[key] = value
        return _decode_params(raw)

    def _check_token(self, token: str) -> None:
        if token == self.token:
            return
        if _TOKEN_SHAPE.fullmatch(token):
            raise ApiError(401, "Unauthorized")
        raise ApiError(404, "Not Found")

    async def _handle_method(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        self._in_flight += 1
        is_poll = method.lower() == "getupdates"
        params: dict[str, Any] = {}
        try:
            try:
                self._check_token(request.match_info["token"])
                handler = self._handlers().get(method.lower())
                if handler is None:
                    raise ApiError(404, "Not Found")
                params = await self._read_params(request)
                self._raise_injected(method.lower())
                if is_poll:
                    # A waiting long poll is not "activity" for wait_until_idle.
                    self._in_flight -= 1
                    try:
                        result = await handler(params)
                    finally:
                        self._in_flight += 1
                else:
                    result = await handler(params)
                    stalls = self._stalls.get(method.lower())
                    if stalls:
                        self._notify()  # the effect is visible before the response
                        await asyncio.sleep(stalls.pop(0))
                status, body = 200, {"ok": True, "result": result}
            except ApiError as exc:
                status = exc.status
                body = {"ok": False, "error_code": exc.status, "description": exc.description}
                if exc.parameters:
                    body["parameters"] = exc.parameters
            except asyncio.CancelledError:
                # The client hung up (e.g. PTB stopping mid long poll): logged as 499.
                self.sent.append(ApiCall(method, params, 499, {"ok": False, "cancelled": True}))
                raise
            self.sent.append(ApiCall(method, params, status, body))
            return web.json_response(body, status=status)
        finally:
            self._in_flight -= 1
            if not is_poll:
                self._last_activity = time.monotonic()
            self._notify()

    async def _handle_file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        path = request.match_info["path"]
        for file in self._files.values():
            if file.file_path == path:
                return web.Response(body=file.data, content_type="application/octet-stream")
        return web.json_response(
            {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
        )

    def _raise_injected(self, method: str) -> None:
        queue = self._injected.get(method)
        if not queue:
            return
        injected = queue[0]
        injected.remaining -= 1
        if injected.remaining <= 0:
            queue.pop(0)
        raise ApiError(injected.status, injected.description, injected.parameters)

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "getme": self._get_me,
            "getupdates": self._get_updates,
            "sendmessage": self._send_message,
            "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message,
            "sendchataction": self._send_chat_action,
            "setmycommands": self._set_my_commands,
            "getmycommands": self._get_my_commands,
            "deletemycommands": self._delete_my_commands,
            "deletewebhook": self._delete_webhook,
            "setwebhook": self._set_webhook,
            "getwebhookinfo": self._get_webhook_info,
            "answercallbackquery": self._answer_callback_query,
            "getfile": self._get_file,
            "senddocument": self._send_document,
        }

    # ----- parameter helpers

    def _chat(self, params: dict[str, Any]) -> _Chat:
        raw = params.get("chat_id")
        if raw is None or raw == "":
            raise _bad("chat_id is empty")
        if isinstance(raw, str) and raw.startswith("@"):
            chat = next((c for c in self._chats.values() if c.username == raw[1:]), None)
        else:
            try:
                chat = self._chats.get(_as_int(raw, "chat_id"))
            except ApiError:
                chat = None
        if chat is None:
            raise _bad("chat not found")
        if chat.id in self._blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        return chat

    def _thread(self, chat: _Chat, params: dict[str, Any]) -> int | None:
        raw = params.get("message_thread_id")
        if raw is None or raw == "":
            return None
        thread_id = _as_int(raw, "message_thread_id")
        if chat.is_forum:
            if thread_id == 1:
                return None  # the General topic
            if thread_id not in chat.topics:
                raise _bad("message thread not found")
            return thread_id
        if chat.type in ("group", "supergroup") and (chat.id, thread_id) in self._messages:
            return thread_id
        raise _bad("message thread not found")

    def _reply_target(self, chat: _Chat, params: dict[str, Any]) -> tuple[_Stored | None, bool]:
        reply = params.get("reply_parameters")
        allow_missing = bool(params.get("allow_sending_without_reply", False))
        message_id: Any = params.get("reply_to_message_id")
        target_chat = chat
        if isinstance(reply, dict):
            message_id = reply.get("message_id")
            allow_missing = bool(reply.get("allow_sending_without_reply", allow_missing))
            if reply.get("chat_id") is not None:
                target_chat = self._chat({"chat_id": reply["chat_id"]})
        elif reply is not None:
            raise _bad("can't parse reply parameters JSON object")
        if message_id is None or message_id == "":
            return None, False
        target = self._messages.get((target_chat.id, _as_int(message_id, "message_id")))
        if target is None or target.deleted:
            if allow_missing:
                return None, True
            raise _bad("message to be replied not found")
        return target, False

    @staticmethod
    def _validate_markup(markup: Any) -> dict | None:
        if markup is None:
            return None
        if not isinstance(markup, dict):
            raise _bad("can't parse reply keyboard markup JSON object")
        keyboard = markup.get("inline_keyboard")
        if keyboard is not None:
            if not isinstance(keyboard, list) or not all(isinstance(r, list) for r in keyboard):
                raise _bad(
                    'field "inline_keyboard" of the InlineKeyboardMarkup must be an Array of Arrays'
                )
            for row in keyboard:
                for button in row:
                    if not isinstance(button, dict) or not button.get("text"):
                        raise _bad("can't parse inline keyboard button: Text must be non-empty")
                    data = button.get("callback_data")
                    if data is not None and not 1 <= len(str(data).encode()) <= 64:
                        raise _bad("BUTTON_DATA_INVALID")
                    if not any(
                        k in button
                        for k in (
                            "callback_data",
                            "url",
                            "switch_inline_query",
                            "login_url",
                            "web_app",
                            "copy_text",
                            "pay",
                            "callback_game",
                            "switch_inline_query_current_chat",
                            "switch_inline_query_chosen_chat",
                        )
                    ):
                        raise _bad(
                            "can't parse inline keyboard button: Text buttons are unallowed in "
                            "the inline keyboard"
                        )
        return markup

    def _bot_message(
        self,
        chat: _Chat,
        thread_id: int | None,
        reply: _Stored | None,
        markup: dict | None,
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": self._next_id(chat),
            "from": {k: self.bot_user_dict[k] for k in ("id", "is_bot", "first_name", "username")},
            "date": int(time.time()),
            "chat": chat.to_api(),
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            if chat.is_forum:
                message["is_topic_message"] = True
        if reply is not None:
            message["reply_to_message"] = self._quoted(reply.payload)
        elif thread_id is not None and chat.is_forum:
            message["reply_to_message"] = self._quoted(self._messages[(chat.id, thread_id)].payload)
        if markup is not None:
            message["reply_markup"] = markup
        return message

    # ----- methods

    async def _get_me(self, params: dict[str, Any]) -> dict[str, Any]:
        return dict(self.bot_user_dict)

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook_url:
            raise ApiError(409, CONFLICT_WEBHOOK)
        offset = _as_int(params.get("offset", 0) or 0, "offset")
        limit = _as_int(params.get("limit", 100) or 100, "limit")
        limit = min(max(limit, 1), 100)
        timeout = max(_as_int(params.get("timeout", 0) or 0, "timeout"), 0)
        allowed = params.get("allowed_updates")
        if allowed is not None:
            if not isinstance(allowed, list):
                raise _bad("can't parse allowed_updates JSON object")
            self._allowed_updates = frozenset(allowed) if allowed else None
        if offset > 0:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        elif offset < 0:
            self._updates = self._updates[offset:]
        self._drop_disallowed()
        if self._updates or timeout == 0 or self._closing:
            # Answered at once; a long poll that is waiting meanwhile is left alone.
            return [dict(u) for u in self._updates[:limit]]
        # As telegram-bot-api's do_get_updates/abort_long_poll: a request that is going to wait
        # terminates the one already waiting (the newest poller wins).
        if self._poll is not None:
            self._poll.terminated = True
        poll = _Poll()
        self._poll = poll
        self._notify()  # wakes the old poller, and wait_for(lambda: fake.is_polling)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                event = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), deadline - loop.time())
                if poll.terminated:
                    await self._conflict_delay()
                    raise ApiError(409, CONFLICT_OTHER_POLL)
                self._drop_disallowed()
                if self._updates or self._closing or loop.time() >= deadline:
                    return [dict(u) for u in self._updates[:limit]]
        finally:
            if self._poll is poll:
                self._poll = None

    async def _conflict_delay(self) -> None:
        """The real server answers one 409 at once per 3 s; the others wait 3 s first."""
        now = asyncio.get_running_loop().time()
        if now >= self._next_conflict_at:
            self._next_conflict_at = now + 3.0
        else:
            await asyncio.sleep(3.0)

    def _drop_disallowed(self) -> None:
        def allowed(update: dict[str, Any]) -> bool:
            kinds = [k for k in update if k != "update_id"]
            if not kinds:
                return True  # malformed: delivered as it is
            kind = kinds[0]
            if self._allowed_updates is None:
                return kind not in DEFAULT_EXCLUDED_UPDATES
            return kind in self._allowed_updates

        self._updates = [u for u in self._updates if allowed(u)]

    async def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("chat_id") in (None, ""):
            raise _bad("chat_id is empty")
        text = params.get("text")
        if not isinstance(text, str) or not text:
            raise _bad("message text is empty")
        plain, entities = format_text(text, params.get("parse_mode"), params.get("entities"))
        chat = self._chat(params)
        if not plain:
            raise _bad("message text is empty")
        if utf16_len(plain) > MAX_MESSAGE_LENGTH:
            raise _bad("message is too long")
        thread_id = self._thread(chat, params)
        reply, _ = self._reply_target(chat, params)
        if thread_id is None and reply is not None and chat.is_forum:
            thread_id = reply.thread_id  # a reply lands in the replied message's topic
        markup = self._validate_markup(params.get("reply_markup"))
        message = self._bot_message(chat, thread_id, reply, markup)
        message["text"] = plain
        if entities:
            message["entities"] = entities
        self._store(chat, message, from_bot=True, thread_id=thread_id, kind="text")
        return message

    async def _send_document(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._chat(params)
        document = params.get("document")
        if isinstance(document, dict) and "data" in document:
            data, file_name = document["data"], document.get("filename") or "document"
        elif isinstance(document, str) and document in self._files:
            data, file_name = self._files[document].data, "document"
        else:
            raise _bad("wrong file identifier/HTTP URL specified")
        caption, caption_entities = "", []
        if params.get("caption"):
            caption, caption_entities = format_text(
                params["caption"], params.get("parse_mode"), params.get("caption_entities")
            )
            if utf16_len(caption) > 1024:
                raise _bad("message caption is too long")
        thread_id = self._thread(chat, params)
        reply, _ = self._reply_target(chat, params)
        markup = self._validate_markup(params.get("reply_markup"))
        file = self._add_file(data, "documents", file_name.rpartition(".")[2] or "bin")
        message = self._bot_message(chat, thread_id, reply, markup)
        message["document"] = {
            "file_id": file.file_id,
            "file_unique_id": file.file_unique_id,
            "file_name": file_name,
            "file_size": len(data),
        }
        if caption:
            message["caption"] = caption
            if caption_entities:
                message["caption_entities"] = caption_entities
        self._store(chat, message, from_bot=True, thread_id=thread_id, kind="document")
        return message

    async def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("inline_message_id"):
            raise _bad("MESSAGE_ID_INVALID")
        if params.get("chat_id") in (None, ""):
            raise _bad("chat_id is empty")
        if params.get("message_id") in (None, ""):
            raise _bad("message identifier is not specified")
        text = params.get("text")
        if not isinstance(text, str) or not text:
            raise _bad("message text is empty")
        plain, entities = format_text(text, params.get("parse_mode"), params.get("entities"))
        chat = self._chat(params)
        message_id = _as_int(params["message_id"], "message_id")
        if not plain:
            raise _bad("message text is empty")
        stored = self._messages.get((chat.id, message_id))
        if stored is None or stored.deleted:
            raise _bad("message to edit not found")
        if not stored.from_bot or "text" not in stored.payload:
            raise _bad("message can't be edited")
        if utf16_len(plain) > MAX_MESSAGE_LENGTH:
            raise _bad("MESSAGE_TOO_LONG")
        markup = self._validate_markup(params.get("reply_markup"))
        old = stored.payload
        if (
            old.get("text") == plain
            and old.get("entities", []) == entities
            and old.get("reply_markup") == markup
        ):
            raise ApiError(400, NOT_MODIFIED)
        payload = {k: v for k, v in old.items() if k not in ("entities", "reply_markup")}
        payload["text"] = plain
        payload["edit_date"] = int(time.time())
        if entities:
            payload["entities"] = entities
        if markup is not None:
            payload["reply_markup"] = markup
        self.edits.append(EditRecord(chat.id, message_id, old.get("text"), plain))
        stored.payload = payload
        stored.edit_count += 1
        return payload

    async def _delete_message(self, params: dict[str, Any]) -> bool:
        chat = self._chat(params)
        if params.get("message_id") in (None, ""):
            raise _bad("message identifier is not specified")
        stored = self._messages.get((chat.id, _as_int(params["message_id"], "message_id")))
        if stored is None or stored.deleted:
            raise _bad("message to delete not found")
        stored.deleted = True
        return True

    async def _send_chat_action(self, params: dict[str, Any]) -> bool:
        chat = self._chat(params)
        action = params.get("action")
        if action not in CHAT_ACTIONS:
            raise _bad("wrong parameter action in request")
        thread_id = self._thread(chat, params)
        self.chat_actions.append(ChatActionRecord(chat.id, action, thread_id))
        return True

    async def _set_my_commands(self, params: dict[str, Any]) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise _bad("can't parse commands JSON object")
        if len(commands) > 100:
            raise _bad("BOT_COMMANDS_TOO_MUCH")
        cleaned = []
        for command in commands:
            if not isinstance(command, dict):
                raise _bad("can't parse BotCommand: Object expected")
            name = str(command.get("command", ""))
            description = str(command.get("description", "")).strip()
            if not name:
                raise _bad("command must be non-empty")
            if not _COMMAND_NAME.fullmatch(name):
                raise _bad("BOT_COMMAND_INVALID")
            if not description:
                raise _bad("command description must be non-empty")
            if len(description) > 256:
                raise _bad("BOT_COMMAND_DESCRIPTION_INVALID")
            cleaned.append({"command": name, "description": description})
        key = (self._scope_key(params.get("scope")), self._language(params))
        self._commands[key] = cleaned
        return True

    async def _get_my_commands(self, params: dict[str, Any]) -> list[dict[str, str]]:
        key = (self._scope_key(params.get("scope")), self._language(params))
        return list(self._commands.get(key, []))

    async def _delete_my_commands(self, params: dict[str, Any]) -> bool:
        key = (self._scope_key(params.get("scope")), self._language(params))
        self._commands.pop(key, None)
        return True

    async def _delete_webhook(self, params: dict[str, Any]) -> bool:
        self.webhook_url = ""
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _set_webhook(self, params: dict[str, Any]) -> bool:
        url = str(params.get("url", ""))
        if url and not url.startswith("https://"):
            raise _bad("bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook_url = url
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _get_webhook_info(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }

    async def _answer_callback_query(self, params: dict[str, Any]) -> bool:
        query_id = str(params.get("callback_query_id", ""))
        if self._callbacks.get(query_id, True):
            raise _bad(QUERY_TOO_OLD[len("Bad Request: ") :])
        text = params.get("text")
        if text is not None and len(str(text)) > 200:
            raise _bad("MESSAGE_TOO_LONG")
        self._callbacks[query_id] = True
        self.callback_answers.append(
            CallbackAnswer(query_id, text, bool(params.get("show_alert", False)))
        )
        return True

    async def _get_file(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = params.get("file_id")
        if not file_id:
            raise _bad("file_id not specified")
        file = self._files.get(str(file_id))
        if file is None:
            raise _bad("invalid file_id")
        if len(file.data) > MAX_DOWNLOAD_SIZE:
            raise _bad("file is too big")
        return {
            "file_id": file.file_id,
            "file_unique_id": file.file_unique_id,
            "file_size": len(file.data),
            "file_path": file.file_path,
        }


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    """A started FakeTelegram on 127.0.0.1; point the channel's `api_base_url` at `fake.url`."""
    fake = FakeTelegram()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()
