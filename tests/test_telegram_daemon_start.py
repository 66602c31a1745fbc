"""`pingu gateway` with a Telegram channel whose start goes wrong: a refused bot token
(a config error: one line, exit 2) and a Bot API that cannot be reached (the daemon runs
on, degraded, and keeps trying)."""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp

from tests.fakes.daemon import DaemonStarter, write_config
from tests.fakes.responses_api import FakeResponsesAPI
from tests.fakes.telegram_api import FakeTelegram


def channel_config(token: str, url: str) -> str:
    return (
        '[channel.tg]\ntype = "telegram"\n[channel.tg.settings]\n'
        f'bot_token = "{token}"\napi_base_url = "{url}"\nallowed_users = [111]\n'
        "poll_timeout_s = 1\n"
    )


async def test_a_refused_bot_token_is_a_one_line_config_error_exit_2(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_responses: FakeResponsesAPI,
    pingu_daemon: DaemonStarter,
) -> None:
    # Shaped like a token, but not the bot's: the Bot API answers 401 Unauthorized.
    wrong = fake_telegram.token[:-6] + "zzzzzz"
    config = write_config(tmp_path, fake_responses, extra=channel_config(wrong, fake_telegram.url))
    daemon = await pingu_daemon(config, ready=False)
    assert await daemon.wait() == 2
    failed = daemon.find("startup_failed")
    assert len(failed) == 1
    assert failed[0]["error"] == (
        "channel.tg: Telegram refused the bot token; check channel.tg.settings.bot_token"
    )
    assert not daemon.find("daemon_crashed")
    assert "Traceback" not in daemon.stderr and "exception" not in failed[0]
    secret = wrong.partition(":")[2]
    assert wrong not in daemon.stderr and secret not in daemon.stderr


async def test_an_unreachable_bot_api_at_start_leaves_the_daemon_running_degraded(
    tmp_path: Path, fake_responses: FakeResponsesAPI, pingu_daemon: DaemonStarter
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = "123456:AA" + "b" * 33
    config = write_config(
        tmp_path, fake_responses, extra=channel_config(token, f"http://127.0.0.1:{port}")
    )
    daemon = await pingu_daemon(config)  # ready, despite the channel
    # The channel keeps trying, with backoff.
    await daemon.wait_for("telegram.connect_failed", timeout=10, retry_in_s=1.0)
    await daemon.wait_for("telegram.connect_failed", timeout=10, retry_in_s=2.0)
    async with aiohttp.ClientSession() as http, http.get(daemon.url("/healthz")) as response:
        assert response.status == 200
        health = await response.json()
    assert health["status"] == "degraded"
    assert health["channels"]["tg"]["ok"] is False
    assert f"Cannot connect to host 127.0.0.1:{port}" in health["channels"]["tg"]["error"]
    assert await daemon.terminate() == 0
    assert token.partition(":")[2] not in daemon.stderr
