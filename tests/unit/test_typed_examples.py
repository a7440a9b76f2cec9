"""``mypy --strict`` over ``examples/`` and the Python blocks of the docs, in one run.

What an application copies from the docs or the examples type-checks against the public API as it
is (``broker.connect()`` returns :class:`broker.Backend`, whose members are ``BackendBase``'s), and
none of it needs ``# type: ignore``.

A docs block is checked as one module of a temporary package. A block that runs
(``tests/unit/test_docs.py``) is a whole program and is checked as it is. A fragment (a block with
a ``<!-- no-run: ... -->`` marker) is checked after :data:`FRAGMENT_PREAMBLE` (the names the pages
take as given: ``backend``, ``publisher``, the common imports) and after its own preamble, given
by a marker in the comment lines right above its fence::

    <!-- mypy-preamble: from shop import Order; order: Order -->

and a fragment with ``await`` at the top level is checked as the body of an ``async def``. A block
that cannot be checked (it needs a generated module or a library without type information) says
why, in the comment lines above its fence::

    <!-- no-mypy: imports the protoc-generated shop_pb2 -->
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"

_FENCE = re.compile(r"^```python\n(.*?)^```[ \t]*$", re.M | re.S)
_COMMENT = re.compile(r"^<!--\s*([a-z-]+):\s*(.*?)\s*-->$")
_IGNORE = re.compile(r"#\s*type:\s*ignore")

#: What every fragment may use without defining it: the common imports, and the names the pages take
#: as given (each declared unless the fragment binds the name itself).
FRAGMENT_PREAMBLE = """\
import asyncio
import json
import os
import signal
from dataclasses import dataclass
from typing import Any

import broker
from broker import Message, OutboundMessage, Record, schemas, typed
from broker.interfaces import MiddlewarePublisher
from broker.retry import DeadLetterTopic, RetryPolicy
"""

#: Names a fragment uses as given, and their declarations.
GIVEN = {
    "backend": "backend: broker.Backend",
    "publisher": "publisher: MiddlewarePublisher",
    "message": "message: Message",
    "record": "record: Record",
    "url": "url: str",
    "config": "config: dict[str, Any]",
    "Order": "@dataclass\nclass Order:\n    id: int\n    total: float",
    "Total": "@dataclass\nclass Total:\n    sum: float",
}

#: Modules without type information that docs blocks import: their names are typed as Any
#: (``ignore_missing_imports``), the rest of each block is checked strictly.
UNTYPED_MODULES = ("flask", "flask.*", "uvicorn", "uvicorn.*")


@dataclass(frozen=True)
class Block:
    """One ```python block of a docs page and the markers in the comment lines above its fence."""

    page: str
    line: int
    code: str
    markers: dict[str, str]
    #: The lines of the block's ``mypy-preamble`` markers, top to bottom.
    preamble: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        """The module name the block is checked under."""
        return "docs_" + re.sub(r"\W", "_", f"{self.page.removesuffix('.md')}_{self.line}")

    def source(self) -> str:
        """The module mypy checks: the block, after the preambles when it is a fragment."""
        if "no-run" not in self.markers:
            return self.code
        own = "\n".join([self.code, *self.preamble])  # a name the block or its preamble binds
        given = [
            line
            for name, line in GIVEN.items()
            if re.search(rf"\b{name}\b", self.code)
            and not re.search(
                rf"^\s*{name}\s*=|\b(as|for|class|def)\s+{name}\b|^(from|import)\s.*\b{name}\b",
                own,
                re.M,
            )
        ]
        preamble = "\n".join([FRAGMENT_PREAMBLE, *given, *self.preamble, ""])
        try:
            compile(self.code, self.module, "exec")
            body = self.code
        except SyntaxError:  # ``await``, ``async with`` or ``async for`` at the top level
            body = "async def _fragment() -> None:\n" + textwrap.indent(self.code, "    ")
        return preamble + "\n" + body


def find_blocks() -> list[Block]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()
        page = path.relative_to(DOCS).as_posix()
        for match in _FENCE.finditer(text):
            markers: dict[str, str] = {}
            preamble: list[str] = []
            for above in reversed(text[: match.start()].rstrip("\n").split("\n")):
                comment = _COMMENT.match(above.strip())
                if comment is None:
                    break
                if comment.group(1) == "mypy-preamble":
                    preamble.insert(0, comment.group(2))
                else:
                    markers[comment.group(1)] = comment.group(2)
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page, line, match.group(1), markers, tuple(preamble)))
    return found


BLOCKS = find_blocks()


def test_no_type_ignore_in_examples_or_docs_blocks() -> None:
    found = [f"docs/{b.page}:{b.line}" for b in BLOCKS if _IGNORE.search(b.code)]
    found += [
        str(p.relative_to(ROOT)) for p in sorted(EXAMPLES.rglob("*.py")) if _IGNORE.search(p.read_text())
    ]
    assert not found, f"# type: ignore in what users copy (type it instead): {found}"


def test_every_unchecked_docs_block_says_why() -> None:
    unchecked = [b for b in BLOCKS if "no-mypy" in b.markers]
    assert all(b.markers["no-mypy"] for b in unchecked), "a no-mypy marker without a reason"
    checked = len(BLOCKS) - len(unchecked)
    print(f"docs blocks: {checked} checked by mypy, {len(unchecked)} not:")
    for block in unchecked:
        print(f"  docs/{block.page}:{block.line}: {block.markers['no-mypy']}")
    assert checked >= 40, f"only {checked} docs blocks are type-checked (the extraction broke?)"
    marked = sum(len(re.findall(r"<!--\s*no-mypy:", p.read_text())) for p in DOCS.rglob("*.md"))
    assert marked == len(unchecked), "a no-mypy marker is not in the comment lines right above a fence"


@pytest.mark.slow
def test_examples_and_docs_blocks_pass_mypy_strict(tmp_path: Path) -> None:
    package = tmp_path / "docs_blocks"
    package.mkdir()
    names: dict[str, Block] = {}
    for block in BLOCKS:
        if "no-mypy" not in block.markers:
            (package / f"{block.module}.py").write_text(block.source())
            names[block.module] = block
    config = tmp_path / "mypy.ini"
    config.write_text(
        "[mypy]\nstrict = True\npython_version = 3.11\n"
        f"[mypy-{','.join(UNTYPED_MODULES)}]\nignore_missing_imports = True\n"
        "[mypy-msgpack,msgpack.*]\nignore_missing_imports = True\n"
    )
    examples = sorted(str(p) for p in EXAMPLES.rglob("*.py"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            "--no-error-summary",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            *examples,
            *sorted(map(str, package.glob("*.py"))),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = []
    for line in result.stdout.splitlines():
        found = re.match(r".*?(docs_\w+)\.py:(\d+): (.*)$", line)
        if found and found[1] in names:
            block = names[found[1]]
            source_line = block.source().splitlines()[int(found[2]) - 1].strip()
            report.append(f"docs/{block.page} (block at line {block.line}): {found[3]}  | {source_line}")
        else:
            report.append(line)
    assert result.returncode == 0, "mypy --strict:\n" + "\n".join(report) + result.stderr
