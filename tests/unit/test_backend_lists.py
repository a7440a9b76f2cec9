"""Every list of backends in the docs and the CLI names every registered backend.

The registered backends are the ``broker.backends`` entry points of ``pyproject.toml``. A list is
found two ways, so that registering a backend without adding it everywhere fails here:

- **Named lists**, checked exactly: the URL list of ``broker --help``, the capability matrix's
  example URLs and column order, the backends of ``broker dev --help`` and of ``docs/cli.md``
  (those whose factory has ``dev_server()``), the backend tables of the README and
  ``docs/choosing-a-broker.md``, the delivery-count table of ``docs/retries.md``, the public
  packages of ``docs/versioning.md`` and the backend pages of the documentation site.
- **Any other list**: a Markdown table, paragraph, bullet list or non-Python code block of
  ``README.md`` or ``docs/`` that names at least :data:`LIST_THRESHOLD` backends is a list of
  backends, and names them all. A list that leaves some out on purpose says so on the line before
  it (or its first line), ``<!-- backends: all but inmem (the reason) -->``, and the backends it
  leaves out must be exactly the ones named there (so a new backend is still missing from it).

A backend is recognised by its URL scheme, its package name, the title of its page under
``docs/backends/`` and the usual short names in :data:`SHORT_NAMES`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from broker.cli.main import build_parser
from broker.cli.matrix import _ORDER, EXAMPLE_URLS
from broker.connect import _factory

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: A block naming at least this many distinct backends is a list of backends.
LIST_THRESHOLD = 4

#: Short names the docs use besides the scheme, the package and the page title.
SHORT_NAMES: dict[str, tuple[str, ...]] = {
    "inmem": ("in-memory",),
    "nats": ("JetStream",),
    "pubsub": ("Pub/Sub", "gcp_pubsub"),
    "servicebus": ("Service Bus",),
}


_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: scheme -> the factory registered for it.
ENTRY_POINTS: dict[str, str] = _PROJECT["entry-points"]["broker.backends"]


def _registered() -> dict[str, str]:
    """scheme -> backend package (``broker.backends.<package>``), from pyproject.toml's entry points.

    A backend registered under more than one scheme (``rediss``: ``redis`` over TLS) is one backend,
    known by its first scheme."""
    found: dict[str, str] = {}
    targets: set[str] = set()
    for scheme, target in ENTRY_POINTS.items():
        module = target.partition(":")[0]
        assert module.startswith("broker.backends."), (
            f"{scheme}: {target} is not a package of broker.backends"
        )
        if target not in targets:
            targets.add(target)
            found[scheme] = module.split(".")[2]
    return found


REGISTERED = _registered()
SCHEMES = frozenset(REGISTERED)


def _title(package: str) -> str | None:
    page = DOCS / "backends" / f"{package}.md"
    if not page.exists():
        return None
    first = page.read_text().split("\n", 1)[0]
    return re.sub(r"\s*\(`[^`]*`\)\s*$", "", first.removeprefix("# ")).strip()


def _pattern(scheme: str) -> re.Pattern[str]:
    names = {scheme, REGISTERED[scheme], *SHORT_NAMES.get(scheme, ())}
    title = _title(REGISTERED[scheme])
    if title:
        names.add(title)
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])", re.I)


PATTERNS = {scheme: _pattern(scheme) for scheme in SCHEMES}


def named(text: str) -> set[str]:
    """The registered backends that ``text`` names."""
    return {scheme for scheme, pattern in PATTERNS.items() if pattern.search(text)}


def dev_schemes() -> set[str]:
    """The registered backends whose factory starts a local server (``broker dev <scheme>``)."""
    return {scheme for scheme in SCHEMES if callable(getattr(_factory(scheme), "dev_server", None))}


# -- the registration itself --------------------------------------------------------------
def test_the_installed_entry_points_are_the_repositorys() -> None:
    installed = {ep.name for ep in entry_points(group="broker.backends")}
    stale = "reinstall the package (pip install -e .): its entry points are stale"
    assert installed == set(ENTRY_POINTS), stale


def test_every_backend_has_a_page_in_the_site() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for scheme, package in sorted(REGISTERED.items()):
        assert _title(package), f"{scheme}: docs/backends/{package}.md is missing"
        assert f"backends/{package}.md" in nav, (
            f"{scheme}: docs/backends/{package}.md is not in mkdocs.yml's nav"
        )


# -- the named lists ----------------------------------------------------------------------
def _help(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    """What ``broker COMMAND --help`` prints."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    return capsys.readouterr().out


