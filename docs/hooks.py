"""MkDocs hooks: the parts of the documentation that are generated from the code at build time.

A page asks for a generated part with an HTML comment on a line of its own; this hook replaces
the comment before the page is rendered, so the site can never drift from what the code says:

* ``<!-- generated: capability-matrix -->``: :func:`broker.cli.matrix.capability_matrix`, the
  same function ``broker backends --matrix`` prints;
* ``<!-- generated: mechanisms SCHEME -->``: one backend's column of that matrix;
* ``<!-- generated: capability-flags -->``: every :class:`broker.Capabilities` flag and its meaning;
* ``<!-- generated: portable-options -->``: :data:`broker.driver.options.PORTABLE_OPTIONS`;
* ``<!-- generated: settings MODULE.CLASS -->``: a settings dataclass as a table (name, type,
  default, meaning from the ``#:`` comment above each field, or from a field of the same name in
  another dataclass of the module, such as a backend's ``ConsumerOptions``);
* ``<!-- generated: fields MODULE.CLASS -->``: the field names of a dataclass, inline;
* ``<!-- generated: conformance-tests -->``: the tests of :class:`broker.driver.testing.ConformanceSuite`;
* ``<!-- generated: include PATH -->``: a file of the repository, its headings one level down.

The hook also turns the Sphinx roles of docstrings (``:class:`~broker.Message```) into plain
code in the rendered API reference.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import html
import importlib
import inspect
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_DIRECTIVE = re.compile(r"^<!-- generated: ([a-z-]+)(?: (\S+))? -->$", re.M)
_COMMENT = re.compile(r"^\s*#:\s?(.*)$")
_FIELD = re.compile(r"^\s*([A-Za-z_]\w*)\s*:")
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`([^`]+)`")
_HTML_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>([^<]*)</code>")


def on_config(config: Any) -> Any:
    """Make the repository's packages importable, whether or not polybroker is installed."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace every ``<!-- generated: ... -->`` line of the page with what it names."""

    def replace(match: re.Match[str]) -> str:
        kind, argument = match.group(1), match.group(2)
        maker = _MAKERS.get(kind)
        if maker is None:
            raise ValueError(f"{page.file.src_path}: unknown generated part {kind!r}")
        return maker(argument)

    for number, line in enumerate(markdown.splitlines(), 1):
        if "<!-- generated:" in line and not _DIRECTIVE.fullmatch(line):
            raise ValueError(f"{page.file.src_path}:{number}: write a generated part alone on its line")
    return _DIRECTIVE.sub(replace, markdown)


def on_page_content(content: str, page: Any, config: Any, files: Any) -> str:
    """Render the Sphinx roles left in docstrings (``:class:`~a.B```) as plain code (``B``)."""

    def plain(match: re.Match[str]) -> str:
        text = html.unescape(match.group(1))
        text = re.sub(r"\s*<[^>]*>$", "", text)  # :meth:`label <target>` keeps the label
        if text.startswith("~"):
            text = text[1:].rsplit(".", 1)[-1]
        return f"<code>{html.escape(text, quote=False)}</code>"

    return _HTML_ROLE.sub(plain, content)


# -- the capability matrix ---------------------------------------------------------------------
@functools.cache
def _matrix() -> str:
    from broker.cli.matrix import capability_matrix

    return asyncio.run(capability_matrix())


def _capability_matrix(_: str | None) -> str:
    return _matrix()


def _mechanisms(scheme: str | None) -> str:
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in _matrix().splitlines()]
    header = rows[0]
    column = f"`{scheme}://`"
    if column not in header:
        raise ValueError(f"no backend {scheme!r} in the capability matrix (is its SDK installed?)")
    index = header.index(column)
    lines = ["| capability | native mechanism |", "|---|---|"]
    lines += [f"| {row[0]} | {row[index]} |" for row in rows[2:]]
    return "\n".join(lines)


def _capability_flags(_: str | None) -> str:
    from broker.capabilities import Capabilities

    comments = _field_comments(Capabilities)
    lines = ["| flag | meaning |", "|---|---|"]
    for flag in dataclasses.fields(Capabilities):
        lines.append(f"| `{flag.name}` | {_cell(comments.get(flag.name, ''))} |")
    return "\n".join(lines)


def _portable_options(_: str | None) -> str:
    from broker.driver.options import PORTABLE_OPTIONS

    schemes = [scheme for scheme, _ in PORTABLE_OPTIONS[0].native]
    lines = [
        "| option | unit | needs | meaning | " + " | ".join(f"`{s}://`" for s in schemes) + " |",
        "|---|---|---|---|" + "---|" * len(schemes),
    ]
    for option in PORTABLE_OPTIONS:
        native = dict(option.native)
        cells = [native.get(scheme, "—") for scheme in schemes]
        needs = f"`{option.capability}`" if option.capability else "—"
        row = [f"`{option.name}`", option.unit, needs, _cell(option.meaning), *cells]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# -- settings dataclasses ----------------------------------------------------------------------
