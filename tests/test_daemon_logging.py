"""Daemon logging: JSON or console lines, stdlib loggers routed through structlog, and no
secret in any line (event fields, messages, exception text, tracebacks, URLs)."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
from collections.abc import Iterator

import pytest
import structlog

from pingu.daemon.logging import LogConfigError, Redactor, configure_logging

API_KEY = "sk-test-0123456789abcdef"
GATEWAY_TOKEN = "gw-token-secret-42"
BOT_TOKEN = "123456789:AAHfakeBotTokenValue_0123456789abcd"
SECRETS = [API_KEY, GATEWAY_TOKEN, BOT_TOKEN]


class TTYStringIO(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in ("httpx", "httpx2", "aiosqlite")}
    saved = structlog.get_config()
    hooks = (sys.excepthook, threading.excepthook)
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, lvl in quiet.items():
        logging.getLogger(name).setLevel(lvl)
    structlog.reset_defaults()
    structlog.configure(**saved)
    sys.excepthook, threading.excepthook = hooks
    logging.captureWarnings(False)


def json_lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    configure_logging("info", "auto", SECRETS, stream=out)
    structlog.get_logger("pingu.agent").info(
        "turn", session="http:abc", agent="default", duration_ms=12.5, tokens=42
    )
    [line] = json_lines(out)
    assert line["event"] == "turn"
    assert line["level"] == "info"
    assert line["logger"] == "pingu.agent"
    assert (line["session"], line["agent"], line["duration_ms"], line["tokens"]) == (
        "http:abc",
        "default",
        12.5,
        42,
    )
    assert line["timestamp"].endswith("Z")


def test_console_lines_on_a_terminal() -> None:
    out = TTYStringIO()
    configure_logging("info", "auto", SECRETS, stream=out)
    structlog.get_logger("pingu.daemon").info("ready", http_port=8484)
    text = out.getvalue()
    assert "ready" in text and "8484" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])


def test_level_filters_structlog_and_stdlib() -> None:
    out = io.StringIO()
    configure_logging("warning", "json", (), stream=out)
    structlog.get_logger("pingu.x").info("hidden")
    logging.getLogger("aiohttp.server").info("hidden too")
    structlog.get_logger("pingu.x").warning("shown")
    logging.getLogger("aiohttp.server").error("also shown")
    assert [e["event"] for e in json_lines(out)] == ["shown", "also shown"]


def test_secrets_are_redacted_everywhere() -> None:
    out = io.StringIO()
    configure_logging("debug", "json", SECRETS, stream=out)
    log = structlog.get_logger("pingu.test")
    log.info(f"calling with {API_KEY}", key=API_KEY, nested={"headers": [f"x {GATEWAY_TOKEN}"]})
    try:
        raise RuntimeError(f"Telegram said no: https://api.telegram.org/bot{BOT_TOKEN}/getMe")
    except RuntimeError:
        log.exception("poll_failed")
    try:
        token = GATEWAY_TOKEN  # noqa: F841 - a local in the failing frame
        raise ValueError("boom " + API_KEY)
    except ValueError as exc:
        logging.getLogger("aiohttp.server").error("Error handling request %s", exc, exc_info=True)
    # Library loggers format their own arguments.
    logging.getLogger("telegram.ext").warning("retrying %s", f"/bot{BOT_TOKEN}/getUpdates")

    text = out.getvalue()
    for secret in SECRETS:
        assert secret not in text
    # Also the pieces a URL or traceback might split a bot token into.
    assert BOT_TOKEN.split(":")[1] not in text
    lines = json_lines(out)
    assert [e["event"] for e in lines] == [
        "calling with ***",
        "poll_failed",
        "Error handling request boom ***",
        "retrying /bot***/getUpdates",
    ]
    assert lines[0]["key"] == "***"
    assert lines[0]["nested"] == {"headers": ["x ***"]}
    assert (
        "RuntimeError: Telegram said no: https://api.telegram.org/bot***/getMe"
        in (lines[1]["exception"])
    )
    assert "ValueError: boom ***" in lines[2]["exception"]


def test_generic_patterns_without_configuring_the_secret() -> None:
    redactor = Redactor([])
    assert redactor.redact_text("GET https://x/bot987654321:AAAbbbCCCdddEEEfff/sendMessage") == (
        "GET https://x/bot***/sendMessage"
    )
    assert redactor.redact_text("Authorization: Bearer abc.def-ghi") == "Authorization: Bearer ***"


def test_console_tracebacks_are_redacted() -> None:
    out = TTYStringIO()
    configure_logging("info", "console", SECRETS, stream=out)
    try:
        raise ConnectionError(f"failed: {API_KEY}")
    except ConnectionError:
        structlog.get_logger("pingu.test").exception("boom")
    text = out.getvalue()
    assert "ConnectionError" in text
    assert API_KEY not in text


def test_per_request_http_client_logs_are_quiet() -> None:
    out = io.StringIO()
    configure_logging("debug", "json", SECRETS, stream=out)
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).info('HTTP Request: POST https://api.telegram.org/bot1/x "200"')
        logging.getLogger(name).warning("connection pool full")
    assert [e["logger"] for e in json_lines(out)] == ["httpx", "httpx2"]


def test_bearer_redaction_stays_on_its_line() -> None:
    traceback_text = (
        'File "app.py", line 3, in check_bearer\n'
        "  # Bearer\n"
        "    return await handler(request)\n"
        "*** await handler(request)"
    )
    redactor = Redactor([])
    assert redactor.redact_text(traceback_text) == traceback_text
    assert redactor.redact_line("see Bearer\nsecond line") == "see Bearer\nsecond line"
    assert redactor.redact_text("Authorization: Bearer\tabc") == "Authorization: Bearer\t***"


async def test_sql_statements_never_reach_the_log_at_debug(tmp_path) -> None:
    from pingu.store.db import Database

    out = io.StringIO()
    configure_logging("debug", "json", SECRETS, stream=out)
    db = await Database.open(tmp_path / "pingu.db")
    try:
        await db.history.ensure_session("http:s", "http")
        await db.history.save_turn("http:s", "my private message", [], model="m")
    finally:
        await db.close()
    assert "my private message" not in out.getvalue()
    assert not [e for e in json_lines(out) if e.get("logger") == "aiosqlite"]


def test_uncaught_exceptions_go_through_the_redacting_logger() -> None:
    out = io.StringIO()
    configure_logging("info", "json", SECRETS, stream=out)
    try:
        raise KeyError(GATEWAY_TOKEN)
    except KeyError:
        sys.excepthook(*sys.exc_info())
    [line] = json_lines(out)
    assert line["event"] == "uncaught_exception"
    assert "KeyError" in line["exception"]
    assert GATEWAY_TOKEN not in out.getvalue()


def test_bad_level_and_format_are_errors() -> None:
    with pytest.raises(LogConfigError, match="unknown log level"):
        configure_logging("loud", "json", (), stream=io.StringIO())
    with pytest.raises(LogConfigError, match="unknown log format"):
        configure_logging("info", "xml", (), stream=io.StringIO())


def test_a_short_secret_is_redacted_in_values_but_does_not_mangle_keys() -> None:
    out = io.StringIO()
    configure_logging("info", "json", ["tok"], stream=out)
    structlog.get_logger("pingu.agent").info("turn", tokens=10, note="the token is tok")
    [line] = json_lines(out)
    assert line["tokens"] == 10
    assert line["note"] == "the ***en is ***"
