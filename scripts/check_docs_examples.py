"""Runs the Python examples of the docs against the built extension.

    python scripts/check_docs_examples.py          (after scripts/test.sh or maturin develop)

Each page's ```python blocks run as one script, in a scratch directory: the
user guide pages in their nav order in one directory (a later page reads the
tables an earlier one wrote), README.md and docs/index.md each in a fresh
one. A block that moves data to CUDA is left out. Exits non-zero if any page
fails, printing its error.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
GUIDE = [
    "stores",
    "tables",
    "loader",
    "arrow",
    "sql-parquet",
    "processes-threads",
    "free-threaded",
    "ray",
]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def run(page: pathlib.Path, cwd: str) -> bool:
    blocks = [b for b in BLOCK.findall(page.read_text()) if "cuda" not in b]
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)], cwd=cwd, capture_output=True, text=True
    )
    name = page.relative_to(ROOT)
    if proc.returncode:
        print(f"{name}: FAILED\n{proc.stderr[-3000:]}")
        return False
    print(f"{name}: ok ({len(blocks)} blocks)")
    return True


def main() -> int:
    ok = True
    with tempfile.TemporaryDirectory() as guide_dir:
        for name in GUIDE:
            ok &= run(ROOT / "docs" / "guide" / f"{name}.md", guide_dir)
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        with tempfile.TemporaryDirectory() as d:
            ok &= run(page, d)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
