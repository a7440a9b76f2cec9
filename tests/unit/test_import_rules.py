"""The import rules of ARCHITECTURE.md, enforced on the source tree."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDKS = (
    "confluent_kafka",
    "nats",
    "google.cloud.pubsub",
    "google.cloud.pubsub_v1",
    "pulsar",
    "azure.servicebus",
    "aio_pika",
    "aiormq",
    "pyspark",
)
BACKENDS = sorted(p.name for p in (ROOT / "backends").iterdir() if (p / "__init__.py").exists())


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(folder: str, rule) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, module in imports_of(path):
            reason = rule(path, module)
            if reason:
                out.append(f"{path.relative_to(ROOT)}:{line} imports {module}: {reason}")
    return out


def test_core_imports_no_backend_contrib_or_sdk() -> None:
    def rule(path: Path, module: str) -> str | None:
        if under(module, "broker.backends") or under(module, "broker.contrib"):
            return "the core never imports backends or contrib"
        if any(under(module, sdk) for sdk in SDKS):
            return "the core imports no broker SDK"
        return None

    assert violations("broker", rule) == []


def test_backends_import_only_core_and_their_own_package() -> None:
    def rule(path: Path, module: str) -> str | None:
        own = path.relative_to(ROOT / "backends").parts[0]
        if under(module, "broker.contrib"):
            return "backends never import contrib"
        for other in BACKENDS:
            if other != own and under(module, f"broker.backends.{other}"):
                return f"backends.{own} must not import another backend"
        return None

    assert violations("backends", rule) == []


def test_nothing_imports_contrib() -> None:
    def rule(path: Path, module: str) -> str | None:
        return "nothing imports contrib" if under(module, "broker.contrib") else None

    assert violations("broker", rule) == [] and violations("backends", rule) == []


def test_broker_imports_with_no_sdk_installed() -> None:
    """``import broker`` and the in-memory backend work when every SDK import fails."""
    blocked = ", ".join(repr(s) for s in (*SDKS, "google.cloud", "azure"))
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + '.') for b in ({blocked},)):
            raise ImportError('blocked for the test: ' + name)
sys.meta_path.insert(0, Block())
import asyncio, broker, broker.adapt, broker.codecs, broker.log, broker.testing, broker.cli.main
async def main():
    async with broker.connect('inmem://no-sdk') as b:
        await b.publisher().topic('t').publish(broker.OutboundMessage(b'x'))
asyncio.run(main())
print('ok')
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


PORT_ONLY = ("backends/kafka/queue", "backends/kafka/processor")


def test_queue_and_processor_depend_on_the_log_port_only() -> None:
    """The marker queue and the processor import ``broker`` and their own package, nothing else of
    ``broker.backends.kafka`` (function-level imports included), and never test for a Kafka class: what
    they need of Kafka is an optional, typed part of ``broker.log``."""

    def rule(path: Path, module: str) -> str | None:
        own = "broker." + ".".join(path.relative_to(ROOT).parts[:3])
        if under(module, "broker.backends") and not under(module, own):
            return f"{own} depends on the broker.log port only"
        if any(under(module, sdk) for sdk in SDKS):
            return f"{own} imports no broker SDK"
        return None

    found = [v for folder in PORT_ONLY for v in violations(folder, rule)]
    for folder in PORT_ONLY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in {"isinstance", "issubclass"}
                    and "Kafka" in ast.unparse(node.args[1])
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} tests for a Kafka class")
    assert found == []


def test_one_import_path_per_module() -> None:
    """``backends/`` and ``contrib/`` are imported as ``broker.backends`` and ``broker.contrib`` only:
    no source file names the old top-level packages, and loading every backend and integration
    leaves no ``backends.*`` or ``contrib.*`` module beside them (two copies, two registries)."""
    old = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for folder in ("broker", "backends", "contrib", "tests", "examples", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, module in imports_of(path)
        if under(module, "backends") or under(module, "contrib")
    ]
    assert old == []
    assert (ROOT / "broker" / "backends").resolve() == ROOT / "backends"
    assert (ROOT / "broker" / "contrib").resolve() == ROOT / "contrib"
    code = """
import importlib, pkgutil, sys
import broker.backends, broker.contrib
for package in (broker.backends, broker.contrib):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if ".spark" in info.name or info.name.endswith("devserver"):
            continue  # pyspark is heavy and optional; dev servers start nothing on import anyway
        importlib.import_module(info.name)
