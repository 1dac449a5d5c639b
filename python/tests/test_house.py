"""No import circles among the modules of src/, python/src, connectors/*/src,
python/loaderx and benches/: the `use`, `mod` and `crate::` paths of the
Rust files and the import lines of the Python files are read as text, and
any circle of files fails, naming it.

A module's references to its own ancestors (a `super::name` defined in the
parent's mod.rs, which re-exports its children) are not arrows: that is how
a Rust module tree is built. Test code (files named tests.rs, and what
follows a file's `#[cfg(test)]`) is left out."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUST_CRATES = [ROOT / "src", ROOT / "python" / "src"] + sorted(
    p / "src" for p in (ROOT / "connectors").iterdir() if (p / "src").is_dir()
)

_PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
_USE = re.compile(r"\buse\s+((?:crate|super|self)::[^;]*);", re.S)


def _strip(text: str) -> str:
    """Rust source without comments, strings and test code."""
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def _expand(tree: str) -> list[str]:
    """The paths of a `use` tree: `a::{b, c::{d}}` is `a::b`, `a::c::d`."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0]]
    prefix, inner = tree[:i], tree[i + 1 : tree.rindex("}")]
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(inner):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    out = []
    for p in parts:
        if p and p != "self":
            out += _expand(prefix + p)
        elif p == "self":
            out.append(prefix.rstrip(":"))
    return out


def _module_of(crate: Path, f: Path) -> list[str]:
    rel = f.relative_to(crate).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def _file_of(crate: Path, module: list[str]) -> Path | None:
    base = crate.joinpath(*module) if module else crate
    for cand in [base.with_suffix(".rs"), base / "mod.rs"] if module else [crate / "lib.rs"]:
        if cand.is_file():
            return cand
    return None


def _resolve(crate: Path, here: list[str], path: str) -> Path | None:
    """The file of the deepest module `path` names, from module `here`."""
    segs = path.split("::")
    head, rest = segs[0], segs[1:]
    if head == "crate":
        base: list[str] = []
    elif head == "self":
        base = list(here)
    else:
        base = list(here)
        while head == "super":
            base = base[:-1]
            head, rest = (rest[0], rest[1:]) if rest else ("", [])
        rest = ([head] if head else []) + rest
    found = _file_of(crate, base)
    module = list(base)
    for s in rest:
        f = _file_of(crate, module + [s])
        if f is None:
            break
        module.append(s)
        found = f
    return found


def rust_edges() -> dict[Path, set[Path]]:
    edges: dict[Path, set[Path]] = {}
    for crate in RUST_CRATES:
        for f in sorted(crate.rglob("*.rs")):
            if f.name == "tests.rs":
                continue
            here = _module_of(crate, f)
            # An inline module file (a.rs beside a/) is its own module.
            text = _strip(f.read_text())
            paths = [p for m in _USE.finditer(text) for p in _expand(m.group(1))]
            paths += [m.group(1) + m.group(2) for m in _PATH.finditer(text)]
            out = edges.setdefault(f, set())
            for p in paths:
                target = _resolve(crate, here, p)
                if target is None or target == f:
                    continue
                # A reference to an ancestor module (its mod.rs or lib.rs).
                tmod = _module_of(crate, target)
                if target.name in ("mod.rs", "lib.rs") and here[: len(tmod)] == tmod:
                    continue
                out.add(target)
    return edges


_PY_IMPORT = re.compile(
    r"^\s*(?:from\s+(\.*[\w.]*)\s+import\s+([\w, ()*]+)|import\s+([\w.]+))", re.M
)


def python_edges(folder: Path, package: str | None) -> dict[Path, set[Path]]:
    """Import arrows among the files of ``folder`` (a package named
    ``package``, or a flat folder of scripts when None)."""
    files = {f.stem: f for f in folder.glob("*.py")}
    edges: dict[Path, set[Path]] = {}
    for f in files.values():
        out = edges.setdefault(f, set())
        for m in _PY_IMPORT.finditer(f.read_text()):
            mod, names, plain = m.group(1), m.group(2), m.group(3)
            targets = []
            if plain:
                targets.append(plain.split(".")[0] if package is None else plain)
            elif mod is not None:
                if package is not None and mod.startswith("."):
                    base = mod.lstrip(".")
                    if base:
                        targets.append(base.split(".")[0])
                    else:
                        targets += [n.strip(" ()") for n in names.split(",")]
                elif package is not None and mod.startswith(package + "."):
                    targets.append(mod.split(".")[1])
                elif package is None:
                    targets.append(mod.split(".")[0])
            for t in targets:
                if package is not None and t.startswith(package + "."):
                    t = t.split(".")[1]
                g = files.get(t)
                if g is not None and g != f and g.stem != "__init__":
                    out.add(g)
    return edges


def circles(edges: dict[Path, set[Path]]) -> list[list[Path]]:
    """The strongly connected groups of more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on: set[Path] = set()
    out: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _names(groups) -> list[str]:
    return [" <-> ".join(str(p.relative_to(ROOT)) for p in g) for g in groups]


def test_no_import_circles_among_the_rust_modules():
    assert _names(circles(rust_edges())) == []


def test_no_import_circles_among_the_python_modules_and_benches():
    found = circles(python_edges(ROOT / "python" / "loaderx", "loaderx"))
    found += circles(python_edges(ROOT / "benches", None))
    assert _names(found) == []


def test_the_reader_sees_a_circle():
    """The reader finds a circle where there is one (so that the tests
    above can fail): two files of a made-up crate that use each other."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        crate = Path(tmp) / "src"
        (crate / "a").mkdir(parents=True)
        (crate / "lib.rs").write_text("mod a;\nmod b;\n")
        (crate / "a" / "mod.rs").write_text("mod x;\nmod y;\npub use x::X;\n")
        (crate / "a" / "x.rs").write_text("use super::{y::Y, Z};\npub struct X;\n")
        (crate / "a" / "y.rs").write_text("pub struct Y(crate::a::x::X);\n")
        (crate / "b.rs").write_text("use crate::a;\n")
        global RUST_CRATES
        saved = RUST_CRATES
        RUST_CRATES = [crate]
        try:
            found = circles(rust_edges())
        finally:
            RUST_CRATES = saved
        assert [[p.name for p in g] for g in found] == [["x.rs", "y.rs"]]
