"""A gate's context as a page shows it: the markdown a stage wrote (ctx.ask's details=, a
Confirm's description=), rendered by Python-Markdown and then sanitised by nh3 against an
allow-list, so whatever the text held (an email being answered, HTML, a script) reaches the
page as formatting only. Raw HTML in the text is not trusted: what the allow-list does not
name is removed (a script or style with its content, any other tag keeping its text)."""

from __future__ import annotations

import re

import markdown
import nh3

MAX_CHARS = 20_000
TAGS = {
    "p", "br", "hr", "em", "strong", "b", "i", "del", "code", "pre", "kbd", "blockquote",
    "ul", "ol", "li", "a", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ATTRIBUTES = {"a": {"href", "title"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}
# The question is the page's heading: the context's own headings sit below the page's.
_TOP_HEADING = re.compile(r"<(/?)h[12]\b", re.IGNORECASE)


def render(text: str) -> str:
    """Sanitised HTML for `text` (markdown), safe to put in a page as it is."""
    html = markdown.markdown(
        text[:MAX_CHARS], extensions=["fenced_code", "tables", "sane_lists"], output_format="html"
    )
    html = _TOP_HEADING.sub(r"<\1h3", html)
    return nh3.clean(
        html,
        tags=TAGS,
        clean_content_tags={"script", "style"},
        attributes=ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