import broker
broker.connect("inmem://one-path")
print(sorted(m for m in sys.modules if m.split(".")[0] in ("backends", "contrib")))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- the house: the public API, the driver kit, and the seams between them --------------------------

#: Modules of the core that a backend may import: the public API (docs/versioning.md) and ``broker``.
#: Anything else it needs is in ``broker.driver``.
BACKEND_MAY_IMPORT = (
    "broker.adapt",
    "broker.codecs",
    "broker.errors",
    "broker.log",
    "broker.retry",
    "broker.typed",
    "broker.schemas",
    "broker.telemetry",
)

#: The driver-kit modules the application-facing core imports, each for a named reason. Anything
#: else of ``broker.driver`` stays out of application code.
SEAMS = {
    "broker.driver": "the moved names' deprecation shims (module __getattr__ of broker, broker.testing)",
    "broker.driver.base": "BackendFactory, which connect() looks up; topics_tuple for the telemetry wrapper",
    "broker.driver.clock": "the one clock the core, the backends and virtual time read",
    "broker.driver.forwarding": "Forwarded: the read-only field a wrapper forwards from what it wraps",
    "broker.driver.resources": (
        "AsyncResource and stop_task: the async-with and close semantics every resource shares"
    ),
    "broker.driver.publishing": "DriverPublisher: where telemetry and the test recorder wrap publishing",
    "broker.driver.options": "the portable option checks adapt receivers and broker.sync share with backends",
    "broker.driver.outbound": "the message checks broker.sync shares with every backend's publisher",
    "broker.driver.settings": "URL parsing and credential redaction for connect(), the command line and logs",
}


def backend_rule(path: Path, module: str) -> str | None:
    own = "broker.backends." + path.relative_to(ROOT / "backends").parts[0]
    if not under(module, "broker") or under(module, own) or under(module, "broker.driver"):
        return None
    if module == "broker" or any(under(module, public) for public in BACKEND_MAY_IMPORT):
        return None
    return "a backend imports the public API, broker.driver and its SDK only"


def app_rule(path: Path, module: str) -> str | None:
    if "driver" in path.relative_to(ROOT / "broker").parts[:1]:
        return None  # the kit itself
    if not under(module, "broker.driver"):
        return None
    if under(module, "broker.driver.testing"):
        return "the conformance kit is for backend authors, never imported by application code"
    if module not in SEAMS:
        return "application-facing code imports the driver kit through the named seams only"
    return None


def test_backends_import_the_public_api_and_the_driver_kit_only() -> None:
    assert violations("backends", backend_rule) == []


def test_application_code_reaches_the_driver_kit_through_named_seams_only() -> None:
    assert violations("broker", app_rule) == []


def test_the_rules_catch_a_counter_example(tmp_path: Path) -> None:
    """Each rule fails on a file that breaks it (so a passing run means something)."""
    backend_file = ROOT / "backends" / "inmem" / "counter_example.py"
    app_file = ROOT / "broker" / "typed" / "counter_example.py"
    assert backend_rule(backend_file, "broker.message") is not None  # private core module
    assert backend_rule(backend_file, "broker.settle") is not None
    assert backend_rule(backend_file, "broker.driver.pulled") is None
    assert backend_rule(backend_file, "broker") is None
    assert app_rule(app_file, "broker.driver.pulled") is not None
    assert app_rule(app_file, "broker.driver.testing.harness") is not None
    assert app_rule(app_file, "broker.driver.clock") is None
    # and on a real file on disk, through the same walk the tests use
    bad = ROOT / "backends" / "inmem" / "_counter_example_for_the_test.py"
    bad.write_text("from broker.settle import ack_in_turn\n")
    try:
        found = violations("backends", backend_rule)
    finally:
        bad.unlink()
    assert found == [
        "backends/inmem/_counter_example_for_the_test.py:1 imports broker.settle: "
        "a backend imports the public API, broker.driver and its SDK only"
    ]


def test_no_application_example_imports_the_driver_kit() -> None:
    """examples/ and the docs' code (but the page for backend authors) never import broker.driver."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "examples").rglob("*.py"))
        for line, module in imports_of(path)
        if under(module, "broker.driver")
    ]
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for_authors = {"writing-a-backend.md", "architecture.md", "versioning.md"}
        if page.name in for_authors or "reference" in page.parts:
            continue
        for number, text in enumerate(page.read_text().splitlines(), 1):
            if re.search(r"^\s*(from|import) broker\.driver\b", text):
                found.append(f"{page.relative_to(ROOT)}:{number}")
    assert found == []
