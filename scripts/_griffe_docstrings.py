"""A griffe extension for the docs site (mkdocs.yml): docstrings as Markdown.

loaderx's docstrings are written for Sphinx-style readers. Two things in
them read wrongly as Markdown, and this fixes both before mkdocstrings
renders a docstring (the rendered site only; the sources are untouched):

* bare ``>>>`` examples, which Markdown reads as prose (``t["x"][[3, 1]]``
  even looks like a reference link): each block, from its first ``>>>``
  line to the next blank line, is wrapped in a ``pycon`` code fence, and
  its ``# doctest: +SKIP`` flags are dropped;
* roles such as ``:func:`open_table``` or ``:class:`Corrupted```, which
  become plain code spans.
"""

from __future__ import annotations

import re

import griffe

DOCTEST_FLAG = re.compile(r"\s*#\s*doctest:.*$")
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):`~?([^`]+)`")


def fence(text: str) -> str:
    text = ROLE.sub(r"`\1`", text)
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(DOCTEST_FLAG.sub("", lines[i]))
                i += 1
            out.append(f"{indent}```pycon")
            out.extend(block)
            out.append(f"{indent}```")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class MarkdownDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        seen: set[int] = set()

        def visit(obj) -> None:
            if id(obj) in seen or obj.is_alias:
                return
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = fence(obj.docstring.value)
            for member in obj.members.values():
                visit(member)

        visit(pkg)
