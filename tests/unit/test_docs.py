"""The documentation site (mkdocs.yml, docs/): its Python samples run, and it builds with --strict.

Every fenced ```python block of a page under docs/ (starting at the beginning of a line) is a sample
that runs as a script in a fresh interpreter, against ``inmem://`` or nothing at all. A sample that
needs a real server, Spark or pytest says so on the line right before its fence and is skipped with
that reason::

    <!-- no-run: needs a Kafka broker -->
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Fewer runnable samples than this means the extraction broke (or the docs lost their samples).
MIN_RUNNABLE = 8

_FENCE = re.compile(r"^```python\n(.*?)^```[ \t]*$", re.M | re.S)
_NO_RUN = re.compile(r"^<!--\s*no-run:\s*(\S.*?)\s*-->$")
_NO_RUN_ANYWHERE = re.compile(r"^<!--\s*no-run:", re.M)


@dataclass(frozen=True)
class Sample:
    """One ```python block of a page."""

    page: str
    line: int
    code: str
    #: Why it is not run (the ``no-run`` marker's text), or None: it runs.
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def find_samples() -> list[Sample]:
    found: list[Sample] = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()
        page = path.relative_to(DOCS).as_posix()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            previous = text[: match.start()].rstrip("\n").rpartition("\n")[2].strip()
            marker = _NO_RUN.match(previous)
            found.append(Sample(page, line, match.group(1), marker.group(1) if marker else None))
    return found


SAMPLES = find_samples()


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_sample_runs(sample: Sample, tmp_path: Path) -> None:
    if sample.skip is not None:
        pytest.skip(f"docs/{sample.name}: no-run: {sample.skip}")
    script = tmp_path / "sample.py"
    script.write_text(sample.code)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, f"the sample at docs/{sample.name} failed:\n{output}"


def test_enough_samples_run_and_every_skip_is_marked() -> None:
    runnable = [s for s in SAMPLES if s.skip is None]
    skipped = [s for s in SAMPLES if s.skip is not None]
    print(f"docs samples: {len(runnable)} run, {len(skipped)} skipped (no-run)")
    for sample in skipped:
        print(f"  skipped docs/{sample.name}: {sample.skip}")
    assert len(runnable) >= MIN_RUNNABLE, (
        f"only {len(runnable)} runnable samples (expected >= {MIN_RUNNABLE})"
    )
    markers = sum(len(_NO_RUN_ANYWHERE.findall(path.read_text())) for path in DOCS.rglob("*.md"))
    assert markers == len(skipped), "a no-run marker is not on the line right before a ```python fence"


def require_docs_toolchain() -> None:
    """Skip when the docs toolchain (the test extra's mkdocs pins) is not installed."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(
            module, reason="the docs toolchain comes with the test extra: pip install '.[test]'"
        )


def build_site(site: Path) -> None:
    """``mkdocs build --strict`` of the repository's site into ``site``; fails the test on any warning."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"


def test_site_builds_strict(tmp_path: Path) -> None:
    require_docs_toolchain()
    site = tmp_path / "site"
    build_site(site)
    for page in (
        "index.html",
        "api-overview/index.html",
        "choosing-a-broker/index.html",
        "capabilities/index.html",
        *(f"backends/{page.stem}/index.html" for page in (DOCS / "backends").glob("*.md")),
        "kafka-queue/index.html",
        "processor/index.html",
        "spark/index.html",
        "testing/index.html",
        "cli/index.html",
        "observability/index.html",
        "writing-a-backend/index.html",
        "benchmarks/index.html",
        "architecture/index.html",
        "supported-versions/index.html",
        "versioning/index.html",
        "reference/broker/index.html",
        "reference/errors/index.html",
        "reference/message/index.html",
        "reference/testing/index.html",
        "reference/kafka-queue/index.html",
        "reference/processor/index.html",
        "search/search_index.json",
    ):
        assert (site / page).is_file(), f"{page} is missing from the built site"
    matrix = (site / "capabilities" / "index.html").read_text()
    columns: dict[str, str] = {}  # a backend under two schemes (rediss: redis over TLS) has one column
    for ep in sorted(entry_points(group="broker.backends"), key=lambda ep: ep.name):
        columns.setdefault(ep.value, ep.name)
    for scheme in sorted(columns.values()):
        assert f"<code>{scheme}://</code>" in matrix, f"the capability matrix lost its {scheme}:// column"
    reference = (site / "reference" / "broker" / "index.html").read_text()
    assert 'id="broker.connect.connect"' in reference and 'id="broker.Message"' in reference
    assert "<!-- generated:" not in (site / "backends" / "kafka" / "index.html").read_text()


# -- what the pages claim about the repository and the code ---------------------------------
_TOP_LEVEL = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
_CITED_PATH = re.compile(r"`(/[^`\s]+|(?:" + "|".join(map(re.escape, _TOP_LEVEL)) + r")/[^`\s]*)`")


def _exists(cited: str) -> bool:
    """Whether ``cited`` names a file of the repository (``NAME`` and ``<name>`` parts are placeholders)."""
    path = cited.split("::")[0].rstrip("/:")
    pattern = re.sub(r"<[^>]+>|\b[A-Z][A-Z_]+\b", "*", path)
    return any(ROOT.glob(pattern))


def test_every_path_the_docs_cite_is_in_the_repository() -> None:
    missing = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        text = page.read_text()
        for match in _CITED_PATH.finditer(text):
            cited = match.group(1)
            # an absolute path is the system's (/proc, /usr/lib/...), unless it is in someone's checkout
            outside = cited.startswith(("/work/", "/home/", "/Users/", "/root/"))
            if outside or (not cited.startswith("/") and not _exists(cited)):
                line = text.count("\n", 0, match.start()) + 1
                missing.append(f"{page.relative_to(ROOT)}:{line}: {cited}")
    assert not missing, "the docs cite files that are not in the repository:\n" + "\n".join(missing)


