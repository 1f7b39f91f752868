"""The one exception tree: every exception and warning class is defined in ``errors.py``.

The classes are found with ``ast`` over the whole package (nothing is imported to find them): a
class is an exception when one of its bases is a builtin exception or warning, or a class already
found to be one (followed to a fixed point, so a subclass of a subclass counts). Every one must be
defined in ``errors.py``, drawn in its docstring's tree, derive from ``OfflinePrelearnerError``
unless the docstring places it "outside the root" (and says why), and survive a pickle round trip
with its fields, as Ray ships it.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import pickle
import signal
from pathlib import Path

import numpy as np
import pytest

import offline_prelearner
from offline_prelearner import errors

ROOT = Path(offline_prelearner.__file__).resolve().parent
ERRORS = ROOT / "errors.py"
_BUILTIN = {
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}
_OUTSIDE = "Outside the root, on purpose:"


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # errors.DataError, pa.ArrowException
        return node.attr
    return None


def exception_classes(sources: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """Exception class name -> where each definition stands (file, line), over ``sources``
    (file name -> Python source)."""
    defined = []
    for file, text in sources.items():
        for node in ast.walk(ast.parse(text, file)):
            if isinstance(node, ast.ClassDef):
                bases = {_base_name(b) for b in node.bases} - {None}
                defined.append((node.name, bases, file, node.lineno))
    known = set(_BUILTIN)
    found: dict[str, list[tuple[str, int]]] = {}
    grew = True
    while grew:
        grew = False
        for name, bases, file, line in defined:
            if bases & known and (file, line) not in found.get(name, []):
                found.setdefault(name, []).append((file, line))
                grew = grew or name not in known
                known.add(name)
    return found


def _package_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.rglob("*.py"))}


def test_the_scan_finds_exception_classes_through_their_bases() -> None:
    sources = {
        "a.py": "class A(ValueError): ...\nclass W(UserWarning): ...\nclass Plain: ...\n",
        "b.py": "from a import A\nclass B(A): ...\nclass C(mod.B): ...\nclass D(Plain): ...\n",
        "c.py": "def f():\n    class Local(KeyboardInterrupt): ...\n",
    }
    found = exception_classes(sources)
    assert found == {
        "A": [("a.py", 1)],
        "W": [("a.py", 2)],
        "B": [("b.py", 2)],
        "C": [("b.py", 3)],
        "Local": [("c.py", 2)],
    }


def test_every_exception_class_is_defined_in_errors_py() -> None:
    found = exception_classes(_package_sources())
    assert len(found) >= 20  # the scan sees the package (20 classes when this was written)
    bad = [
        f"{file}:{line}: class {name}"
        for name, places in sorted(found.items())
        for file, line in places
        if file != "errors.py"
    ]
    assert not bad, "exception classes defined outside errors.py:\n" + "\n".join(bad)


def _classes_of_errors() -> dict[str, type[BaseException]]:
    return {
        name: obj
        for name, obj in vars(errors).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == errors.__name__
    }


def _first_words(lines: list[str]) -> set[str]:
    return {line.strip().lstrip("├└│─ ").split()[0] for line in lines if line.strip()}


def test_the_docstring_draws_every_class_and_says_which_stand_outside_the_root() -> None:
    doc = errors.__doc__ or ""
    assert _OUTSIDE in doc
    tree, outside = doc.split("::\n", 1)[1].split(_OUTSIDE, 1)
    drawn = _first_words(tree.splitlines())
    # One line per class at the block's indent; the lines saying why are indented further.
    entries = outside.split("\n\n", 1)[0].splitlines()
    listed_outside = _first_words([line for line in entries if line[4:5].strip()])
    classes = _classes_of_errors()
    assert set(drawn) | listed_outside == set(classes), "the tree and the classes differ"
    for name, cls in classes.items():
        if name in listed_outside:
            assert not issubclass(cls, errors.OfflinePrelearnerError), name
        else:
            assert issubclass(cls, errors.OfflinePrelearnerError), f"{name} is outside the root"
    assert listed_outside == {
        "Interrupted",
        "ContractError",
        "Fallback",
        "_Bad",
        "OddDataWarning",
        "CommittedWarning",
        "StaleIndexWarning",
    }


def _instances() -> list[BaseException]:
    where = errors.Where(file="f.parquet", column="obs", episode_id="e1", row=3)
    made: list[BaseException] = [
        errors.ColumnValueError("ragged", where, reason="ragged", rows=np.array([3, 5])),
        errors.RateLimitExceeded("too fast", allowed=7, missing=11),
        errors.Interrupted(signal.SIGTERM),
        errors.Fallback("episode-9"),
        errors._Bad("null value", "null_value", np.array([1, 2])),
    ]
    for cls in _classes_of_errors().values():
        if cls in (errors.RateLimitExceeded, errors.Interrupted):
            continue
        if issubclass(cls, errors.DataError):
            made.append(cls("bad data", where, reason="why"))
        elif cls not in (errors.Fallback, errors._Bad):
            made.append(cls("message"))
    return made


@pytest.mark.parametrize("error", _instances(), ids=lambda e: type(e).__name__)
def test_every_exception_pickles_with_its_fields(error: BaseException) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    for key, value in vars(error).items():
        if key != "rows":
            assert getattr(back, key) == value, key
    if isinstance(error, errors._Bad):
        assert np.array_equal(back.rows, error.rows)
    if isinstance(error, errors.ColumnValueError):
        assert back.rows is None  # documented: rows are used where the error is raised


def test_a_units_error_comes_back_as_the_same_class() -> None:
    where = errors.Where(file="f.parquet", row=2)
    for cls in errors._ALL:
        error = cls("bad", where) if issubclass(cls, errors.DataError) else cls("bad")
        back = errors.error_from_dict(errors.error_to_dict(error))
        assert type(back) is cls and str(back) == str(error)
    # Rebuilt from a message they could not be: these come back as the root class.
    cannot = (
        errors.StorageError("s3://b/k: denied"),
        errors.RateLimitExceeded("x", allowed=0, missing=1),
    )
    for error in cannot:
        back = errors.error_from_dict(errors.error_to_dict(error))
        assert type(back) is errors.OfflinePrelearnerError and str(back) == str(error)
