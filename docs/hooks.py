"""MkDocs hook of the docs site (mkdocs.yml's ``hooks``; not a page: ``exclude_docs`` skips it).

The docstrings cross-reference in Sphinx's roles (:class:`Message`, :meth:`push`,
:mod:`dynoqueue.core`), which Markdown renders as ``:class:`` followed by the name in code.
This turns each such role into the name alone, linked through mkdocs-autorefs when the site
documents it: a dotted name as written (``~`` dropped), a bare public name of ``dynoqueue``
(``Message``) as ``dynoqueue.Message``; a name the site does not document stays plain code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dynoqueue

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj|const):<code>(~?)([\w.]+)(\(\))?"
                   r"</code>")
_PUBLIC = set(dynoqueue.__all__)


def _autoref(match: re.Match[str]) -> str:
    short, name, call = match.group(1), match.group(2), match.group(3) or ""
    title = (name.rsplit(".", 1)[-1] if short else name) + call
    if "." in name:
        identifier = name.lstrip(".")
    elif name in _PUBLIC:
        identifier = f"dynoqueue.{name}"
    else:
        return f"<code>{title}</code>"
    return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'


#: A guide named in a docstring's text, ``docs/semantics.md``, with the section that may follow
#: it in quotes (``docs/semantics.md, "Changing a stored policy"``); not inside a link or path.
_GUIDE = re.compile(r'(?<![\w/.="\'-])docs/([a-z][a-z0-9-]*)\.md(?:, (["\u201c]|&quot;)'
                    r'([^"<\u201d&]{1,80})(?:["\u201d]|&quot;))?')
_DOCS = Path(__file__).resolve().parent


def _anchor(page: str, title: str) -> str:
    """``#slug`` of the heading ``title`` names in guide ``page`` (as the toc extension makes
    it), or "" when the page has no such heading."""
    title = " ".join(title.split())
    headings = re.findall(r"^#{1,6} (.+)$", (_DOCS / page).read_text(encoding="utf-8"), re.M)
    # The heading itself, or one that goes on after a colon ("Zone loss: every queue ...").
    found = next((h.strip() for h in headings
                  if h.strip() == title or h.strip().startswith(title + ":")), None)
    if found is None:
        return ""
    slug = re.sub(r"[^\w\s-]", "", found).strip().lower()
    return "#" + re.sub(r"[-\s]+", "-", slug)


def _guide_links(html: str, page_url: str) -> str:
    """Each ``docs/<guide>.md`` of the text of an API reference page as a link to that guide
    (and to the quoted section, when it names one of its headings)."""
    up = "../" * page_url.count("/")

    def link(match: re.Match[str]) -> str:
        name, title = match.group(1), match.group(3)
        if not (_DOCS / f"{name}.md").is_file():
            return match.group(0)
        anchor = _anchor(f"{name}.md", title) if title else ""
        return f'<a href="{up}{name}/{anchor}">docs/{name}.md</a>' + match.group(0)[
            len(f"docs/{name}.md"):]

    return _GUIDE.sub(link, html)


def on_page_content(html: str, **kwargs: Any) -> str:
    """Rewrite the Sphinx roles of a rendered page (after mkdocstrings, before autorefs), and
    on the API reference pages link the guides their docstrings name."""
    html = _ROLE.sub(_autoref, html)
    page = kwargs.get("page")
    url = getattr(page, "url", "") or ""
    if url.startswith("reference/"):
        html = _guide_links(html, url)
    return html
