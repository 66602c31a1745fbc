"""The `web_fetch` tool: fetch a web page as readable text."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from yarl import URL

from pingu.tools.base import ToolContext, ToolError
from pingu.tools.html_text import html_to_text

TIMEOUT_S = 20.0
DOWNLOAD_CAP_BYTES = 2 * 1024 * 1024
OUTPUT_CAP_CHARS = 20_000
MAX_REDIRECTS = 5
ERROR_EXCERPT_CHARS = 500
USER_AGENT = "Pingu/0.1 (web_fetch tool)"

_ALLOWED_SCHEMES = ("http", "https")
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/x-sh",
        "application/toml",
        "application/yaml",
        "application/x-yaml",
    }
)


def _check_url(url: URL, shown: str) -> None:
    if url.scheme.lower() not in _ALLOWED_SCHEMES:
        scheme = url.scheme or "none"
        raise ToolError(f"only http and https URLs can be fetched; {shown} has scheme {scheme}")
    if not url.host:
        raise ToolError(f"the URL has no host: {shown}")


def _kind_of(content_type: str) -> str:
    """html, text or binary; an empty type is decided by looking at the bytes."""
    if content_type in _HTML_TYPES:
        return "html"
    if (
        content_type.startswith("text/")
        or content_type in _TEXT_TYPES
        or content_type.endswith(("+json", "+xml"))
    ):
        return "text"
    return "unknown" if not content_type else "binary"


def _looks_like_text(data: bytes) -> bool:
    return b"\0" not in data[:4096]


def _decode(data: bytes, charset: str | None) -> str:
    try:
        return data.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name
        return data.decode("utf-8", errors="replace")


def _readable(kind: str, body: str) -> tuple[str, str]:
    sniffed_html = body.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))
    if kind == "html" or (kind == "unknown" and sniffed_html):
        return html_to_text(body)
    return "", body


class WebFetchTool:
    name = "web_fetch"
    description = (
        "Fetch a web page (http or https only) and return it as readable text: HTML is "
        "converted to plain text with the title first; other text types (JSON, plain text, "
        "XML) are returned as they are; images and other binary files are refused. At most "
        f"{DOWNLOAD_CAP_BYTES // (1024 * 1024)} MB are downloaded, {int(TIMEOUT_S)} s are "
        f"allowed, and the text is cut after about {OUTPUT_CAP_CHARS // 1000} KB with a note."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 - the Tool protocol wants a plain attribute
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http:// or https:// URL to fetch."},
        },
        "required": ["url"],
        "additionalProperties": False,
    }

    timeout_grace_s = 1.0  # our own timeout (same length) reports first; see run_tool

    def __init__(
        self,
        *,
        timeout_s: float = TIMEOUT_S,
        download_cap_bytes: int = DOWNLOAD_CAP_BYTES,
        output_cap_chars: int = OUTPUT_CAP_CHARS,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        self.timeout_s = timeout_s
        self.download_cap_bytes = download_cap_bytes
        self.output_cap_chars = output_cap_chars
        self.max_redirects = max_redirects

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raw_url: str = args["url"].strip()
        try:
            url = URL(raw_url)
        except ValueError as exc:
            raise ToolError(f"not a valid URL: {raw_url} ({exc})") from None
        _check_url(url, raw_url)
        timeout_s = min(self.timeout_s, ctx.timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                return await self._fetch(url)
        except TimeoutError:
            raise ToolError(f"timed out after {timeout_s:g} s fetching {raw_url}") from None
        except aiohttp.ClientError as exc:
            detail = str(exc) or type(exc).__name__
            raise ToolError(f"could not fetch {raw_url}: {detail}") from None

    async def _fetch(self, url: URL) -> str:
        headers = {
            "User-Agent": USER_AGENT,
            "Accept": "text/html,application/xhtml+xml,text/*;q=0.9,*/*;q=0.5",
        }
        # trust_env=False: a proxy from the daemon's environment is not the model's to use.
        async with aiohttp.ClientSession(headers=headers, trust_env=False) as session:
            for _hop in range(self.max_redirects + 1):
                async with session.get(url, allow_redirects=False) as resp:
                    if resp.status in _REDIRECT_STATUSES and "Location" in resp.headers:
                        location = resp.headers["Location"]
                        try:
                            url = resp.url.join(URL(location))
                        except ValueError:
                            raise ToolError(f"bad redirect location: {location}") from None
                        _check_url(url, f"the redirect target {location}")
                        continue
                    return await self._render(resp)
        raise ToolError(f"too many redirects (more than {self.max_redirects})")

    async def _read_capped(self, resp: aiohttp.ClientResponse, cap: int) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                return b"".join(chunks)[:cap], True
        return b"".join(chunks), False

    async def _render(self, resp: aiohttp.ClientResponse) -> str:
        content_type = resp.content_type.lower() if "Content-Type" in resp.headers else ""
        kind = _kind_of(content_type)
        if not 200 <= resp.status < 300:
            data, _ = await self._read_capped(resp, 16 * 1024)
            body = _decode(data, resp.charset) if _looks_like_text(data) else ""
            _, excerpt = _readable(kind, body)
            excerpt = excerpt.strip()[:ERROR_EXCERPT_CHARS]
            raise ToolError(
                f"HTTP {resp.status} {resp.reason or ''}".rstrip()
                + f" from {resp.url}"
                + (f"\n{excerpt}" if excerpt else "")
            )
        if kind == "binary":
            raise ToolError(f"{resp.url} is {content_type}, not text; it was not fetched")
        data, cut = await self._read_capped(resp, self.download_cap_bytes)
        if kind == "unknown" and not _looks_like_text(data):
            raise ToolError(f"{resp.url} is binary data, not text")
        # Decoding and parsing 2 MB of HTML takes about a second: not on the event loop.
        title, text = await asyncio.to_thread(lambda: _readable(kind, _decode(data, resp.charset)))
        lines = [f"URL: {resp.url}"]
        if title:
            lines.append(f"Title: {title}")
        if cut:
            lines.append(
                f"[download stopped at {self.download_cap_bytes} bytes; the rest was not fetched]"
            )
        header = "\n".join(lines)
        if len(text) > self.output_cap_chars:
            omitted = len(text) - self.output_cap_chars
            text = (
                text[: self.output_cap_chars]
                + f"\n[... truncated: {omitted} more characters not shown ...]"
            )
        return f"{header}\n\n{text}" if text else f"{header}\n\n(no text content)"
