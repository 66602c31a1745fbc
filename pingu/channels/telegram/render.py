"""The model's Markdown as Telegram HTML, cut into messages Telegram accepts.

Telegram's HTML mode knows only a few tags (b, i, s, code, pre, a) and rejects anything
unbalanced, so this renders a small, predictable subset of Markdown and escapes the rest.
Splitting works on the Markdown source, before rendering: a chunk's source is never
shorter than its visible text, so a chunk whose source fits the limit fits in either
form (HTML or the plain-text fallback), and every chunk is a complete piece of Markdown
(a code block is never cut open).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

# Telegram's limit for one message's text, in UTF-16 code units after entity parsing.
MESSAGE_LIMIT = 4096

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)[^\n]*$")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")

# One alternation, tried left to right at each position; the first match wins.
_INLINE = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<code_text>.+?)(?P=ticks))"
    r"|(?P<link>\[(?P<link_text>[^\]\n]+)\]\((?P<url>[^)\s]+)\))"
    r"|(?P<bold>\*\*(?=\S)(?P<bold_text>.+?)(?<=\S)\*\*|__(?=\S)(?P<bold_text2>.+?)(?<=\S)__)"
    r"|(?P<strike>~~(?=\S)(?P<strike_text>.+?)(?<=\S)~~)"
    r"|(?P<italic>(?<![\w*])\*(?=[^\s*])(?P<italic_text>.+?)(?<=[^\s*])\*(?![\w*])"
    r"|(?<![\w_])_(?=[^\s_])(?P<italic_text2>.+?)(?<=[^\s_])_(?![\w_]))"
)
_SAFE_URL = re.compile(r"^(https?|tg|mailto):", re.IGNORECASE)


def utf16_len(text: str) -> int:
    """Length as Telegram counts it."""
    return len(text.encode("utf-16-le")) // 2


# ---------------------------------------------------------------- rendering


def render_inline(text: str) -> str:
    out: list[str] = []
    pos = 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[pos : match.start()], quote=False))
        pos = match.end()
        if match["code"]:
            out.append(f"<code>{html.escape(match['code_text'].strip(), quote=False)}</code>")
        elif match["link"]:
            url = match["url"]
            label = render_inline(match["link_text"])
            if _SAFE_URL.match(url):
                out.append(f'<a href="{html.escape(url, quote=True)}">{label}</a>')
            else:
                out.append(html.escape(match[0], quote=False))
        elif match["bold"]:
            out.append(f"<b>{render_inline(match['bold_text'] or match['bold_text2'])}</b>")
        elif match["strike"]:
            out.append(f"<s>{render_inline(match['strike_text'])}</s>")
        else:
            out.append(f"<i>{render_inline(match['italic_text'] or match['italic_text2'])}</i>")
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


def render_html(markdown: str) -> str:
    """Telegram HTML for a piece of Markdown. An unclosed code fence (a streaming answer
    cut mid-block) runs to the end of the text."""
    out: list[str] = []
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            marker, lang = fence.group(1), fence.group(2)
            body: list[str] = []
            i += 1
            while i < len(lines) and not _closes(lines[i], marker):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or past the end)
            code = html.escape("\n".join(body), quote=False)
            if lang:
                cls = html.escape(lang, quote=True)
                out.append(f'<pre><code class="language-{cls}">{code}</code></pre>')
            else:
                out.append(f"<pre>{code}</pre>")
            continue
        heading = _HEADING.match(line)
        if heading:
            out.append(f"<b>{render_inline(heading.group(1))}</b>")
        else:
            out.append(render_inline(line))
        i += 1
    return "\n".join(out)


def _closes(line: str, marker: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(marker[0] * len(marker)) and set(stripped) == {marker[0]}


# ---------------------------------------------------------------- splitting


@dataclass(frozen=True)
class _Piece:
    sep: str  # what joins this piece to the previous one when both are in one chunk
    text: str


def split_markdown(markdown: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Cut Markdown into chunks of at most `limit` UTF-16 units: between paragraphs if
    possible, else between lines, else between words; never inside a code block (a code
    block longer than the limit becomes several complete code blocks)."""
    text = markdown.strip("\n")
    if not text.strip():
        return []
    if utf16_len(text) <= limit:
        return [text]
    pieces: list[_Piece] = []
    for sep, block, is_code in _blocks(text):
        if utf16_len(block) <= limit:
            pieces.append(_Piece(sep, block))
        elif is_code:
            pieces.extend(_split_code(sep, block, limit))
        else:
            pieces.extend(_split_paragraph(sep, block, limit))
    return _pack(pieces, limit)


