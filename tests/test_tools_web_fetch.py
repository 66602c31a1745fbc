"""The web_fetch tool against a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from pingu.tools.base import ToolContext
from pingu.tools.html_text import html_to_text
from pingu.tools.registry import ToolOutcome, build_tools, run_tool
from pingu.tools.web_fetch import WebFetchTool

PAGE = """<!DOCTYPE html>
<html><head>
  <title>  Penguin   Facts </title>
  <style>body { color: red }</style>
  <script>var tracking = "do not show";</script>
</head>
<body>
  <nav><a href="/">Home</a></nav>
  <h1>Emperor penguins</h1>
  <p>They are the   tallest
     penguins &amp; live in <a href="/antarctica">Antarctica</a>.</p>
  <noscript>Enable JavaScript</noscript>
  <h2>Diet</h2>
  <ul><li>fish</li><li>krill</li></ul>
  <p>Line one<br>Line two</p>
  <pre>  indented
    code</pre>
  <script>alert("hidden")</script>
</body></html>
"""


async def _noop_emit(event: object) -> None:
    return None


def ctx(timeout_s: float = 30.0) -> ToolContext:
    return ToolContext("s1", "main", Path("/nonexistent"), _noop_emit, None, timeout_s)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    release = asyncio.Event()

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def latin1(request: web.Request) -> web.Response:
        body = "<title>Caf\xe9</title><p>cr\xe8me br\xfbl\xe9e</p>".encode("latin-1")
        return web.Response(body=body, headers={"Content-Type": "text/html; charset=ISO-8859-1"})

    async def data(request: web.Request) -> web.Response:
        return web.json_response({"penguins": 18, "cold": True})

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        chunk = b"0123456789" * 10_000  # 100 KB
        try:
            for _ in range(50):  # 5 MB if anyone read it all
                await resp.write(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp

    async def image(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + b"\0" * 100, content_type="image/png")

    async def missing(request: web.Request) -> web.Response:
        return web.Response(
            status=404,
            text="<html><body><h1>Not here</h1><p>No penguins at this address.</p></body></html>",
            content_type="text/html",
        )

    async def slow(request: web.Request) -> web.Response:
        await asyncio.wait_for(release.wait(), timeout=30)
        return web.Response(text="too late")

    async def to_file(request: web.Request) -> web.Response:
        raise web.HTTPFound("file:///etc/passwd")

    async def to_page(request: web.Request) -> web.Response:
        raise web.HTTPFound("/page")

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    app = web.Application()
    app.add_routes(
        [
            web.get("/page", page),
            web.get("/latin1", latin1),
            web.get("/data", data),
            web.get("/big", big),
            web.get("/image.png", image),
            web.get("/missing", missing),
            web.get("/slow", slow),
            web.get("/to-file", to_file),
            web.get("/to-page", to_page),
            web.get("/loop", loop),
        ]
    )
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        release.set()
        await runner.cleanup()


async def fetch(
    url: str, *, tool: WebFetchTool | None = None, timeout_s: float = 30.0
) -> ToolOutcome:
    tools = {"web_fetch": tool} if tool else build_tools(["web_fetch"])
    return await run_tool(tools, "web_fetch", json.dumps({"url": url}), ctx(timeout_s))


async def test_html_becomes_readable_text(server: str) -> None:
    out = await fetch(f"{server}/page")
    assert out == ToolOutcome(
        f"URL: {server}/page\n"
        "Title: Penguin Facts\n"
        "\n"
        "Home\n"
        "# Emperor penguins\n"
        "They are the tallest penguins & live in Antarctica.\n"
        "## Diet\n"
        "- fish\n"
        "- krill\n"
        "Line one\n"
        "Line two\n"
        "  indented\n"
        "    code",
        False,
    )


async def test_charset_from_content_type(server: str) -> None:
    out = await fetch(f"{server}/latin1")
    assert out.output == f"URL: {server}/latin1\nTitle: Café\n\ncrème brûlée"


async def test_json_returned_as_is(server: str) -> None:
    out = await fetch(f"{server}/data")
    assert out == ToolOutcome(f'URL: {server}/data\n\n{{"penguins": 18, "cold": true}}', False)


async def test_download_and_output_caps(server: str) -> None:
    tool = WebFetchTool(download_cap_bytes=150_000, output_cap_chars=1_000)
    out = await fetch(f"{server}/big", tool=tool)
    assert not out.is_error
    assert "[download stopped at 150000 bytes; the rest was not fetched]" in out.output
    assert out.output.endswith("\n[... truncated: 149000 more characters not shown ...]")
    assert "0123456789" * 50 in out.output


async def test_default_output_cap(server: str) -> None:
    out = await fetch(f"{server}/big")
    assert "[download stopped at 2097152 bytes; the rest was not fetched]" in out.output
    assert "more characters not shown" in out.output
    assert len(out.output) < 21_000


async def test_binary_refused(server: str) -> None:
    out = await fetch(f"{server}/image.png")
    assert out == ToolOutcome(
        f"error: {server}/image.png is image/png, not text; it was not fetched", True
    )


async def test_404_reported_with_excerpt(server: str) -> None:
    out = await fetch(f"{server}/missing")
    assert out == ToolOutcome(
        f"error: HTTP 404 Not Found from {server}/missing\n"
        "# Not here\nNo penguins at this address.",
        True,
    )


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "example.com"]
)
async def test_non_http_scheme_refused(url: str) -> None:
    out = await fetch(url)
    assert out.is_error
    assert out.output.startswith("error: only http and https URLs can be fetched")


async def test_redirect_to_non_http_scheme_refused(server: str) -> None:
    out = await fetch(f"{server}/to-file")
    assert out == ToolOutcome(
        "error: only http and https URLs can be fetched; the redirect target "
        "file:///etc/passwd has scheme file",
        True,
    )


async def test_redirect_followed(server: str) -> None:
    out = await fetch(f"{server}/to-page")
    assert out.output.startswith(f"URL: {server}/page\nTitle: Penguin Facts\n")


async def test_redirect_loop_limited(server: str) -> None:
    out = await fetch(f"{server}/loop")
    assert out == ToolOutcome("error: too many redirects (more than 5)", True)


async def test_timeout(server: str) -> None:
    out = await fetch(f"{server}/slow", timeout_s=0.5)
    assert out == ToolOutcome(f"error: timed out after 0.5 s fetching {server}/slow", True)


async def test_connection_refused() -> None:
    out = await fetch("http://127.0.0.1:9/")
    assert out.is_error
    assert out.output.startswith("error: could not fetch http://127.0.0.1:9/: Cannot connect")


def test_html_to_text_edge_cases() -> None:
    title, text = html_to_text("<p>a<script>x</script>b</p><svg><text>no</text></svg><p>c</p>")
    assert (title, text) == ("", "ab\nc")
    title, text = html_to_text("<table><tr><td>1</td><td>2</td></tr><tr><td>3</td></tr></table>")
    assert text == "1 2\n3"
    # An unclosed head must not swallow the body.
    assert html_to_text("<html><head><title>T</title><body><p>body text")[1] == "body text"
