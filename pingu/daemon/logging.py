"""Logging for the daemon: structlog in front, the standard library underneath.

Every line, whether it comes from structlog (`structlog.get_logger(...)`) or from a
library's stdlib logger (aiohttp, httpx, telegram, openai, asyncio), goes through the
same processors and ends up on stderr: JSON lines when stderr is not a terminal (what
journald stores), readable coloured lines when it is. A redaction step replaces every
configured secret, and anything shaped like a Telegram bot token or a bearer credential,
with `***` in every string of the event, including exception text and tracebacks; the
rendered line is checked once more. Secrets are therefore safe to pass to a logger by
mistake, but not to print().
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

REDACTED = "***"
MIN_LINE_SECRET_LENGTH = 8

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
FORMATS = ("auto", "json", "console")

# Libraries that log one INFO line per HTTP request with the full URL; Telegram's URLs
# contain the bot token, and the lines are noise in the journal anyway. aiosqlite logs
# every SQL statement with its parameters (user messages, model output) at DEBUG.
QUIET_LOGGERS = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "telegram.ext.Updater",
    "aiosqlite",
)

# `.../bot123456:AAE...` in Telegram Bot API URLs, and HTTP bearer credentials.
_BOT_TOKEN = re.compile(r"(bot)\d{3,}:[A-Za-z0-9_-]{10,}")
# Spaces or tabs only: across a line break "Bearer" is prose (a traceback), not a header.
_BEARER = re.compile(r"(Bearer[ \t]+)[^\s\"',;]+", re.IGNORECASE)


class LogConfigError(ValueError):
    """An unknown log level or format."""


def parse_level(level: str) -> int:
    try:
        return LEVELS[level.strip().lower()]
    except KeyError:
        known = ", ".join(k for k in LEVELS if k != "warn")
        raise LogConfigError(f"unknown log level {level!r} (expected one of {known})") from None


class Redactor:
    """Replaces secret values inside strings, containers and rendered lines."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Longest first, so that a secret containing another is replaced whole.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact_text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        text = _BOT_TOKEN.sub(r"\1" + REDACTED, text)
        return _BEARER.sub(r"\1" + REDACTED, text)

    def redact(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {k: self.redact(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return type(value)(self.redact(v) for v in value)
        if isinstance(value, bytes | bytearray):
            return self.redact_text(value.decode("utf-8", "replace"))
        if value is None or isinstance(value, bool | int | float):
            return value
        # Exceptions, URLs, paths...: what the renderer would print is their str().
        return self.redact_text(str(value))

    def redact_line(self, line: str) -> str:
        """The last pass, over the rendered line: catches what rendering changed (a value
        the renderer repr()s). Short secrets are left to the per-value pass, or a token
        like "tok" would mangle every `tokens=` key."""
        for secret in self.secrets:
            if len(secret) >= MIN_LINE_SECRET_LENGTH and secret in line:
                line = line.replace(secret, REDACTED)
        line = _BOT_TOKEN.sub(r"\1" + REDACTED, line)
        return _BEARER.sub(r"\1" + REDACTED, line)

    def __call__(self, _: WrappedLogger, __: str, event_dict: EventDict | str) -> Any:
        if isinstance(event_dict, str):  # after the renderer: the final line
            return self.redact_line(event_dict)
        return {key: self.redact(value) for key, value in event_dict.items()}


def _uses_console(fmt: str, stream: TextIO) -> bool:
    if fmt == "console":
        return True
    if fmt == "json":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def configure_logging(
    level: str = "info",
    fmt: str = "auto",
    secrets: Iterable[str | None] = (),
    *,
    stream: TextIO | None = None,
) -> Redactor:
    """Send structlog and stdlib logging to `stream` (stderr) at `level`, with secrets
    redacted. `fmt`: auto (console on a terminal, JSON otherwise), json or console.
    Returns the redactor, for error text that does not go through a logger."""
    numeric_level = parse_level(level)
    if fmt not in FORMATS:
        raise LogConfigError(f"unknown log format {fmt!r} (expected one of {', '.join(FORMATS)})")
    stream = stream if stream is not None else sys.stderr
    redactor = Redactor(secrets)
    console = _uses_console(fmt, stream)
    isatty = getattr(stream, "isatty", None)
    colors = bool(isatty and isatty())

    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        timestamper,
    ]
    renderer: Processor = (
        structlog.dev.ConsoleRenderer(colors=colors)
        if console
        else structlog.processors.JSONRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # Tracebacks become text here, before redaction: secrets in exception
            # messages and in frame locals are caught too.
            structlog.processors.format_exc_info,
            structlog.processors.UnicodeDecoder(),
            redactor,
            renderer,
            redactor,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric_level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, numeric_level))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    logging.captureWarnings(True)
    _install_excepthooks()
    return redactor


def _install_excepthooks() -> None:
    """Uncaught exceptions are logged (and so redacted) instead of printed raw."""
    log = structlog.get_logger("pingu")

    def excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        log.critical("uncaught_exception", exc_info=(exc_type, exc, tb))

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None:
            return
        log.error(
            "uncaught_thread_exception",
            thread=getattr(args.thread, "name", None),
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