def _blocks(text: str) -> list[tuple[str, str, bool]]:
    """(separator before it, block text, is a code block) in order. Paragraphs are runs
    of non-blank lines; a code block is its fences and everything between."""
    blocks: list[tuple[str, str, bool]] = []
    lines = text.split("\n")
    sep = ""
    current: list[str] = []

    def flush_paragraph() -> None:
        nonlocal sep
        if current:
            blocks.append((sep, "\n".join(current), False))
            current.clear()
            sep = "\n"

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush_paragraph()
            start = i
            i += 1
            while i < len(lines) and not _closes(lines[i], fence.group(1)):
                i += 1
            block_lines = lines[start : i + 1]
            if i >= len(lines):  # unclosed: close it so every chunk stays complete
                block_lines.append(fence.group(1))
            blocks.append((sep, "\n".join(block_lines), True))
            sep = "\n"
            i += 1
            continue
        if line.strip():
            current.append(line)
        else:
            flush_paragraph()
            sep += "\n"
        i += 1
    flush_paragraph()
    return blocks


def _split_paragraph(sep: str, block: str, limit: int) -> list[_Piece]:
    pieces: list[_Piece] = []
    for n, line in enumerate(block.split("\n")):
        line_sep = sep if n == 0 else "\n"
        if utf16_len(line) <= limit:
            pieces.append(_Piece(line_sep, line))
            continue
        for m, part in enumerate(_split_words(line, limit)):
            pieces.append(_Piece(line_sep if m == 0 else " ", part))
    return pieces


def _split_words(line: str, limit: int) -> list[str]:
    parts: list[str] = []
    current = ""
    for word in line.split(" "):
        candidate = f"{current} {word}" if current else word
        if utf16_len(candidate) <= limit:
            current = candidate
            continue
        if current:
            parts.append(current)
        while utf16_len(word) > limit:
            head = _cut(word, limit)
            parts.append(head)
            word = word[len(head) :]
        current = word
    if current:
        parts.append(current)
    return parts


def _cut(text: str, limit: int) -> str:
    """The longest prefix of `text` that fits `limit` UTF-16 units (whole code points)."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return text[:index]
    return text


def _split_code(sep: str, block: str, limit: int) -> list[_Piece]:
    lines = block.split("\n")
    opening, closing, body = lines[0], lines[-1], lines[1:-1]
    overhead = utf16_len(opening) + utf16_len(closing) + 2
    room = max(limit - overhead, 1)
    # Lines longer than the room are cut (a code line can't be wrapped at words).
    flat: list[str] = []
    for line in body:
        while utf16_len(line) > room:
            head = _cut(line, room)
            flat.append(head)
            line = line[len(head) :]
        flat.append(line)
    pieces: list[_Piece] = []
    group: list[str] = []
    size = 0
    for line in flat:
        added = utf16_len(line) + (1 if group else 0)
        if group and size + added > room:
            pieces.append(_Piece(sep if not pieces else "\n", _fenced(opening, group, closing)))
            group, size = [], 0
            added = utf16_len(line)
        group.append(line)
        size += added
    if group or not pieces:
        pieces.append(_Piece(sep if not pieces else "\n", _fenced(opening, group, closing)))
    return pieces


def _fenced(opening: str, body: list[str], closing: str) -> str:
    return "\n".join([opening, *body, closing])


def _pack(pieces: list[_Piece], limit: int) -> list[str]:
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if not current:
            current = piece.text
            continue
        candidate = current + piece.sep + piece.text
        if utf16_len(candidate) <= limit:
            current = candidate
        else:
            chunks.append(current)
            current = piece.text
    if current:
        chunks.append(current)
    return [chunk for chunk in (c.strip("\n") for c in chunks) if chunk.strip()]


def visible_text(telegram_html: str) -> str:
    """The text a user sees for some Telegram HTML (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", telegram_html))
