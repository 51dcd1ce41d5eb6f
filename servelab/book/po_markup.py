"""Does a translation keep the markup of its English message? Both are parsed as MyST Markdown and compared.

Sphinx parses every msgstr again with the page's parser (MyST for pages and notebook cells), so a
translation that drops a backtick, renames a role's target, breaks a link or loses the closing `**`
of an emphasis (CommonMark's flanking rules bite next to CJK punctuation) renders wrongly, silently.
What must survive, as a multiset (a translation may reorder it): inline code, roles with their name
and target, link targets, inline math, inline HTML, substitutions, images, and the number of
emphasis and strong spans; and a one-paragraph message must stay one paragraph (a msgstr starting
with `- ` or `1. ` would turn into a list). The code domain (plot labels) is plain text: there only
`{placeholders}`, `%` formats and matplotlib's `$math$` must survive.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

from markdown_it import MarkdownIt

EXTENSIONS = {"colon_fence", "deflist", "dollarmath", "html_image", "linkify", "substitution"}  # _config.yml
PLACEHOLDER = re.compile(r"\{[^{}\s]*\}|%(?:\(\w+\))?[sdifr]|\$[^$]+\$")
ROLE_TARGET = re.compile(r"<([^<>]+)>\s*$")


@cache
def _parser() -> MarkdownIt:
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(MdParserConfig(enable_extensions=EXTENSIONS), RendererHTML)


def signature(text: str) -> Counter:
    """The markup in one message, as a multiset of (kind, value)."""
    found: Counter = Counter()
    blocks = [t.type for t in _parser().parse(text) if t.nesting == 1 or t.type in ("fence", "math_block")]
    found[("blocks", " ".join(blocks))] += 1
    for token in _parser().parseInline(text)[0].children or []:
        if token.type == "code_inline":
            found[("inline code", token.content)] += 1
        elif token.type == "myst_role":
            target = ROLE_TARGET.search(token.content)
            found[(f"role {{{token.meta['name']}}}", target.group(1) if target else token.content)] += 1
        elif token.type == "link_open":
            found[("link", token.attrs.get("href", ""))] += 1
        elif token.type in ("math_inline", "math_inline_double"):
            found[("math", token.content)] += 1
        elif token.type == "html_inline":
            found[("html", token.content)] += 1
        elif token.type == "substitution_inline":
            found[("substitution", token.content.strip())] += 1
        elif token.type == "image":
            found[("image", token.attrs.get("src", ""))] += 1
        elif token.type in ("em_open", "strong_open"):
            found[(token.type.removesuffix("_open"), "")] += 1
    return found


def has_words(text: str) -> bool:
    """Whether a message has anything to translate: letters outside its code, roles, math and markup."""
    plain = "".join(t.content for t in _parser().parseInline(text)[0].children or [] if t.type == "text")
    return bool(re.sub(r"[\W\d_]+", "", plain))


def placeholders(text: str) -> Counter:
    return Counter(PLACEHOLDER.findall(text))


def differences(msgid: str, msgstr: str, code: bool = False) -> list[str]:
    """What `msgstr` lost or gained against `msgid`: one line per difference, [] when the markup matches."""
    if code:
        want, got = placeholders(msgid), placeholders(msgstr)
    else:
        want, got = signature(msgid), signature(msgstr)
    lost, extra = want - got, got - want
    return ([f"lost {kind}{' ' + repr(value) if value else ''}" for kind, value in _pairs(lost)]
            + [f"added {kind}{' ' + repr(value) if value else ''}" for kind, value in _pairs(extra)])


def _pairs(counter: Counter) -> list[tuple[str, str]]:
    return [key if isinstance(key, tuple) else ("placeholder", key) for key in sorted(counter.elements(), key=str)]