def test_changelog_header_names_the_installed_packages() -> None:
    header = (ROOT / "CHANGELOG.md").read_text().split("\n## ", 1)[0]
    modules = re.findall(r"`([a-z_]+(?:\.[a-z_<>]+)+)`", header)
    outside = [name for name in modules if name.split(".")[0] != "broker"]
    assert not outside, f"the CHANGELOG header names packages that are not installed: {outside}"
    assert "versioning.md" in header, "the CHANGELOG header does not point to docs/versioning.md"


def test_a_receiver_the_docs_say_has_no_stop_has_none() -> None:
    import asyncio

    import broker
    from broker.cli.matrix import EXAMPLE_URLS

    names = {
        "pubsub": re.compile(r"Pub/Sub", re.I),
        "inmem": re.compile(r"in-memory|inmem://", re.I),
        "kafka": re.compile(r"Kafka"),
        "nats": re.compile(r"JetStream|NATS"),
        "pulsar": re.compile(r"Pulsar"),
        "servicebus": re.compile(r"Service Bus"),
        "rabbitmq": re.compile(r"RabbitMQ"),
        "redis": re.compile(r"Redis"),
    }
    claims = {
        (page.relative_to(ROOT).as_posix(), scheme)
        for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
        for paragraph in page.read_text().split("\n\n")
        if re.search(r"receiver\b[^.]*\bhas no `stop\(\)`", paragraph)
        for scheme, pattern in names.items()
        if pattern.search(paragraph)
    }

    async def has_stop(scheme: str) -> bool:
        backend = broker.connect(EXAMPLE_URLS.get(scheme, f"{scheme}://docs-claims"))
        try:
            return callable(getattr(backend.receiver("t", "s"), "stop", None))
        finally:
            await backend.close()

    wrong = [(page, scheme) for page, scheme in sorted(claims) if asyncio.run(has_stop(scheme))]
    assert not wrong, f"these pages say a receiver has no stop(), but it has one: {wrong}"


# -- docstrings: what the code does and why, in the present tense ----------------------------
#: The packages whose docstrings and ``#:`` attribute docs are read (``broker/backends`` and
#: ``broker/contrib`` are symlinks to the last two).
DOCSTRING_ROOTS = ("broker", "backends", "contrib")
#: A function's or method's docstring longer than this belongs, in part, on a docs page.
MAX_FUNCTION_DOCSTRING_LINES = 15
#: The same for a class.
MAX_CLASS_DOCSTRING_LINES = 25
#: "Seed" as the Go library a default or a behaviour comes from: name the library instead
#: (lib-brokers, kafka-mq-go, kefka, goka). NKey seeds, hash seeds and seeding a table are other words.
_SEED = re.compile(r"\bseeds?\b|\bseed's\b", re.I)
_OTHER_SEEDS = re.compile(r"nkeys?[ _]seeds?|\bseed 0x|\bseeds its\b|\bseed a key\b", re.I)
#: Narration of what an earlier version did.
_HISTORY = re.compile(
    r"\b(used to|previously|formerly|earlier versions?|in the past|until now|we now)\b", re.I
)


_TRIPLE_QUOTED = re.compile(r'"""(.*?)"""', re.S)


def _sources() -> dict[str, str]:
    """The package's Python files (relative path -> text), each once."""
    found = {}
    for root in DOCSTRING_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            if path.relative_to(ROOT).parts[:2] not in (("broker", "backends"), ("broker", "contrib")):
                found[path.relative_to(ROOT).as_posix()] = path.read_text()
    return found


SOURCES = _sources()


def test_docstrings_name_the_library_and_tell_no_history() -> None:
    """Every docstring (every triple-quoted text) and ``#:`` attribute doc of the package."""
    wrong = []
    for relative, source in SOURCES.items():
        if not (_SEED.search(source) or _HISTORY.search(source)):
            continue
        texts = [(m.start(), m.group(1)) for m in _TRIPLE_QUOTED.finditer(source)]
        texts += [(m.start(), m.group(1)) for m in re.finditer(r"^[ \t]*#:(.*)$", source, re.M)]
        for start, text in texts:
            for offset, line in enumerate(text.splitlines()):
                if _SEED.search(_OTHER_SEEDS.sub("", line)) or _HISTORY.search(line):
                    number = source.count("\n", 0, start) + 1 + offset
                    wrong.append(f"{relative}:{number}: {line.strip()}")
    assert not wrong, "docstrings that speak of 'the seed' or narrate history:\n" + "\n".join(wrong)


def test_function_and_class_docstrings_are_short() -> None:
    import ast

    limit = min(MAX_FUNCTION_DOCSTRING_LINES, MAX_CLASS_DOCSTRING_LINES)
    long = []
    for relative, source in SOURCES.items():
        indented_and_long = (
            m.group(1).count("\n") >= limit
            and source[source.rfind("\n", 0, m.start()) + 1 : m.start()].isspace()
            for m in _TRIPLE_QUOTED.finditer(source)
        )
        if not any(indented_and_long):
            continue  # no class or function docstring long enough (they are indented): nothing to parse
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                most = (
                    MAX_CLASS_DOCSTRING_LINES
                    if isinstance(node, ast.ClassDef)
                    else MAX_FUNCTION_DOCSTRING_LINES
                )
                lines = len((ast.get_docstring(node) or "").splitlines())
                if lines > most:
                    long.append(f"{relative}:{node.lineno} {node.name}: {lines} lines (at most {most})")
    assert not long, "docstrings to shorten (move the rationale to its docs page):\n" + "\n".join(long)