def _object(path: str | None) -> Any:
    if not path or "." not in path:
        raise ValueError(f"name a class as module.Class, got {path!r}")
    module_name, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def _field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each field of ``cls``'s body, by field name."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        comment = _COMMENT.match(line)
        if comment:
            pending.append(comment.group(1).strip())
            continue
        field = _FIELD.match(line)
        if field and pending:
            comments[field.group(1)] = " ".join(pending)
        if line.strip() and not line.strip().startswith("#"):
            pending = []
    return comments


def _module_comments(cls: type) -> dict[str, str]:
    """Comments of same-named fields in the other dataclasses of ``cls``'s module (fallbacks)."""
    module = sys.modules[cls.__module__]
    found: dict[str, str] = {}
    for _, other in inspect.getmembers(module, inspect.isclass):
        if other is not cls and other.__module__ == module.__name__ and dataclasses.is_dataclass(other):
            for name, text in _field_comments(other).items():
                found.setdefault(name, text)
    return found


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except NameError:  # an annotation names a TYPE_CHECKING-only import: resolve the others one by one
        namespace = vars(sys.modules[cls.__module__])
        hints: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            try:
                hints[field.name] = eval(field.type, namespace) if isinstance(field.type, str) else field.type
            except NameError:
                continue
        return hints


def _type_text(field: dataclasses.Field[Any], hint: Any) -> str:
    literal = _literal_values(hint)
    if literal is not None:
        return " \\| ".join(f"`{value!r}`" for value in literal)
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    return f"`{text}`"  # a pipe inside a code span does not split a table cell


def _literal_values(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, type(int | None)):
        values: list[Any] = []
        for arg in typing.get_args(hint):
            if arg is type(None):
                values.append(None)
            elif typing.get_origin(arg) is typing.Literal:
                values.extend(typing.get_args(arg))
            else:
                return None
        return tuple(values)
    return None


def _value_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return f"`{type(value).__name__}.{value.name}`"
    if isinstance(value, bool) or value is None:
        return f"`{value!r}`"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"`{value:_}`"
    if callable(value):
        return f"`{getattr(value, '__name__', repr(value))}`"
    return f"`{value!r}`"


def _default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return _value_text(field.default)
    factory: Callable[[], Any] | Any = field.default_factory
    if factory is not dataclasses.MISSING:
        made = factory()
        if callable(made) and getattr(factory, "__name__", "<lambda>") != "<lambda>":
            return f"`{factory.__name__}()`"
        return _value_text(made)
    return "required"


def _cell(text: str) -> str:
    text = _ROLE.sub(lambda m: "`" + m.group(1).lstrip("~") + "`", text)
    parts = text.replace("``", "`").split("`")
    parts[::2] = [part.replace("|", "\\|") for part in parts[::2]]  # pipes outside code spans
    return "`".join(parts) or "—"


def _settings(path: str | None) -> str:
    cls = _object(path)
    if not dataclasses.is_dataclass(cls):
        raise ValueError(f"{path} is not a dataclass")
    own = _field_comments(cls)
    fallback = _module_comments(cls)
    hints = _hints(cls)
    lines = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    declared = vars(cls).get("__annotations__", {})
    # the class's own settings first, then those it inherits (a backend's consumer defaults)
    for field in sorted(dataclasses.fields(cls), key=lambda f: f.name not in declared):
        if not field.init:
            continue
        meaning = own.get(field.name) or fallback.get(field.name, "")
        if field.metadata.get("secret"):
            meaning = (meaning + " " if meaning else "") + "*Secret: never shown in `repr` or logs.*"
        lines.append(
            f"| `{field.name}` | {_type_text(field, hints.get(field.name))} | {_default_text(field)} "
            f"| {_cell(meaning)} |"
        )
    return "\n".join(lines)


def _fields(path: str | None) -> str:
    cls = _object(path)
    return ", ".join(f"`{field.name}`" for field in dataclasses.fields(cls) if field.init)


# -- the conformance suite --------------------------------------------------------------------
def _conformance_tests(_: str | None) -> str:
    from broker.driver.testing import ConformanceSuite

    lines = []
    for cls in reversed(ConformanceSuite.__mro__):
        names = [name for name in vars(cls) if name.startswith("test_")]
        if names:
            lines.append(f"- `{cls.__module__}.{cls.__name__}`: " + ", ".join(f"`{n}`" for n in names))
    return "\n".join(lines)


# -- included files ----------------------------------------------------------------------------
def _include(path: str | None) -> str:
    if not path:
        raise ValueError("include needs a path relative to the repository root")
    source = (ROOT / path).resolve()
    if ROOT not in source.parents:
        raise ValueError(f"include {path!r} is outside the repository")
    out: list[str] = []
    fenced = False
    for line in source.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            line = "#" + line
        out.append(line)
    return "\n".join(out)


_MAKERS: dict[str, Callable[[str | None], str]] = {
    "capability-matrix": _capability_matrix,
    "mechanisms": _mechanisms,
    "capability-flags": _capability_flags,
    "portable-options": _portable_options,
    "settings": _settings,
    "fields": _fields,
    "conformance-tests": _conformance_tests,
    "include": _include,
}
