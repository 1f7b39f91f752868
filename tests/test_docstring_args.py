"""Every public function or method of the package names its parameters under ``Args:``.

Read from the source with ``ast`` (nothing is imported), over every module whose path has no
private part (``_version.py``, ``_helpers/``): each function or method whose name has no leading
underscore, of a public class or at module level, that takes parameters besides ``self`` / ``cls``
has a Google-style ``Args:`` section naming each of them (``*args`` / ``**kwargs`` as ``*args`` /
``**kwargs`` or ``args`` / ``kwargs``). A class's ``__init__`` counts too: its parameters are named
under the class docstring's ``Args:`` (or ``Attributes:``), or, where the class has neither, under
the ``__init__``'s own ``Args:``. Not counted: other dunder methods (``__call__`` keeps Python's
meaning), ``@overload`` stubs, property setters, and functions nested in functions.

A failure lists ``file:line: function: missing names``, one per line.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections import Counter
from pathlib import Path

import offline_prelearner

ROOT = Path(offline_prelearner.__file__).resolve().parent
_ENTRY = re.compile(r"^    \**([\w, ]+?)(?: \(.*?\))?:", re.M)

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def documented(doc: str | None, sections: tuple[str, ...] = ("Args:",)) -> set[str]:
    """Names listed (``name:``, ``name (type):``, ``*args:``) under any of ``sections``."""
    names: set[str] = set()
    for block in re.split(r"\n(?=\S)", inspect.cleandoc(doc or "")):
        head, _, body = block.partition("\n")
        if head.strip() in sections:
            for listed in _ENTRY.findall(body):
                names.update(n.strip() for n in listed.split(","))
    return names


def has_section(doc: str | None, sections: tuple[str, ...]) -> bool:
    """Whether the docstring has a line that is one of ``sections`` at its left margin."""
    lines = inspect.cleandoc(doc or "").splitlines()
    return any(line.rstrip() in sections for line in lines)


def _params(fn: Function, method: bool) -> list[str]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if method and names and names[0] in ("self", "cls") and not _is(fn, "staticmethod"):
        names = names[1:]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return names


def _decorators(fn: Function) -> list[str]:
    return [ast.unparse(d) for d in fn.decorator_list]


def _is(fn: Function, decorator: str) -> bool:
    return any(d == decorator or d.endswith("." + decorator) for d in _decorators(fn))


def _skipped(fn: Function) -> bool:
    return _is(fn, "overload") or any(d.endswith(".setter") for d in _decorators(fn))


def _missing_in(fn: Function, method: bool, names: set[str]) -> list[str]:
    # A parameter with a leading underscore is private (a framework's or an internal switch).
    params = [p for p in _params(fn, method) if not p.startswith("_")]
    return [p for p in params if p.lstrip("*") not in names]


def missing_args(tree: ast.Module) -> list[tuple[int, str, list[str]]]:
    """``(line, qualified name, missing parameters)`` for every public function of a module."""
    out: list[tuple[int, str, list[str]]] = []

    def function(fn: Function, qual: str, method: bool) -> None:
        if _private(fn.name) or fn.name.startswith("__") or _skipped(fn):
            return
        missing = _missing_in(fn, method, documented(ast.get_docstring(fn)))
        if missing:
            out.append((fn.lineno, qual + fn.name, missing))

    def klass(node: ast.ClassDef, qual: str) -> None:
        if _private(node.name):
            return
        qual = f"{qual}{node.name}."
        doc = ast.get_docstring(node)
        for item in _body(node.body):
            if isinstance(item, ast.ClassDef):
                klass(item, qual)
            elif isinstance(item, Function) and item.name == "__init__" and not _skipped(item):
                if has_section(doc, ("Args:", "Attributes:")):
                    names = documented(doc, ("Args:", "Attributes:"))
                else:
                    names = documented(ast.get_docstring(item))
                missing = _missing_in(item, True, names)
                if missing:
                    out.append((item.lineno, qual + "__init__", missing))
            elif isinstance(item, Function):
                function(item, qual, method=True)

    for node in _body(tree.body):
        if isinstance(node, ast.ClassDef):
            klass(node, "")
        elif isinstance(node, Function):
            function(node, "", method=False)
    return sorted(out)


def _body(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a body, looking into ``if`` / ``try`` / ``with`` blocks (a function
    defined under ``if TYPE_CHECKING:`` or ``try: import x`` is still the module's)."""
    out: list[ast.stmt] = []
    for s in stmts:
        if isinstance(s, ast.If | ast.With):
            out += _body(s.body) + _body(getattr(s, "orelse", []))
        elif isinstance(s, ast.Try):
            out += _body(s.body) + _body(s.orelse) + _body(s.finalbody)
            for h in s.handlers:
                out += _body(h.body)
        else:
            out.append(s)
    return out


def package_missing_args() -> list[str]:
    """One line per public function of the package whose ``Args:`` lacks a parameter."""
    lines = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        if any(_private(part.removesuffix(".py")) for part in rel.parts):
            continue
        for line, name, missing in missing_args(ast.parse(path.read_text(), str(path))):
            lines.append(f"{rel}:{line}: {name}: missing {', '.join(missing)}")
    return lines


def per_file(lines: list[str]) -> Counter[str]:
    """How many functions lack names under ``Args:``, per file (for a summary)."""
    return Counter(line.split(":", 1)[0] for line in lines)


_SAMPLE = '''
def documented(path, *, limit=3, **options):
    """Reads.

    Args:
        path: Where.
        limit (int): How many.
        **options: Passed on.
    """


def half(a, b, *rest):
    """Half.

    Args:
        a, b: The two.
    """


def none(x):
    """No section."""


def _private(x):
    pass


class Public:
    """A class.

    Args:
        size: How big.
    """

    def __init__(self, size, extra):
        pass

    def method(self, y):
        """Says nothing of y."""

    @staticmethod
    def static(self):
        """Its first parameter is a parameter.

        Args:
            other: Not it.
        """

    @classmethod
    def build(cls):
        """No parameters besides cls."""

    @property
    def value(self):
        """A property."""

    @value.setter
    def value(self, v):
        pass

    def __call__(self, z):
        pass


class Bare:
    """No Args: the constructor's own docstring counts."""

    def __init__(self, n):
        """Makes one.

        Args:
            n: How many.
        """


class _Hidden:
    def shown(self, q):
        pass


if True:
    def guarded(w):
        pass
'''


def test_the_check_finds_what_is_missing_and_only_that() -> None:
    found = missing_args(ast.parse(_SAMPLE))
    assert [(name, missing) for _, name, missing in found] == [
        ("half", ["*rest"]),
        ("none", ["x"]),
        ("Public.__init__", ["extra"]),
        ("Public.method", ["y"]),
        ("Public.static", ["self"]),
        ("guarded", ["w"]),
    ]


def test_every_public_function_names_its_parameters_under_args() -> None:
    lines = package_missing_args()
    assert not lines, (
        f"{len(lines)} public functions lack parameters under Args: "
        f"({len(per_file(lines))} files)\n" + "\n".join(lines)
    )
