"""HTML to readable plain text with the standard library's html.parser.

Good enough for a model to read a page: scripts and styles dropped, headings, paragraphs,
list items and table rows on their own lines, whitespace collapsed, the title first.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "iframe", "object"})
_BLOCK = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "nav", "aside",
        "blockquote", "ul", "ol", "dl", "dt", "dd", "table", "tr", "form", "fieldset",
        "figure", "figcaption", "address", "details", "summary", "hr", "body", "html",
        "h1", "h2", "h3", "h4", "h5", "h6", "li", "pre",
    }
)  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"})
_SPACES = re.compile(r"[ \t\r\n\f\v\u00a0]+")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title_parts: list[str] = []
        self.lines: list[str] = []
        self._current: list[str] = []
        self._skip_depth = 0
        self._skip_stack: list[str] = []
        self._in_title = False
        self._pre_depth = 0

    def _flush(self) -> None:
        text = "".join(self._current)
        self._current = []
        if self._pre_depth:
            for line in text.split("\n"):
                self.lines.append(line.rstrip())
            return
        text = _SPACES.sub(" ", text).strip()
        if text and text not in ("-", "#"):
            self.lines.append(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if tag in _SKIP and tag not in _VOID:
            self._skip_stack.append(tag)
            return
        if self._skip_stack:
            return
        if tag == "br":
            self._flush()
        elif tag in _BLOCK:
            self._flush()
            if tag in _HEADINGS:
                self._current.append("#" * _HEADINGS[tag] + " ")
            elif tag == "li":
                self._current.append("- ")
            elif tag == "pre":
                self._pre_depth += 1
        elif tag in ("td", "th"):
            self._current.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if self._skip_stack:
            if tag == self._skip_stack[-1]:
                self._skip_stack.pop()
            return
        if tag in _BLOCK:
            self._flush()
            if tag == "pre" and self._pre_depth:
                self._pre_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skip_stack:
            self._current.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def html_to_text(html: str) -> tuple[str, str]:
    """Return (title, text) of an HTML document."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    title = _SPACES.sub(" ", "".join(parser.title_parts)).strip()
    lines: list[str] = []
    for line in parser.lines:
        if line or (lines and lines[-1]):  # at most one blank line in a row (from <pre>)
            lines.append(line)
    return title, "\n".join(lines).strip("\n")
