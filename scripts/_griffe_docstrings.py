"""A griffe extension for the docs site (mkdocs.yml): docstrings as Markdown.

loaderx's docstrings are written for Sphinx-style readers. Two things in
them read wrongly as Markdown, and this fixes both before mkdocstrings
renders a docstring (the rendered site only; the sources are untouched):

* bare ``>>>`` examples, which Markdown reads as prose (``t["x"][[3, 1]]``
  even looks like a reference link): each block, from its first ``>>>``
  line to the next blank line, is wrapped in a ``pycon`` code fence, and
  its ``# doctest: +SKIP`` flags are dropped;
* a first paragraph written over several lines, whose first line alone
  would be the summary in the reference's tables: it is joined into one;
* roles such as ``:func:`open_table``` or ``:class:`Corrupted```: each
  becomes a link to the object's entry in the API reference where there is
  one, and a plain code span otherwise. The links are optional references
  (autorefs' ``optional``), so a role naming something the reference does
  not show never fails the strict build.
"""

from __future__ import annotations

import html
import re

import griffe

#: The modules that have an API reference page (docs/reference/).
PUBLIC = (
    "zrecord",
    "zsampler",
    "dataloader",
    "table",
    "arrow",
    "parquet",
    "polars",
    "pandas",
    "datafusion",
    "ray",
    "utils",
)
DOCTEST_FLAG = re.compile(r"\s*#\s*doctest:.*$")
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):`~?([^`]+)`")


def reference_ids(pkg: griffe.Module) -> set[str]:
    """The paths of the objects the reference pages document."""
    ids = {pkg.path, f"{pkg.path}.sql"}
    for name in PUBLIC:
        mod = pkg.members.get(name)
        if mod is None:
            continue
        ids.add(mod.path)
        exports = getattr(mod, "exports", None)
        for mname, member in mod.members.items():
            if mname.startswith("_") or (exports is not None and mname not in exports):
                continue
            ids.add(f"{mod.path}.{mname}")
            try:
                kids = member.all_members if member.is_class else {}
            except Exception:  # an alias to something outside the package
                kids = {}
            ids.update(f"{mod.path}.{mname}.{k}" for k in kids if not k.startswith("_"))
    return ids


def resolve(target: str, obj, ids: set[str]) -> str | None:
    """The reference id a role's target means, seen from ``obj``'s docstring."""
    target = target.strip().removesuffix("()")
    module = obj.path if obj.is_module else obj.module.path
    candidates = [target, f"{module}.{target}"]
    if obj.is_class:
        candidates.append(f"{obj.path}.{target}")
    if obj.parent is not None and obj.parent.is_class:
        candidates.append(f"{obj.parent.path}.{target}")
    for c in candidates:
        if c in ids:
            return c
    tail = target.split(".", 1)[1] if target.startswith("loaderx.") else target
    hits = [i for i in ids if i.endswith("." + tail)]
    return hits[0] if len(hits) == 1 else None


def fence(text: str, obj=None, ids: set[str] = frozenset()) -> str:
    def role(match: re.Match) -> str:
        target = match.group(1)
        ident = resolve(target, obj, ids) if obj is not None else None
        code = f"<code>{html.escape(target)}</code>"
        if ident is None:
            return f"`{target}`"
        return f'<autoref identifier="{ident}" optional>{code}</autoref>'

    text = ROLE.sub(role, text)
    first, sep, rest = text.partition("\n\n")
    if ">>>" not in first and not first.lstrip().startswith(("*", "-", "|", "`")):
        text = " ".join(line.strip() for line in first.split("\n")) + sep + rest
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
        ids = reference_ids(pkg)
        seen: set[int] = set()

        def visit(obj) -> None:
            if id(obj) in seen or obj.is_alias:
                return
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = fence(obj.docstring.value, obj, ids)
            for member in obj.members.values():
                visit(member)

        visit(pkg)
