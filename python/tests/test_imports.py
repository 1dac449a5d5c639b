"""The package's import graph: no module imports a sibling that imports it
back (counting imports inside functions), and every module imports alone."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import loaderx

PACKAGE = Path(loaderx.__file__).resolve().parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py"))


def sibling_imports(path: Path) -> set[str]:
    """The sibling modules ``path`` imports anywhere in its body."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import x
                out.update(alias.name for alias in node.names)
            elif node.level == 1:  # from .x import y
                out.add(node.module.split(".")[0])
            elif node.level == 0 and (node.module or "").startswith("loaderx."):
                out.add(node.module.split(".")[1])
            elif node.level == 0 and node.module == "loaderx":
                out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("loaderx."):
                    out.add(alias.name.split(".")[1])
    return out - {"__init__"}


def import_graph() -> dict[str, set[str]]:
    return {m: sibling_imports(PACKAGE / f"{m}.py") for m in MODULES}


def find_cycle(graph):
    """One import cycle as a list of modules, or None."""
    state: dict[str, str] = {}  # "open" while on the DFS path, then "done"
    path: list[str] = []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for dep in sorted(graph.get(m, ())):
            if state.get(dep) == "open":
                return path[path.index(dep) :] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_find_cycle_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_import_graph_is_acyclic():
    graph = import_graph()
    assert {"_native", "_streams"} <= graph["zrecord"]  # imports at module level
    assert "zrecord" in graph["cli"]  # and inside functions
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_checks_module_is_a_leaf():
    assert import_graph()["_streams"] <= {"_native"}


def test_no_module_imports_the_arrow_facade():
    graph = import_graph()
    assert [m for m in MODULES if "arrow" in graph[m]] == []


@pytest.mark.parametrize("module", [m for m in MODULES if m != "__main__"])
def test_module_imports_in_a_fresh_interpreter(module):
    paths = [str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    r = subprocess.run(
        [sys.executable, "-c", f"import loaderx.{module}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def run_fresh(code: str) -> subprocess.CompletedProcess:
    paths = [str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


OPTIONAL = ["pyarrow", "polars", "pandas", "ray", "datafusion", "duckdb", "matplotlib"]


def test_import_loaderx_loads_no_optional_package():
    r = run_fresh(f"import sys, loaderx\nprint([m for m in {OPTIONAL!r} if m in sys.modules])\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "name", ["arrow", "parquet", "polars", "pandas", "ray", "datafusion", "utils", "cli"]
)
def test_submodule_imports_on_first_access(name):
    r = run_fresh(
        "import sys, loaderx\n"
        f"assert 'loaderx.{name}' not in sys.modules\n"
        f"m = loaderx.{name}\n"
        f"assert m is sys.modules['loaderx.{name}'], m\n"
        f"assert {name!r} in dir(loaderx)\n"
    )
    assert r.returncode == 0, r.stderr


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loaderx.nope  # noqa: B018


@pytest.mark.parametrize(
    "blocked, call, message",
    [
        ("pyarrow", "loaderx.arrow.table({})", "this needs pyarrow, an optional dependency"),
        ("pandas", "loaderx.pandas.to_pandas({})", "this needs pandas, an optional dependency"),
        ("polars", "loaderx.polars.scan_table({})", "loaderx.polars needs polars, an optional"),
        ("datasets", "loaderx.hf.to_hf({})", "this needs Hugging Face datasets, an optional"),
        ("torch", "loaderx.torch.as_tensors({})", "loaderx.torch.as_tensors needs PyTorch"),
        ("ray", "loaderx.ray.read_table('t')", "this needs Ray Data, an optional dependency"),
    ],
)
def test_a_missing_optional_dependency_names_its_extra(blocked, call, message):
    extra = {"pyarrow": "arrow", "datasets": "hf"}.get(blocked, blocked)
    r = run_fresh(
        "import sys\n"
        f"sys.modules[{blocked!r}] = None  # as if not installed\n"
        "import loaderx\n"
        "try:\n"
        f"    {call}\n"
        "except ImportError as exc:\n"
        "    assert exc.__cause__ is not None\n"
        "    print(exc)\n"
    )
    assert r.returncode == 0, r.stderr
    assert message in r.stdout and f"pip install 'loaderx[{extra}]'" in r.stdout, r.stdout
