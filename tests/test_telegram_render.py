"""Markdown -> Telegram HTML, and cutting long answers into messages Telegram accepts."""

from __future__ import annotations

from pingu.channels.telegram.render import (
    MESSAGE_LIMIT,
    render_html,
    split_markdown,
    utf16_len,
    visible_text,
)


def test_inline_formatting_becomes_telegram_tags() -> None:
    html = render_html(
        "Say **bold**, *italic*, _also italic_, ~~gone~~, `a < b` and [docs](https://x.org/?a=1&b=2)"
    )
    assert html == (
        "Say <b>bold</b>, <i>italic</i>, <i>also italic</i>, <s>gone</s>, "
        '<code>a &lt; b</code> and <a href="https://x.org/?a=1&amp;b=2">docs</a>'
    )


def test_everything_else_is_escaped_text() -> None:
    source = "if a<b && c>d: snake_case_name 2*3*4 <script>"
    html = render_html(source)
    assert "<script>" not in html
    assert visible_text(html) == source


def test_code_block_keeps_its_language_and_its_content_verbatim() -> None:
    html = render_html("Look:\n```python\nif x < 1 and **y**:\n    pass\n```\ndone")
    assert html == (
        'Look:\n<pre><code class="language-python">if x &lt; 1 and **y**:\n    pass'
        "</code></pre>\ndone"
    )


def test_headings_become_bold_and_lists_stay_text() -> None:
    html = render_html("## Plan\n- first *step*\n1. second")
    assert html == "<b>Plan</b>\n- first <i>step</i>\n1. second"


def test_unsafe_link_targets_stay_text() -> None:
    assert render_html("[x](javascript:alert(1))") == "[x](javascript:alert(1))"


def test_unclosed_fence_while_streaming_is_still_a_complete_block() -> None:
    assert render_html("```sh\nls -la") == '<pre><code class="language-sh">ls -la</code></pre>'


def test_short_text_is_one_chunk() -> None:
    assert split_markdown("hello\n\nworld") == ["hello\n\nworld"]
    assert split_markdown("  \n") == []


def test_long_text_splits_at_paragraphs_below_the_limit() -> None:
    paragraphs = [f"Paragraph {n}. " + "word " * 150 for n in range(40)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    chunks = split_markdown(text)
    assert len(chunks) > 1
    assert all(utf16_len(c) <= MESSAGE_LIMIT for c in chunks)
    # Nothing lost, nothing cut mid-paragraph.
    assert "\n\n".join(chunks) == text
    assert all(c.startswith("Paragraph") for c in chunks)


def test_lines_and_words_are_used_when_a_paragraph_is_too_long() -> None:
    line = "x" * 3000
    chunks = split_markdown("\n".join([line] * 3))
    assert chunks == [line] * 3
    words = " ".join(["word"] * 2000)
    chunks = split_markdown(words)
    assert all(utf16_len(c) <= MESSAGE_LIMIT for c in chunks)
    assert " ".join(chunks) == words


def test_never_cuts_inside_a_code_block() -> None:
    code = "```python\n" + "\n".join(f"print({n})" for n in range(200)) + "\n```"
    text = "Intro " * 600 + "\n\n" + code + "\n\nOutro."
    chunks = split_markdown(text)
    assert all(utf16_len(c) <= MESSAGE_LIMIT for c in chunks)
    code_chunks = [c for c in chunks if "```" in c]
    assert len(code_chunks) == 1 and code in code_chunks[0]


def test_a_huge_code_block_becomes_several_complete_blocks() -> None:
    body = [f"line {n:05d} " + "=" * 40 for n in range(400)]
    text = "```js\n" + "\n".join(body) + "\n```"
    chunks = split_markdown(text)
    assert len(chunks) > 1
    for chunk in chunks:
        assert utf16_len(chunk) <= MESSAGE_LIMIT
        assert chunk.startswith("```js\n") and chunk.endswith("\n```")
        html = render_html(chunk)
        assert html.startswith('<pre><code class="language-js">')
        assert utf16_len(visible_text(html)) <= MESSAGE_LIMIT
    recovered = [line for c in chunks for line in c.split("\n")[1:-1]]
    assert recovered == body


def test_limit_counts_utf16_units_and_never_splits_a_surrogate_pair() -> None:
    emoji = "😀" * 3000  # 2 UTF-16 units each
    chunks = split_markdown(emoji)
    assert "".join(chunks) == emoji
    assert all(utf16_len(c) <= MESSAGE_LIMIT for c in chunks)
    assert len(chunks) == 2
