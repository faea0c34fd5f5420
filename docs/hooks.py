"""MkDocs hook of the docs site (mkdocs.yml's ``hooks``; not a page: ``exclude_docs`` skips it).

The docstrings cross-reference in Sphinx's roles (:class:`Message`, :meth:`push`,
:mod:`dynoqueue.core`), which Markdown renders as ``:class:`` followed by the name in code.
This turns each such role into the name alone, linked through mkdocs-autorefs when the site
documents it: a dotted name as written (``~`` dropped), a bare public name of ``dynoqueue``
(``Message``) as ``dynoqueue.Message``; a name the site does not document stays plain code.
"""

from __future__ import annotations

import re
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


def on_page_content(html: str, **kwargs: Any) -> str:
    """Rewrite the Sphinx roles of a rendered page (after mkdocstrings, before autorefs)."""
    return _ROLE.sub(_autoref, html)
