"""`_native.pyi` describes the extension module as built: every public
name of the module has a stub and every stub names something real, for the
module and for each class's methods and properties."""

import ast
import inspect
import sys
from pathlib import Path

import pytest

from loaderx import _native

STUB = Path(_native.__file__).resolve().parent / "_native.pyi"
if not STUB.exists():  # an editable build keeps the stub beside the sources
    STUB = Path(__file__).resolve().parents[1] / "loaderx" / "_native.pyi"


def stub_tree():
    return ast.parse(STUB.read_text(), str(STUB))


def stub_names() -> dict[str, set[str] | None]:
    """Module-level names of the stub; a class maps to its member names."""
    out: dict[str, set[str] | None] = {}
    for node in stub_tree().body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            out[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None
    return out


def public(names) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def test_module_names_match_the_stub():
    module = public(dir(_native))
    stubbed = public(stub_names())
    assert module - stubbed == set(), "in the module but not in _native.pyi"
    assert stubbed - module == set(), "in _native.pyi but not in the module"


@pytest.mark.parametrize(
    "cls", sorted(n for n, m in stub_names().items() if m is not None and hasattr(_native, n))
)
def test_class_members_match_the_stub(cls):
    real = getattr(_native, cls)
    if issubclass(real, BaseException):
        return  # exception classes carry only what OSError has
    stubbed = {n for n in stub_names()[cls] if not n.startswith("_") or n in vars(real)}
    members = public(vars(real))
    assert public(stubbed) - members == set(), f"{cls}: stubbed but missing"
    assert members - public(stubbed) == set(), f"{cls}: present but not stubbed"


def test_the_stub_check_sees_a_missing_name(tmp_path, monkeypatch):
    broken = tmp_path / "_native.pyi"
    broken.write_text(STUB.read_text().replace("def train_dict(", "def renamed_train_dict("))
    monkeypatch.setattr(sys.modules[__name__], "STUB", broken)
    with pytest.raises(AssertionError):
        test_module_names_match_the_stub()


def stub_signatures() -> dict[str, list[str]]:
    """Parameter names of every stubbed function and static method
    (``Class.name`` for methods; ``self`` left out)."""
    out = {}

    def params(fn):
        args = fn.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        return [n for n in names if n != "self"]

    for node in stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = params(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if item.__class__ is not ast.FunctionDef or item.name == "__init__":
                    continue  # a class's constructor signature is the class's own
                if not item.decorator_list:
                    out[f"{node.name}.{item.name}"] = params(item)
                elif isinstance(item, ast.FunctionDef) and any(
                    isinstance(d, ast.Name) and d.id == "staticmethod" for d in item.decorator_list
                ):
                    out[f"{node.name}.{item.name}"] = params(item)
            init = next(
                (i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"),
                None,
            )
            if init is not None:
                out[node.name] = params(init)
    return out


def real_parameters(qualname: str) -> list[str] | None:
    obj = _native
    for part in qualname.split("."):
        obj = getattr(obj, part)
    text = getattr(obj, "__text_signature__", None)
    if not text:
        return None
    sig = inspect.signature(obj) if callable(obj) else None
    return [n for n in sig.parameters if n not in ("self", "$self")] if sig else None


@pytest.mark.parametrize("qualname", sorted(stub_signatures()))
def test_signatures_match_the_stub(qualname):
    real = real_parameters(qualname)
    if real is None:
        # pyo3 gives every function, method and constructor a text signature;
        # only dunder slots (__len__, ...) lack one.
        assert qualname.rsplit(".", 1)[-1].startswith("__"), f"{qualname} has no signature"
        return
    assert stub_signatures()[qualname] == real
