"""The docs' example check (scripts/check_docs_examples.py) runs every user
guide page that has Python examples, and the README and
docs/index.md link every guide page."""

import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def check_script():
    spec = importlib.util.spec_from_file_location(
        "check_docs_examples", ROOT / "scripts" / "check_docs_examples.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_guide_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    return re.findall(r"guide/([a-z-]+)\.md", text)


def test_the_example_check_runs_every_guide_page_with_examples():
    guide = check_script().GUIDE
    with_examples = [
        name
        for name in nav_guide_pages()
        if "```python" in (ROOT / "docs" / "guide" / f"{name}.md").read_text()
    ]
    assert sorted(guide) == sorted(with_examples)
    assert len(set(guide)) == len(guide)
    assert "image-captions" in guide


def test_readme_and_index_link_every_guide_page():
    pages = sorted(p.stem for p in (ROOT / "docs" / "guide").glob("*.md"))
    assert sorted(nav_guide_pages()) == pages
    readme = (ROOT / "README.md").read_text()
    index = (ROOT / "docs" / "index.md").read_text()
    for name in pages:
        assert f"(docs/guide/{name}.md" in readme, name
        assert f"(guide/{name}.md" in index, name