def test_broker_help_shows_a_url_for_every_backend(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    urls = re.findall(r"^\s+([a-z][a-z0-9+.-]*)://(\S*)", text, re.M)
    assert {scheme for scheme, _ in urls} == SCHEMES


def test_broker_help_shows_the_rabbitmq_url_with_its_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    (url,) = re.findall(r"^\s+(rabbitmq://\S*)", text, re.M)
    assert "@" in url and "PASSWORD" in url.upper(), url


def test_broker_dev_help_names_every_backend_with_a_dev_server(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "dev")
    assert named(text) == dev_schemes(), text


def test_the_capability_matrix_has_a_url_and_a_place_for_every_backend() -> None:
    assert set(EXAMPLE_URLS) == SCHEMES
    assert set(_ORDER) == SCHEMES


def test_cli_page_names_every_backend_with_a_dev_server() -> None:
    text = (DOCS / "cli.md").read_text()
    (listed,) = re.findall(r"^broker dev kafka .*\(([^)]*)\)$", text, re.M)
    assert named(listed) == dev_schemes(), listed
    without = SCHEMES - dev_schemes()
    for scheme in without:
        assert f"no `dev {scheme}`" in text, f"docs/cli.md does not say that {scheme} has no dev server"


def _table_after(text: str, header: str) -> str:
    start = text.index(header)
    lines = []
    for line in text[start:].split("\n"):
        if not line.startswith("|"):
            break
        lines.append(line)
    return "\n".join(lines[2:])


@pytest.mark.parametrize(
    ("path", "header"),
    [
        ("README.md", "| URL | backend | notes |"),
        ("docs/choosing-a-broker.md", "| URL | backend | notes |"),
        ("docs/retries.md", "| backend | who counts |"),
    ],
)
def test_backend_tables_have_a_row_per_backend(path: str, header: str) -> None:
    rows = _table_after((ROOT / path).read_text(), header).split("\n")
    per_row = [named(row.split("|")[1]) for row in rows]
    assert all(len(found) == 1 for found in per_row), f"{path}: a row names not one backend: {rows}"
    assert sorted(s for found in per_row for s in found) == sorted(SCHEMES), path


def test_versioning_defines_every_backend_package_as_public() -> None:
    text = (DOCS / "versioning.md").read_text()
    public = text[text.index("## What the public API is") :].split("\n## ", 1)[0]
    packages = set(re.findall(r"`broker\.backends\.(\w+)`", public))
    assert set(REGISTERED.values()) <= packages, sorted(set(REGISTERED.values()) - packages)
    for name in ("broker.typed", "broker.schemas", "broker.telemetry", "broker.testing.plugin"):
        assert f"`{name}`" in public, f"docs/versioning.md leaves {name} out of the public API"


# -- any other list -----------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """A table, paragraph, list or code block of a page."""

    page: str
    line: int
    text: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


_MARKER = re.compile(r"^<!--\s*backends:\s*all but ([^(]*?)\s*(?:\(.*\))?\s*-->$")


def _blocks(page: str, text: str) -> Iterator[Block]:
    lines = text.split("\n")
    current: list[str] = []
    start = 0
    fence: str | None = None
    for number, line in enumerate(lines, 1):
        if fence is None and line.startswith("```"):
            if current:
                yield Block(page, start, "\n".join(current))
            fence, current, start = line[3:].strip(), [line], number
            continue
        if fence is not None:
            current.append(line)
            if line.startswith("```"):
                if fence != "python":  # samples show one backend or another, not a list
                    yield Block(page, start, "\n".join(current))
                fence, current = None, []
            continue
        if not line.strip():
            if current:
                yield Block(page, start, "\n".join(current))
            current = []
            continue
        if not current:
            start = number
        current.append(line)
    if current:
        yield Block(page, start, "\n".join(current))


def _with_markers(blocks: Iterator[Block]) -> Iterator[Block]:
    """Each block, with a ``<!-- backends: ... -->`` line standing alone before it as its first line."""
    marker: str | None = None
    for block in blocks:
        if _MARKER.match(block.text):
            marker = block.text
            continue
        yield Block(block.page, block.line, f"{marker}\n{block.text}") if marker else block
        marker = None


def find_lists() -> list[Block]:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    return [
        block
        for path in pages
        for block in _with_markers(_blocks(path.relative_to(ROOT).as_posix(), path.read_text()))
        if len(named(re.sub(_MARKER.pattern, "", block.text, flags=re.M))) >= LIST_THRESHOLD
    ]


LISTS = find_lists()


def test_lists_are_found() -> None:
    assert len(LISTS) >= 20, [b.name for b in LISTS]


@pytest.mark.parametrize("block", LISTS, ids=[b.name for b in LISTS])
def test_a_list_of_backends_names_every_backend(block: Block) -> None:
    first, _, rest = block.text.partition("\n")
    marker = _MARKER.match(first)
    missing = SCHEMES - named(rest if marker else block.text)
    left_out = set(re.split(r"[\s,]+(?:and\s+)?", marker.group(1).strip())) - {""} if marker else set()
    assert left_out <= SCHEMES, (
        f"{block.name}: the marker names unknown backends {sorted(left_out - SCHEMES)}"
    )
    assert missing == left_out, (
        f"{block.name} lists backends but leaves out {sorted(missing - left_out)}"
        + (f" and names {sorted(left_out - missing)} as left out" if left_out - missing else "")
        + f":\n{block.text}"
    )
