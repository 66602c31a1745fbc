"""AiohttpRequest, python-telegram-bot's HTTP layer on aiohttp, with the real `Bot` against
the fake Bot API (and, for the failures the fake cannot produce, a bare TCP server on
127.0.0.1): what works (calls, uploads, downloads) and how each failure tells whether
Telegram may have acted on the request."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from telegram import Bot
from telegram.error import NetworkError, TimedOut

from pingu.channels.telegram.api import (
    DeliveryUncertain,
    RetryPolicy,
    TelegramSender,
    build_bot,
    surely_not_sent,
)
from pingu.channels.telegram.request import AiohttpRequest
from tests.fakes.telegram_api import FakeTelegram

CHAT = 111
FAST = RetryPolicy(first_s=0.01, cap_s=0.02)


def free_port() -> int:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bot_on(base_url: str, token: str, request: AiohttpRequest) -> Bot:
    return Bot(
        token, base_url=f"{base_url}/bot", base_file_url=f"{base_url}/file/bot", request=request
    )


def describe_chain(exc: BaseException) -> str:
    """Every message of an error and its causes, as a log line with a traceback shows."""
    parts = []
    current: BaseException | None = exc
    while current is not None:
        parts.append(f"{type(current).__name__}: {current} {current.args!r}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


@pytest.fixture
async def bot(fake_telegram: FakeTelegram) -> AsyncIterator[Bot]:
    bot = build_bot(fake_telegram.token, fake_telegram.url, poll_timeout_s=1)
    await bot.initialize()
    try:
        yield bot
    finally:
        await bot.shutdown()


async def test_bot_calls_uploads_and_downloads_go_through_aiohttp(
    fake_telegram: FakeTelegram, bot: Bot
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    assert isinstance(bot.request, AiohttpRequest)
    assert bot.username  # getMe, at initialize()

    sent = await bot.send_message(CHAT, "Hello <b>there</b>", parse_mode="HTML")
    assert fake_telegram.chat_texts(CHAT) == ["Hello there"]
    assert sent.text == "Hello there"

    # A file goes up as multipart/form-data, with the other parameters beside it.
    content = "ünïcode, and bytes \x00\x01".encode()
    document = await bot.send_document(
        CHAT, document=content, filename="notes.txt", caption="the notes"
    )
    assert document.document is not None
    assert (document.document.file_name, document.document.file_size) == ("notes.txt", len(content))
    assert document.caption == "the notes"

    # ... and comes back down with a GET on the file URL.
    file = await bot.get_file(document.document.file_id)
    assert bytes(await file.download_as_bytearray()) == content


async def test_an_unreachable_api_is_a_network_error_that_surely_was_not_sent(
    fake_telegram: FakeTelegram,
) -> None:
    request = AiohttpRequest(connect_timeout=5.0)
    bot = bot_on(f"http://127.0.0.1:{free_port()}", fake_telegram.token, request)
    await request.initialize()
    try:
        with pytest.raises(NetworkError) as caught:
            await bot._post("sendMessage", {"chat_id": CHAT, "text": "hi"})
        assert isinstance(caught.value.__cause__, aiohttp.ClientConnectorError)
        assert surely_not_sent(caught.value)
        # So the sender tries again (and, the API staying down, gives up with the error,
        # not with "maybe delivered").
        sender = TelegramSender(bot, fake_telegram.token, retry=FAST)
        with pytest.raises(NetworkError) as again:
            await sender.send(CHAT, "hi")
        assert not isinstance(again.value, DeliveryUncertain)
    finally:
        await request.shutdown()


async def test_a_full_pool_is_a_timeout_before_sending_and_the_token_stays_out_of_it(
    fake_telegram: FakeTelegram,
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    # (aiohttp bounds the wait for a connection and its opening together: their sum.)
    request = AiohttpRequest(
        connection_pool_size=1, pool_timeout=0.1, connect_timeout=0.1, read_timeout=5.0
    )
    bot = bot_on(fake_telegram.url, fake_telegram.token, request)
    await request.initialize()
    try:
        fake_telegram.stall("sendMessage", 1.0)
        busy = asyncio.create_task(bot._post("sendMessage", {"chat_id": CHAT, "text": "slow"}))
        await fake_telegram.wait_for(lambda: fake_telegram.chat_texts(CHAT) == ["slow"])
        with pytest.raises(TimedOut) as caught:
            await bot._post("sendMessage", {"chat_id": CHAT, "text": "queued"})
        assert isinstance(caught.value.__cause__, aiohttp.ConnectionTimeoutError)
        assert surely_not_sent(caught.value)
        # aiohttp quotes the request URL (which holds the token) in this error.
        chain = describe_chain(caught.value)
        assert "Connection timeout to host" in chain
        assert fake_telegram.token not in chain
        assert fake_telegram.token.partition(":")[2] not in chain
        await busy
    finally:
        await request.shutdown()
    assert fake_telegram.chat_texts(CHAT) == ["slow"]


async def test_a_read_timeout_may_have_been_delivered(fake_telegram: FakeTelegram) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    request = AiohttpRequest(read_timeout=0.2)
    bot = bot_on(fake_telegram.url, fake_telegram.token, request)
    await request.initialize()
    try:
        fake_telegram.stall("sendMessage", 1.0)
        with pytest.raises(TimedOut) as caught:
            await bot._post("sendMessage", {"chat_id": CHAT, "text": "late"})
        assert isinstance(caught.value.__cause__, aiohttp.SocketTimeoutError)
        assert not surely_not_sent(caught.value)
        # Telegram did take it: the sender must never send such a message again.
        assert fake_telegram.chat_texts(CHAT) == ["late"]
    finally:
        await request.shutdown()


async def test_a_connection_dropped_after_the_request_is_never_resent(
    fake_telegram: FakeTelegram,
) -> None:
    """The server reads the whole request, then hangs up without answering: it may have
    acted on it. sendMessage then fails as DeliveryUncertain after one attempt."""
    requests: list[bytes] = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        requests.append(head + await reader.readexactly(length))
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    request = AiohttpRequest()
    bot = bot_on(f"http://127.0.0.1:{port}", fake_telegram.token, request)
    await request.initialize()
    try:
        with pytest.raises(NetworkError) as caught:
            await bot._post("sendMessage", {"chat_id": CHAT, "text": "hi"})
        assert isinstance(caught.value.__cause__, aiohttp.ServerDisconnectedError)
        assert not surely_not_sent(caught.value)

        sender = TelegramSender(bot, fake_telegram.token, retry=FAST)
        with pytest.raises(DeliveryUncertain) as uncertain:
            await sender.send(CHAT, "the answer")
        assert fake_telegram.token not in str(uncertain.value)
    finally:
        await request.shutdown()
        server.close()
        await server.wait_closed()
    assert len(requests) == 2  # one each: never a second try
    assert b"text=the+answer" in requests[1]
    assert b"chat_id=111" in requests[1]


async def test_a_request_before_initialize_or_after_shutdown_is_refused(
    fake_telegram: FakeTelegram,
) -> None:
    request = AiohttpRequest()
    bot = bot_on(fake_telegram.url, fake_telegram.token, request)
    with pytest.raises(NetworkError, match="not initialized"):
        await bot._post("getMe", {})
    await request.initialize()
    assert (await bot._post("getMe", {}))["is_bot"] is True
    await request.shutdown()
    await request.shutdown()  # twice is fine
    with pytest.raises(NetworkError, match="not initialized"):
        await bot._post("getMe", {})
    await request.initialize()  # and it can start again, as PTB's own request can
    try:
        assert (await bot._post("getMe", {}))["is_bot"] is True
    finally:
        await request.shutdown()


async def test_a_5xx_to_sendmessage_is_uncertain_whatever_its_body(
    fake_telegram: FakeTelegram, bot: Bot
) -> None:
    """A 502 may come from a gateway after the Bot API delivered the message: JSON body
    (PTB: NetworkError, no cause) or HTML body (NetworkError caused by the failed parse),
    the sender treats both alike, as uncertain, and sends nothing twice."""
    fake_telegram.push_text(CHAT, CHAT, "hi")
    sender = TelegramSender(bot, fake_telegram.token, retry=FAST)
    fake_telegram.fail("sendMessage", 502, "Bad Gateway")
    with pytest.raises(DeliveryUncertain):
        await sender.send(CHAT, "json 502")
    assert [c.status for c in fake_telegram.calls("sendMessage")] == [502]

    requests: list[bytes] = []

    async def html_502(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readuntil(b"\r\n\r\n"))
        page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        writer.write(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(page), page)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(html_502, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    request = AiohttpRequest()
    html_bot = bot_on(f"http://127.0.0.1:{port}", fake_telegram.token, request)
    await request.initialize()
    try:
        with pytest.raises(NetworkError) as caught:
            await html_bot._post("sendMessage", {"chat_id": CHAT, "text": "hi"})
        assert not surely_not_sent(caught.value)
        with pytest.raises(DeliveryUncertain):
            await TelegramSender(html_bot, fake_telegram.token, retry=FAST).send(CHAT, "html")
    finally:
        await request.shutdown()
        server.close()
        await server.wait_closed()
    assert len(requests) == 2  # one each: never a second try


async def test_flood_control_on_sendmessage_is_waited_out_and_delivered_once(
    fake_telegram: FakeTelegram, bot: Bot
) -> None:
    """429 is Telegram saying "not sent, later": retried, unlike a 5xx."""
    fake_telegram.push_text(CHAT, CHAT, "hi")
    fake_telegram.flood("sendMessage", retry_after=0.01, times=2)
    sender = TelegramSender(bot, fake_telegram.token, retry=FAST)
    await sender.send(CHAT, "delivered")
    assert fake_telegram.chat_texts(CHAT) == ["delivered"]
    assert [c.status for c in fake_telegram.calls("sendMessage")] == [429, 429, 200]
