"""The built package: the wheel installs ``broker`` and nothing else at the top level, and works.

Builds the wheel and the sdist with uv, installs the wheel into an empty virtual environment with
the core only, runs ``broker demo`` there, then adds the ``nats`` extra and checks that the other
backends raise ``MissingDependency`` naming their extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(UV is None, reason="uv is not installed")]


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(UV, "build", "--quiet", "--out-dir", out, ROOT)  # type: ignore[arg-type]
    return out


def test_the_wheel_has_only_broker_at_the_top_level(dist: Path) -> None:
    (wheel,) = dist.glob("polybroker-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"broker"}
    assert "broker/backends/kafka/backend.py" in names
    assert "broker/contrib/spark/__init__.py" in names
    assert "broker/py.typed" in names
    (sdist,) = dist.glob("polybroker-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[-1] for m in archive.getmembers()}
    assert {"pyproject.toml", "broker/backends/kafka/backend.py", "broker/__init__.py"} <= members


def test_the_wheel_installs_and_runs_with_the_core_only_then_one_extra(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("polybroker-*.whl")
    venv = tmp_path / "venv"
    _run(UV, "venv", "--quiet", "--python", sys.executable, venv)  # type: ignore[arg-type]
    python = venv / "bin" / "python"
    _run(UV, "pip", "install", "--quiet", "--python", python, wheel)  # type: ignore[arg-type]
    demo = _run(venv / "bin" / "broker", "demo", cwd=tmp_path)
    assert "inmem" in demo
    check = """
import importlib.util, broker
from broker.errors import MissingDependency
assert importlib.util.find_spec("backends") is None and importlib.util.find_spec("contrib") is None
missing = {}
for url in ("kafka://127.0.0.1:1", "nats://127.0.0.1:1", "pubsub://p", "pulsar://127.0.0.1:1",
            "servicebus://ns?shared_access_key_name=k&shared_access_key=v", "rabbitmq://127.0.0.1:1",
            "redis://127.0.0.1:1"):
    try:
        broker.connect(url)
    except MissingDependency as exc:
        missing[url.split(":")[0]] = str(exc)
print(sorted(missing))
print(all(("polybroker[" in text) for text in missing.values()))
"""
    out = _run(python, "-c", check, cwd=tmp_path).split("\n")
    assert out[0] == "['kafka', 'nats', 'pubsub', 'pulsar', 'rabbitmq', 'redis', 'servicebus']"
    assert out[1] == "True", "MissingDependency names the extra to install"
    _run(UV, "pip", "install", "--quiet", "--python", python, f"{wheel}[nats]")  # type: ignore[arg-type]
    out = _run(python, "-c", check, cwd=tmp_path).split("\n")
    assert out[0] == "['kafka', 'pubsub', 'pulsar', 'rabbitmq', 'redis', 'servicebus']"
