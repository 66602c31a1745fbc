"""The fake Telegram Bot API, driven by the real python-telegram-bot `Bot`.

Every error test asserts the exception class and message PTB derives from the fake's answer, which
is what it would derive from the real service's answer.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import io
import warnings
from collections.abc import AsyncIterator

import aiohttp
import pytest
from telegram import (
    Bot,
    BotCommand,
    BotCommandScopeChat,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    MessageEntity,
    ReplyParameters,
    Update,
)
from telegram.error import BadRequest, Conflict, Forbidden, InvalidToken, NetworkError, RetryAfter
from telegram.ext import Application, ContextTypes, MessageHandler, filters

from tests.fakes.telegram_api import (
    EntityParseError,
    FakeTelegram,
    parse_html,
    parse_markdown_v2,
    utf16_len,
)

pytestmark = pytest.mark.timeout(30)

USER = 1001


def make_bot(fake: FakeTelegram, token: str | None = None) -> Bot:
    # Exactly how the channel maps its `api_base_url` setting onto PTB.
    api_base_url = fake.url
    return Bot(
        token or fake.token,
        base_url=f"{api_base_url}/bot",
        base_file_url=f"{api_base_url}/file/bot",
    )


@pytest.fixture
async def bot(fake_telegram: FakeTelegram) -> AsyncIterator[Bot]:
    async with make_bot(fake_telegram) as bot:
        yield bot


def retry_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


# ----- identity and tokens


async def test_get_me_returns_the_bot(fake_telegram: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert me.is_bot
    assert me.username == fake_telegram.bot_user
    assert me.id == fake_telegram.bot_id
    assert bot.username == fake_telegram.bot_user


async def test_wrong_token_is_unauthorized(fake_telegram: FakeTelegram) -> None:
    wrong = f"{fake_telegram.bot_id}:AA" + "x" * 33
    with pytest.raises(InvalidToken, match=r"^Unauthorized$"):
        await make_bot(fake_telegram, wrong).get_me()
    with pytest.raises(InvalidToken, match=r"^Not Found$"):
        await make_bot(fake_telegram, "not-a-token").get_me()
    # A wrong token is rejected before anything happens.
    assert [c.status for c in fake_telegram.calls("getMe")] == [401, 404]


async def test_unknown_method_is_not_found(fake_telegram: FakeTelegram) -> None:
    async with aiohttp.ClientSession() as http:
        url = f"{fake_telegram.url}/bot{fake_telegram.token}/sendTeleportation"
        async with http.post(url, data={"chat_id": "1"}) as response:
            assert response.status == 404
            assert await response.json() == {
                "ok": False,
                "error_code": 404,
                "description": "Not Found",
            }


async def test_json_and_query_string_requests_are_accepted(fake_telegram: FakeTelegram) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    base = f"{fake_telegram.url}/bot{fake_telegram.token}"
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base}/sendMessage",
            json={"chat_id": USER, "text": "<b>json</b>", "parse_mode": "HTML"},
        ) as response:
            body = await response.json()
            assert body["ok"] is True
            assert body["result"]["text"] == "json"
            assert body["result"]["entities"] == [{"offset": 0, "length": 4, "type": "bold"}]
        async with http.get(f"{base}/sendMessage", params={"chat_id": USER, "text": "q"}) as r:
            assert (await r.json())["result"]["text"] == "q"
    assert fake_telegram.chat_texts(USER) == ["json", "q"]


# ----- getUpdates


async def test_get_updates_delivers_real_updates_and_offset_confirms(
    fake_telegram: FakeTelegram, bot: Bot
) -> None:
    first = fake_telegram.push_text(USER, USER, "/start now", username="alice")
    second = fake_telegram.push_text(USER, USER, "second")

    updates = await bot.get_updates(timeout=0)
    assert [u.update_id for u in updates] == [first, second]
    message = updates[0].message
    assert message is not None
    assert message.text == "/start now"
    assert message.chat.type == "private" and message.chat.id == USER
    assert message.from_user is not None and message.from_user.username == "alice"
    assert message.entities == (MessageEntity(MessageEntity.BOT_COMMAND, 0, 6),)
    assert updates[1].message is not None and updates[1].message.message_id == 2

    # Without an offset nothing is confirmed: the same updates come again.
    assert [u.update_id for u in await bot.get_updates(timeout=0)] == [first, second]
    # offset = last + 1 forgets them for good.
    assert await bot.get_updates(offset=second + 1, timeout=0) == ()
    assert fake_telegram.pending_update_ids == []
    assert await bot.get_updates(timeout=0) == ()


async def test_offset_drops_only_older_updates_and_limit_caps(
    fake_telegram: FakeTelegram, bot: Bot
) -> None:
    ids = [fake_telegram.push_text(USER, USER, f"m{i}") for i in range(4)]
    page = await bot.get_updates(offset=ids[1], limit=2, timeout=0)
    assert [u.update_id for u in page] == ids[1:3]
    assert fake_telegram.pending_update_ids == ids[1:]
    last = await bot.get_updates(offset=-1, timeout=0)
    assert [u.update_id for u in last] == [ids[3]]


async def test_long_poll_waits_and_wakes_on_push(fake_telegram: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=20))
    await fake_telegram.wait_for(lambda: fake_telegram.is_polling)
    assert not poll.done()
    update_id = fake_telegram.push_text(USER, USER, "wake up")
    updates = await poll
    assert [u.update_id for u in updates] == [update_id]
    assert updates[0].message is not None and updates[0].message.text == "wake up"


async def test_long_poll_times_out_empty(bot: Bot) -> None:
    assert await bot.get_updates(timeout=1) == ()


async def test_second_poller_terminates_the_first_with_conflict(
    fake_telegram: FakeTelegram,
) -> None:
    async with make_bot(fake_telegram) as first, make_bot(fake_telegram) as second:
        first_poll = asyncio.create_task(first.get_updates(timeout=20))
        await fake_telegram.wait_for(lambda: fake_telegram.is_polling)
        # A request that answers at once (timeout 0) does not disturb the waiting one.
        assert await second.get_updates(timeout=0) == ()
        assert not first_poll.done() and fake_telegram.is_polling
        second_poll = asyncio.create_task(second.get_updates(timeout=20))
        with pytest.raises(Conflict) as excinfo:
            await first_poll
        assert excinfo.value.message == (
            "Conflict: terminated by other getUpdates request; make sure that only one bot "
            "instance is running"
        )
        update_id = fake_telegram.push_text(USER, USER, "for the survivor")
        assert [u.update_id for u in await second_poll] == [update_id]
    assert [c.status for c in fake_telegram.calls("getUpdates")] == [200, 409, 200]


async def test_allowed_updates_drops_other_kinds(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "hello")
    sent = await bot.send_message(
        USER,
        "pick",
        reply_markup=InlineKeyboardMarkup([[InlineKeyboardButton("a", callback_data="a")]]),
    )
    fake_telegram.push_callback_query(USER, USER, sent.message_id, "a")
    message_id = fake_telegram.push_text(USER, USER, "after")
    updates = await bot.get_updates(timeout=0, allowed_updates=["message"])
    assert [u.message.text for u in updates if u.message] == ["hello", "after"]
    assert all(u.callback_query is None for u in updates)
    # The setting sticks for later calls without allowed_updates.
    fake_telegram.push_callback_query(USER, USER, sent.message_id, "a")
    assert await bot.get_updates(offset=message_id + 1, timeout=0) == ()


async def test_webhook_blocks_polling_until_deleted(fake_telegram: FakeTelegram, bot: Bot) -> None:
    await bot.set_webhook("https://example.invalid/hook")
    with pytest.raises(Conflict, match="webhook is active"):
        await bot.get_updates(timeout=0)
    fake_telegram.push_text(USER, USER, "queued")
    assert await bot.delete_webhook(drop_pending_updates=True)
    assert await bot.get_updates(timeout=0) == ()


async def test_other_update_kinds_parse_in_ptb(fake_telegram: FakeTelegram, bot: Bot) -> None:
    text_id = fake_telegram.push_text(-100500, USER, "hi all", chat_type="supergroup")
    fake_telegram.push_edit(-100500, 1, "hi all, edited")
    fake_telegram.push_channel_post(-100777, "news")
    fake_telegram.push_sticker(USER, USER, "🐧")
    fake_telegram.push_new_members(-42, [USER, 1002])
    raw_id = fake_telegram.push_raw({"some_future_update": {"x": 1}})
    updates = await bot.get_updates(timeout=0)
    by_id = {u.update_id: u for u in updates}
    assert by_id[text_id].message is not None
    edited = updates[1].edited_message
    assert edited is not None and edited.text == "hi all, edited" and edited.edit_date
    post = updates[2].channel_post
    assert post is not None and post.chat.type == "channel" and post.from_user is None
    sticker = updates[3].message
    assert sticker is not None and sticker.sticker is not None and sticker.text is None
    assert sticker.sticker.emoji == "🐧"
    members = updates[4].message
    assert members is not None and [u.id for u in members.new_chat_members] == [USER, 1002]
    raw = by_id[raw_id]
    assert raw.message is None and raw.effective_message is None
    assert raw.api_kwargs == {"some_future_update": {"x": 1}}


# ----- sending and editing


async def test_send_edit_round_trip_and_visible_view(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "question")
    first = await bot.send_message(USER, "thinking…", reply_parameters=ReplyParameters(1))
    assert first.reply_to_message is not None and first.reply_to_message.text == "question"
    assert first.from_user is not None and first.from_user.id == fake_telegram.bot_id
    await bot.edit_message_text("partial", chat_id=USER, message_id=first.message_id)
    edited = await bot.edit_message_text(
        "<b>final</b> answer", chat_id=USER, message_id=first.message_id, parse_mode="HTML"
    )
    assert edited.text == "final answer" and edited.edit_date is not None
    second = await bot.send_message(USER, "second")
    assert second.message_id == first.message_id + 1

    visible = fake_telegram.chat_messages(USER)
    assert [(m.message_id, m.text) for m in visible] == [
        (first.message_id, "final answer"),
        (second.message_id, "second"),
    ]
    assert visible[0].edit_count == 2 and visible[0].reply_to_message_id == 1
    assert visible[0].entities == [{"offset": 0, "length": 5, "type": "bold"}]
    assert [(e.old_text, e.new_text) for e in fake_telegram.edits] == [
        ("thinking…", "partial"),
        ("partial", "final answer"),
    ]
    await bot.delete_message(USER, second.message_id)
    assert fake_telegram.chat_texts(USER) == ["final answer"]
    sends = fake_telegram.calls("sendMessage")
    assert sends[0].params["chat_id"] == USER and sends[0].params["text"] == "thinking…"


async def test_edit_errors(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    sent = await bot.send_message(USER, "same")
    with pytest.raises(BadRequest) as excinfo:
        await bot.edit_message_text("same", chat_id=USER, message_id=sent.message_id)
    assert excinfo.value.message == (
        "Message is not modified: specified new message content and reply markup are exactly "
        "the same as a current content and reply markup of the message"
    )
    # Same text with other formatting is a modification.
    await bot.edit_message_text(
        "<i>same</i>", chat_id=USER, message_id=sent.message_id, parse_mode="HTML"
    )
    with pytest.raises(BadRequest, match=r"^Message to edit not found$"):
        await bot.edit_message_text("x", chat_id=USER, message_id=999)
    with pytest.raises(BadRequest, match=r"^Message can't be edited$"):
        await bot.edit_message_text("x", chat_id=USER, message_id=1)  # the user's message
    with pytest.raises(BadRequest, match=r"^Message_too_long$"):
        await bot.edit_message_text("a" * 4097, chat_id=USER, message_id=sent.message_id)
    with pytest.raises(BadRequest, match=r"^Message text is empty$"):
        await bot.edit_message_text("  \n ", chat_id=USER, message_id=sent.message_id)
    assert fake_telegram.chat_texts(USER) == ["same"]


async def test_send_errors(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    with pytest.raises(BadRequest, match=r"^Message text is empty$"):
        await bot.send_message(USER, "")
    with pytest.raises(BadRequest, match=r"^Message text is empty$"):
        await bot.send_message(USER, "<b> </b>", parse_mode="HTML")
    with pytest.raises(BadRequest, match=r"^Chat not found$"):
        await bot.send_message(555, "hello")
    with pytest.raises(BadRequest, match=r"^Message to be replied not found$"):
        await bot.send_message(USER, "re", reply_parameters=ReplyParameters(404))
    ok = await bot.send_message(
        USER, "re", reply_parameters=ReplyParameters(404, allow_sending_without_reply=True)
    )
    assert ok.reply_to_message is None
    with pytest.raises(BadRequest, match=r"^Wrong parameter action in request$"):
        await bot.send_chat_action(USER, "dancing")
    assert await bot.send_chat_action(USER, "typing")
    assert [(a.chat_id, a.action) for a in fake_telegram.chat_actions] == [(USER, "typing")]
    with pytest.raises(BadRequest, match=r"^Button_data_invalid$"):
        await bot.send_message(
            USER,
            "k",
            reply_markup=InlineKeyboardMarkup(
                [[InlineKeyboardButton("b", callback_data="x" * 65)]]
            ),
        )
    assert fake_telegram.chat_texts(USER) == ["re"]


async def test_length_limit_counts_utf16_after_parsing(
    fake_telegram: FakeTelegram, bot: Bot
) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    await bot.send_message(USER, "a" * 4096)
    with pytest.raises(BadRequest, match=r"^Message is too long$"):
        await bot.send_message(USER, "a" * 4097)
    emoji = "🐧"
    assert utf16_len(emoji) == 2
    await bot.send_message(USER, emoji * 2048)  # 2,048 characters, 4,096 UTF-16 units
    with pytest.raises(BadRequest, match=r"^Message is too long$"):
        await bot.send_message(USER, emoji * 2048 + "a")  # 2,049 characters, 4,097 units
    # Markup does not count, decoded entities count once.
    await bot.send_message(USER, "<b>" + "&lt;" * 4096 + "</b>", parse_mode="HTML")
    # Surrounding whitespace is trimmed before measuring.
    await bot.send_message(USER, "\n" + "a" * 4096 + "  ")
    assert [len(t or "") for t in fake_telegram.chat_texts(USER)] == [4096, 2048, 4096, 4096]


async def test_flood_control_on_demand(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    fake_telegram.flood("sendMessage", retry_after=3, times=2)
    for _ in range(2):
        with pytest.raises(RetryAfter) as excinfo:
            await bot.send_message(USER, "hello")
        assert retry_seconds(excinfo.value) == 3
    assert (await bot.send_message(USER, "hello")).text == "hello"
    flooded = fake_telegram.calls("sendMessage")[0]
    assert flooded.status == 429
    assert flooded.response == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 3",
        "parameters": {"retry_after": 3},
    }
    assert fake_telegram.chat_texts(USER) == ["hello"]


# ----- HTML and Markdown


@pytest.mark.parametrize(
    ("html", "text", "entities"),
    [
        (
            "<b>bold <i>both</i></b> plain",
            "bold both plain",
            [
                {"offset": 0, "length": 9, "type": "bold"},
                {"offset": 5, "length": 4, "type": "italic"},
            ],
        ),
        (
            '<pre><code class="language-python">print("x")</code></pre>',
            'print("x")',
            [{"offset": 0, "length": 10, "type": "pre", "language": "python"}],
        ),
        (
            '<a href="https://example.com/a?b=1&amp;c=2">link</a>',
            "link",
            [
                {
                    "offset": 0,
                    "length": 4,
                    "type": "text_link",
                    "url": "https://example.com/a?b=1&c=2",
                }
            ],
        ),
        ("1 &lt; 2 &amp;&amp; 3 &gt; 2 &quot;q&quot; &#128039;", '1 < 2 && 3 > 2 "q" 🐧', []),
        ("fish & chips; a > b; &nbsp; &copy;", "fish & chips; a > b; &nbsp; &copy;", []),
        (
            '<tg-spoiler>s</tg-spoiler><span class="tg-spoiler">t</span>'
            "<u>u</u><s>v</s><code>w</code>",
            "stuvw",
            [
                {"offset": 0, "length": 1, "type": "spoiler"},
                {"offset": 1, "length": 1, "type": "spoiler"},
                {"offset": 2, "length": 1, "type": "underline"},
                {"offset": 3, "length": 1, "type": "strikethrough"},
                {"offset": 4, "length": 1, "type": "code"},
            ],
        ),
        (
            "<blockquote expandable>quote</blockquote>🐧<b>x</b>",
            "quote🐧x",
            [
                {"offset": 0, "length": 5, "type": "expandable_blockquote"},
                {"offset": 7, "length": 1, "type": "bold"},
            ],
        ),
        ("<B>upper</b>", "upper", [{"offset": 0, "length": 5, "type": "bold"}]),
    ],
)
async def test_html_accepted(
    fake_telegram: FakeTelegram, bot: Bot, html: str, text: str, entities: list[dict]
) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    message = await bot.send_message(USER, html, parse_mode="HTML")
    assert message.text == text
    assert fake_telegram.chat_messages(USER)[-1].entities == entities


@pytest.mark.parametrize(
    ("html", "ptb_message"),
    [
        ("line<br>break", 'Can\'t parse entities: unsupported start tag "br" at byte offset 4'),
        ("<p>para</p>", 'Can\'t parse entities: unsupported start tag "p" at byte offset 0'),
        ("1 < 2", 'Can\'t parse entities: unsupported start tag "" at byte offset 2'),
        ("<b>bold", "Can't parse entities: can't find end tag corresponding to start tag \"b\""),
        (
            "<b>x</i>",
            'Can\'t parse entities: unmatched end tag at byte offset 4, expected "</b>", '
            'found "</i>"',
        ),
        ("x</b>", "Can't parse entities: unexpected end tag at byte offset 1"),
        ("🐧<b>x</b", "Can't parse entities: unclosed end tag at byte offset 8"),
        ("a <b", "Can't parse entities: unclosed start tag at byte offset 2"),
        (
            '<span class="x">s</span>',
            'Can\'t parse entities: tag "span" must have class "tg-spoiler" at byte offset 0',
        ),
        (
            "<b =x>y</b>",
            'Can\'t parse entities: empty attribute name in the tag "b" at byte offset 0',
        ),
    ],
)
async def test_html_rejected(
    fake_telegram: FakeTelegram, bot: Bot, html: str, ptb_message: str
) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    with pytest.raises(BadRequest) as excinfo:
        await bot.send_message(USER, html, parse_mode="HTML")
    assert excinfo.value.message == ptb_message
    assert fake_telegram.chat_messages(USER) == []


def test_html_error_offsets_match_tdlib() -> None:
    # Cases from tdlib's own unit tests (test/message_entities.cpp).
    cases = {
        "🏟 🏟&lt;<abacaba": "Unclosed start tag at byte offset 13",
        "🏟 🏟&lt;<abac aba>": 'Unsupported start tag "abac" at byte offset 13',
        "🏟 🏟&lt;<i   =aba>": 'Empty attribute name in the tag "i" at byte offset 13',
        "🏟 🏟&lt;<i    aba>": 'Can\'t find end tag corresponding to start tag "i"',
        "🏟 🏟&lt;<i    aba  =  ": 'Unclosed start tag "i" at byte offset 13',
        "🏟 🏟&lt;<i    aba  =  190azAz-.,": "Unexpected end of name token at byte offset 27",
        '🏟 🏟&lt;<i    aba  =  "&lt;&gt;&quot;>': "Unclosed start tag at byte offset 13",
        "🏟 🏟&lt;</": "Unexpected end tag at byte offset 13",
        "🏟 🏟&lt;<b></b></": "Unexpected end tag at byte offset 20",
        "🏟 🏟&lt;<i>a</i   ": "Unclosed end tag at byte offset 17",
        "🏟 🏟&lt;<i>a</em   >": (
            'Unmatched end tag at byte offset 17, expected "</i>", found "</em>"'
        ),
        "&#57311;": "Text contains invalid Unicode characters after decoding HTML entities, "
        "check for unmatched surrogate code units",
    }
    for html, error in cases.items():
        with pytest.raises(EntityParseError) as excinfo:
            parse_html(html)
        assert str(excinfo.value) == error, html
    assert parse_html("&ge;&lt;&gt;&amp;&quot;&laquo;&#12345678;") == (
        '&ge;<>&"&laquo;&#12345678;',
        [],
    )
    links = {
        "<a href=telegram.org>\t</a>": "http://telegram.org/",
        "<a   href=  'telegram.org?&lt;'   > </a>": "http://telegram.org/?<",
        "<a>telegram.org</a>": "http://telegram.org/",
        "<a>https://telegram.org/asdsa?asdasdwe#12e3we</a>": (
            "https://telegram.org/asdsa?asdasdwe#12e3we"
        ),
    }
    for html, url in links.items():
        (entity,) = parse_html(html)[1]
        assert entity["type"] == "text_link" and entity["url"] == url, html
    assert parse_html("<a> </a>") == (" ", [])
    assert parse_html("<a>telegram.org </a>") == ("telegram.org ", [])
    assert parse_html('<pre><code class="language-fift">x</></>') == (
        "x",
        [{"offset": 0, "length": 1, "type": "pre", "language": "fift"}],
    )
    assert parse_html("<blockquote   expandable=false>a&lt;<pre  >b;</></>") == (
        "a<b;",
        [
            {"offset": 0, "length": 4, "type": "expandable_blockquote"},
            {"offset": 2, "length": 2, "type": "pre"},
        ],
    )
    assert parse_html("🏟 🏟&lt;<i>🏟 🏟&lt;</>") == (
        "🏟 🏟<🏟 🏟<",
        [{"offset": 6, "length": 6, "type": "italic"}],
    )


async def test_markdown_v2(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    with pytest.raises(BadRequest) as excinfo:
        await bot.send_message(USER, "Version 1.0", parse_mode="MarkdownV2")
    assert excinfo.value.message == (
        "Can't parse entities: character '.' is reserved and must be escaped with the "
        "preceding '\\'"
    )
    with pytest.raises(BadRequest, match="can't find end of bold entity at byte offset 4"):
        await bot.send_message(USER, "🐧*open", parse_mode="MarkdownV2")
    message = await bot.send_message(
        USER, "*bold* _it_ `a.b` [link](https://t.me/x) Version 1\\.0", parse_mode="MarkdownV2"
    )
    assert message.text == "bold it a.b link Version 1.0"
    assert [e.type for e in message.entities] == ["bold", "italic", "code", "text_link"]
    assert message.entities[3].url == "https://t.me/x"
    with pytest.raises(BadRequest, match="can't find end of the entity starting at byte offset 2"):
        await bot.send_message(USER, "a *b", parse_mode="Markdown")


# Cases from tdlib's test/message_entities.cpp (TEST(MessageEntities, parse_markdown)).
S = "🏟 🏟"
MDV2_ERRORS = {
    S + "_abacaba": "Can't find end of Italic entity at byte offset 9",
    S + "_abac * asd ": "Can't find end of Bold entity at byte offset 15",
    S + "_abac * asd _": "Can't find end of Italic entity at byte offset 21",
    S + "`": "Can't find end of Code entity at byte offset 9",
    S + "```": "Can't find end of Pre entity at byte offset 9",
    S + "```a": "Can't find end of Pre entity at byte offset 9",
    S + "```a ": "Can't find end of PreCode entity at byte offset 9",
    S + "__🏟 🏟_": "Can't find end of Italic entity at byte offset 20",
    S + "_🏟 🏟__": "Can't find end of Underline entity at byte offset 19",
    S + "```🏟 🏟`": "Can't find end of Code entity at byte offset 21",
    S + "```🏟 🏟_": "Can't find end of PreCode entity at byte offset 9",
    S + "```🏟 🏟\\`": "Can't find end of PreCode entity at byte offset 9",
    "[telegram\\.org](asd\\)": "Can't find end of a URL at byte offset 16",
    "[telegram\\.org](": "Can't find end of a URL at byte offset 16",
    "[telegram\\.org](asd": "Can't find end of a URL at byte offset 16",
    S + "__🏟 _🏟___": "Can't find end of Italic entity at byte offset 23",
    S + "__": "Can't find end of Underline entity at byte offset 9",
    S + "||test\\|": "Can't find end of Spoiler entity at byte offset 9",
    S + "!": "Character '!' is reserved and must be escaped with the preceding '\\'",
    S + ">": "Character '>' is reserved and must be escaped with the preceding '\\'",
    S + "![": "Can't find end of CustomEmoji entity at byte offset 9",
    S + "![👍": "Can't find end of CustomEmoji entity at byte offset 9",
    S + "![👍]": "Custom emoji entity must contain a tg://emoji URL",
    S + "![👍](tg://emoji?id=1234": "Can't find end of a custom emoji URL at byte offset 17",
    S + "![👍](t://emoji?id=1234)": "Custom emoji URL must have scheme tg",
    S + "![👍](tg:emojis?id=1234)": 'Custom emoji URL must have host "emoji"',
    S + "![👍](tg://emoji#test)": "Custom emoji URL must have an emoji identifier",
    S + "![👍](tg://emoji?test=1#&id=25)": "Custom emoji URL must have an emoji identifier",
    S + "![👍](tg://emoji?test=1231&id=025)": "Invalid custom emoji identifier specified",
    ">*b\n>ld \n>bo\nld*\nasd\ndef": "Can't find end of Bold entity at byte offset 1",
    ">\n*a*>2": "Character '>' is reserved and must be escaped with the preceding '\\'",
    ">asd\n>q||e||w||\n||asdad": "Can't find end of Spoiler entity at byte offset 16",
    ">asd\n>q||ew\n||asdad": "Can't find end of Spoiler entity at byte offset 7",
    ">asd\n>q||e||w__\n||asdad": "Can't find end of Underline entity at byte offset 13",
    ">asd\n>q||e||w||a\n||asdad": "Can't find end of Spoiler entity at byte offset 13",
}
for _reserved in "]()#+-=|{}.!":
    MDV2_ERRORS[_reserved] = (
        f"Character '{_reserved}' is reserved and must be escaped with the preceding '\\'"
    )
MDV2_PARSED: list[tuple[str, str, list[tuple]]] = [
    ("", "", []),
    ("\\\\", "\\", []),
    ("\\\\\\", "\\\\", []),
    ("\\\\\\\\\\_\\*\\`", "\\\\_*`", []),
    (S + "``", S, []),
    (S + "_abac \\* asd _", S + "abac * asd ", [("italic", 5, 11)]),
    ("🏟 \\.🏟_🏟\\. 🏟_", "🏟 .🏟🏟. 🏟", [("italic", 6, 6)]),
    ("\\\\\\a\\b\\c\\d\\e\\f\\1\\2\\3\\4\\➡️\\", "\\abcdef1234\\➡️\\", []),
    (S + "_🏟 *🏟*_", S + "🏟 🏟", [("italic", 5, 5), ("bold", 8, 2)]),
    (S + "_🏟 __🏟___", S + "🏟 🏟", [("italic", 5, 5), ("underline", 8, 2)]),
    (S + "__🏟 _🏟_ __", S + "🏟 🏟 ", [("underline", 5, 6), ("italic", 8, 2)]),
    (S + "__🏟 _🏟_\\___", S + "🏟 🏟_", [("underline", 5, 6), ("italic", 8, 2)]),
    (S + "`🏟 🏟```", S + "🏟 🏟", [("code", 5, 5)]),
    (S + "```🏟 🏟```", S + " 🏟", [("pre", 5, 3, "🏟")]),
    (S + "```🏟\n🏟```", S + "🏟", [("pre", 5, 2, "🏟")]),
    (S + "```🏟\r🏟```", S + "🏟", [("pre", 5, 2, "🏟")]),
    (S + "```🏟\n\r🏟```", S + "🏟", [("pre", 5, 2, "🏟")]),
    (S + "```🏟\r\n🏟```", S + "🏟", [("pre", 5, 2, "🏟")]),
    (S + "```🏟\n\n🏟```", S + "\n🏟", [("pre", 5, 3, "🏟")]),
    (S + "```🏟 \\\\\\`🏟```", S + " \\`🏟", [("pre", 5, 5, "🏟")]),
    (S + "**", S, []),
    ("||test||", "test", [("spoiler", 0, 4)]),
    (S + "``````", S, []),
    (S + "____", S, []),
    (
        "`_* *_`__*` `*__",
        "_* *_ ",
        [("code", 0, 5), ("code", 5, 1), ("bold", 5, 1), ("underline", 5, 1)],
    ),
    ("_* * ` `_", "   ", [("italic", 0, 3), ("bold", 0, 1), ("code", 2, 1)]),
    ("[](telegram.org)", "", []),
    ("[ ](telegram.org)", " ", [("text_link", 0, 1, "http://telegram.org/")]),
    ("[ ](as)", " ", []),
    ("[telegram\\.org]", "telegram.org", [("text_link", 0, 12, "http://telegram.org/")]),
    ("[telegram\\.org]a", "telegram.orga", [("text_link", 0, 12, "http://telegram.org/")]),
    (
        "[telegram\\.org](telegram.dog)",
        "telegram.org",
        [("text_link", 0, 12, "http://telegram.dog/")],
    ),
    ("[telegram\\.org]()", "telegram.org", []),
    ("[telegram\\.org](asdasd)", "telegram.org", []),
    (S + "![👍](TG://EMoJI/?test=1231&id=25#id=32)a", S + "👍a", [("custom_emoji", 5, 2, "25")]),
    ("> \n> \n>", " \n \n", [("blockquote", 0, 4)]),
    ("> \\>\n \\> \n>", " >\n > \n", [("blockquote", 0, 3)]),
    ("abc\n> \n> \n>\ndef", "abc\n \n \n\ndef", [("blockquote", 4, 5)]),
    (">", "", []),
    (">a", "a", [("blockquote", 0, 1)]),
    ("\r>a", "\ra", [("blockquote", 1, 1)]),
    ("\r\r>\r\ra\r\n\r", "\r\r\r\ra\r\n\r", [("blockquote", 2, 5)]),
    (
        ">*b\n>ld \n>bo\n>ld*\nasd\ndef",
        "b\nld \nbo\nld\nasd\ndef",
        [("blockquote", 0, 12), ("bold", 0, 11)],
    ),
    (
        "*a\n>b\n>ld \n>bo\n>ld\nasd*\ndef",
        "a\nb\nld \nbo\nld\nasd\ndef",
        [("bold", 0, 17), ("blockquote", 2, 12)],
    ),
    (
        ">`b\n>ld \n>bo\nld`\n>asd\ndef",
        "b\n>ld \n>bo\nld\nasd\ndef",
        [("blockquote", 0, 18), ("code", 0, 13)],
    ),
    (
        "`>b\n>ld \n>bo\nld`\n>asd\ndef",
        ">b\n>ld \n>bo\nld\nasd\ndef",
        [("code", 0, 14), ("blockquote", 15, 4)],
    ),
    (">\n\r>2", "\n\r2", [("blockquote", 0, 1), ("blockquote", 2, 1)]),
    (">\n**>2", "\n2", [("blockquote", 0, 1), ("blockquote", 1, 1)]),
    (">**\n>2", "\n2", [("blockquote", 0, 2)]),
    (">*abcd*", "abcd", [("blockquote", 0, 4), ("bold", 0, 4)]),
    (">*abcd*\n", "abcd\n", [("blockquote", 0, 5), ("bold", 0, 4)]),
    ("*>abcd\n*", "abcd\n", [("blockquote", 0, 5), ("bold", 0, 5)]),
    (
        "abc\n>def\n>def\n\r>ghi2\njkl",
        "abc\ndef\ndef\n\rghi2\njkl",
        [("blockquote", 4, 8), ("blockquote", 13, 5)],
    ),
    (
        ">asd\n>q||e||w||\nasdad",
        "asd\nqew\nasdad",
        [("expandable_blockquote", 0, 8), ("spoiler", 5, 1)],
    ),
    (">asd\n>q||ew||\nasdad", "asd\nqew\nasdad", [("blockquote", 0, 8), ("spoiler", 5, 2)]),
    (
        ">asd\r\n>q||e||w||\r\n",
        "asd\r\nqew\r\n",
        [("expandable_blockquote", 0, 10), ("spoiler", 6, 1)],
    ),
    (">asd\r\n>q||e||w||", "asd\r\nqew", [("expandable_blockquote", 0, 8), ("spoiler", 6, 1)]),
    (">||", "", []),
]


def _entity_tuple(entity: dict) -> tuple:
    extra = entity.get("language") or entity.get("url") or entity.get("custom_emoji_id")
    base = (entity["type"], entity["offset"], entity["length"])
    return (*base, extra) if extra else base


def test_markdown_v2_matches_tdlib() -> None:
    for markdown, error in MDV2_ERRORS.items():
        with pytest.raises(EntityParseError) as excinfo:
            parse_markdown_v2(markdown)
        assert str(excinfo.value) == error, markdown
    for markdown, text, entities in MDV2_PARSED:
        parsed_text, parsed_entities = parse_markdown_v2(markdown)
        assert parsed_text == text, markdown
        assert sorted(_entity_tuple(e) for e in parsed_entities) == sorted(entities), markdown


# ----- forum topics, files, commands, callbacks


async def test_forum_topics(fake_telegram: FakeTelegram, bot: Bot) -> None:
    group = -1001234567890
    update_id = fake_telegram.push_text(
        group, USER, "in topic", chat_type="supergroup", thread_id=7, mention_bot=True
    )
    (update,) = await bot.get_updates(timeout=0)
    assert update.update_id == update_id
    message = update.message
    assert message is not None
    assert message.chat.is_forum and message.message_thread_id == 7 and message.is_topic_message
    assert message.text == f"@{fake_telegram.bot_user} in topic"
    assert message.entities == (MessageEntity(MessageEntity.MENTION, 0, 15),)
    # As on the real service, a topic message "replies" to the topic's creation message.
    assert message.reply_to_message is not None
    assert message.reply_to_message.forum_topic_created is not None

    answer = await bot.send_message(group, "topic answer", message_thread_id=7)
    assert answer.message_thread_id == 7 and answer.is_topic_message
    general = await bot.send_message(group, "general answer")
    assert general.message_thread_id is None
    assert await bot.send_chat_action(group, "typing", message_thread_id=7)
    with pytest.raises(BadRequest, match=r"^Message thread not found$"):
        await bot.send_message(group, "lost", message_thread_id=99)
    reply = await bot.send_message(
        group, "reply lands in the topic", reply_parameters=ReplyParameters(message.message_id)
    )
    assert reply.message_thread_id == 7
    assert reply.reply_to_message is not None
    assert reply.reply_to_message.message_id == message.message_id
    await bot.delete_message(group, reply.message_id)
    assert fake_telegram.chat_texts(group, thread_id=7) == ["topic answer"]
    assert fake_telegram.chat_texts(group) == ["topic answer", "general answer"]
    assert fake_telegram.chat_actions[-1].thread_id == 7


async def test_get_file_and_download(fake_telegram: FakeTelegram, bot: Bot) -> None:
    payload = b"\xff\xd8\xffphoto-bytes\xff\xd9"
    fake_telegram.push_photo(USER, USER, payload)
    fake_telegram.push_document(USER, USER, b"doc body", file_name="notes.txt")
    photo_update, doc_update = await bot.get_updates(timeout=0)
    assert photo_update.message is not None and photo_update.message.caption is None
    largest = photo_update.message.photo[-1]
    file = await largest.get_file()
    assert file.file_path is not None and file.file_path.startswith(fake_telegram.url)
    buffer = io.BytesIO()
    await file.download_to_memory(buffer)
    assert buffer.getvalue() == payload
    assert doc_update.message is not None and doc_update.message.document is not None
    doc_file = await doc_update.message.document.get_file()
    assert bytes(await doc_file.download_as_bytearray()) == b"doc body"
    with pytest.raises(BadRequest, match=r"^Invalid file_id$"):
        await bot.get_file("nope")


async def test_set_my_commands_validation(fake_telegram: FakeTelegram, bot: Bot) -> None:
    commands = [BotCommand("new", "Start a new conversation"), BotCommand("stop_all", "Stop")]
    assert await bot.set_my_commands(commands)
    assert await bot.get_my_commands() == tuple(commands)
    assert fake_telegram.commands() == [
        {"command": "new", "description": "Start a new conversation"},
        {"command": "stop_all", "description": "Stop"},
    ]
    for bad, error in [
        (BotCommand("New", "x"), "^Bot_command_invalid$"),
        (BotCommand("with-dash", "x"), "^Bot_command_invalid$"),
        (BotCommand("a" * 33, "x"), "^Bot_command_invalid$"),
        (BotCommand("ok", "d" * 257), "^Bot_command_description_invalid$"),
        (BotCommand("ok", ""), "^Command description must be non-empty$"),
    ]:
        with pytest.raises(BadRequest, match=error):
            await bot.set_my_commands([bad])
    with pytest.raises(BadRequest, match=r"^Command must be non-empty$"):
        await bot.set_my_commands([BotCommand("", "x")])
    with pytest.raises(BadRequest, match=r"^Bot_command_invalid$"):
        await bot.set_my_commands([BotCommand("/start", "x")])
    with pytest.raises(BadRequest) as excinfo:
        await bot.set_my_commands(commands, scope={"type": "chat"})  # type: ignore[arg-type]
    assert excinfo.value.message == "Can't parse botcommandscope: can't find field \"chat_id\""
    private_scope = BotCommandScopeChat(USER)
    assert await bot.set_my_commands([BotCommand("only_here", "x")], scope=private_scope)
    assert fake_telegram.commands({"type": "chat", "chat_id": USER}) == [
        {"command": "only_here", "description": "x"}
    ]
    with pytest.raises(BadRequest, match=r"^Bot_commands_too_much$"):
        await bot.set_my_commands([BotCommand(f"c{i}", "x") for i in range(101)])
    assert await bot.get_my_commands() == tuple(commands)


async def test_callback_query_answered_once(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    sent = await bot.send_message(
        USER,
        "choose",
        reply_markup=InlineKeyboardMarkup([[InlineKeyboardButton("A", callback_data="a")]]),
    )
    fake_telegram.push_callback_query(USER, USER, sent.message_id, "a")
    updates = await bot.get_updates(timeout=0)
    query = updates[-1].callback_query
    assert query is not None and query.data == "a"
    assert query.message is not None and query.message.message_id == sent.message_id
    assert await query.answer("done")
    with pytest.raises(BadRequest, match=r"^Query is too old"):
        await query.answer("again")
    assert [a.text for a in fake_telegram.callback_answers] == ["done"]


async def test_wait_until_idle_and_wait_for(fake_telegram: FakeTelegram, bot: Bot) -> None:
    update_id = fake_telegram.push_text(USER, USER, "ping")

    async def tiny_bot() -> None:
        updates = await bot.get_updates(timeout=0)
        await bot.send_message(USER, "pong")
        await bot.get_updates(offset=updates[-1].update_id + 1, timeout=0)

    task = asyncio.create_task(tiny_bot())
    texts = await fake_telegram.wait_for(lambda: fake_telegram.chat_texts(USER))
    assert texts == ["pong"]
    await fake_telegram.wait_until_idle()
    assert fake_telegram.pending_update_ids == []
    await task
    assert update_id not in fake_telegram.pending_update_ids
    with pytest.raises(TimeoutError, match="never"):
        await fake_telegram.wait_for(never, timeout=0.05)


def never() -> bool:
    return False


async def test_ptb_application_polls_and_answers(fake_telegram: FakeTelegram) -> None:
    # The way the channel will use PTB: an Application with an Updater, pointed at api_base_url.
    api_base_url = fake_telegram.url
    application = (
        Application.builder()
        .token(fake_telegram.token)
        .base_url(f"{api_base_url}/bot")
        .base_file_url(f"{api_base_url}/file/bot")
        .build()
    )

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text(f"echo: {update.effective_message.text}")

    application.add_handler(MessageHandler(filters.TEXT, echo))
    async with application:
        await application.start()
        assert application.updater is not None
        await application.updater.start_polling(timeout=10, poll_interval=0)
        fake_telegram.push_text(USER, USER, "hello")
        fake_telegram.push_text(USER, USER, "world")
        await fake_telegram.wait_for(lambda: len(fake_telegram.chat_texts(USER)) == 2)
        await fake_telegram.wait_until_idle()
        await application.updater.stop()
        await application.stop()
    assert fake_telegram.chat_texts(USER) == ["echo: hello", "echo: world"]
    assert fake_telegram.pending_update_ids == []
    statuses = {call.status for call in fake_telegram.calls("getUpdates")}
    assert statuses <= {200, 499}  # no conflicts; the last long poll may be abandoned
    assert [c.method for c in fake_telegram.sent[:2]] == ["getMe", "deleteWebhook"]


async def test_blocked_user_and_injected_failures(fake_telegram: FakeTelegram, bot: Bot) -> None:
    fake_telegram.push_text(USER, USER, "hi")
    fake_telegram.fail("sendMessage", 502, "Bad Gateway")
    with pytest.raises(NetworkError, match=r"^Bad Gateway$"):
        await bot.send_message(USER, "lost")
    assert (await bot.send_message(USER, "delivered")).text == "delivered"
    fake_telegram.block(USER)
    with pytest.raises(Forbidden, match=r"^Forbidden: bot was blocked by the user$"):
        await bot.send_message(USER, "after block")
    with pytest.raises(Forbidden):
        await bot.send_chat_action(USER, "typing")
    assert fake_telegram.chat_texts(USER) == ["delivered"]
