"""Build hook: compile the Kafka hot path with mypyc when mypy and a C compiler are at hand.

Everything else about the package is in ``pyproject.toml``. The extension is optional:

* ``broker/backends/kafka/fastpath.py`` is plain Python and always installed; a copy of it is compiled
  by mypyc as the separate module ``broker.backends.kafka._fastpath`` (a module compiled in place
  would hide its ``.py`` twin, and the pure-Python variant must stay selectable);
* no mypy, no compiler, or a failed compile: a warning, and the package installs without the
  extension (``broker.backends.kafka.mapping`` then uses the pure-Python module);
* the compiled copy carries the SHA-256 of the source it came from; an extension older than the
  source (an editable install whose ``fastpath.py`` changed since) is not used: reinstall;
* ``POLYBROKER_NO_EXTENSIONS=1`` at build time skips the compile; at run time it selects the
  pure-Python module even when the extension is installed. ``broker --version`` says which runs.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SOURCE = Path("broker", "backends", "kafka", "fastpath.py")  # through the link in a checkout
#: Where the copy is laid out under its compiled name (mypyc names a module after its path).
TREE = Path("build", "mypyc-src")
COMPILED = Path("broker", "backends", "kafka", "_fastpath.py")


def _skip(reason: object) -> None:
    print(f"polybroker: the Kafka hot path stays pure Python ({reason})", file=sys.stderr)


def _extensions() -> list[Any]:
    if os.environ.get("POLYBROKER_NO_EXTENSIONS", "").strip() not in ("", "0"):
        _skip("POLYBROKER_NO_EXTENSIONS is set")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _skip("mypy is not installed")
        return []
    cwd = os.getcwd()
    os.chdir(ROOT)  # mypycify takes paths relative to the project
    try:
        target = TREE / COMPILED
        target.parent.mkdir(parents=True, exist_ok=True)
        for package in target.relative_to(TREE).parents:
            if package != Path("."):
                (TREE / package / "__init__.py").write_text("")
        source = SOURCE.read_bytes()
        # The copy says which source it was compiled from: an extension built before the source
        # changed (an editable install) is left unused instead of running stale code.
        digest = hashlib.sha256(source).hexdigest()
        target.write_bytes(source + f'\n\nSOURCE_DIGEST = "{digest}"\n'.encode())
        return list(mypycify([str(target)], opt_level="3", target_dir=str(Path("build", "mypyc"))))
    except Exception as exc:  # a compile that cannot be prepared must not fail the install
        _skip(f"mypyc failed: {exc!r}")
        return []
    finally:
        os.chdir(cwd)


class OptionalBuildExt(build_ext):
    """``build_ext`` that leaves an extension out, with a warning, when it does not compile."""

    def run(self) -> None:
        """Build every extension; without a compiler, none (and say so)."""
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError and the like)
            _skip(f"no C compiler: {exc!r}")

    def build_extension(self, ext: Any) -> None:
        """Build ``ext``; a failure leaves it out (and says so)."""
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, LinkError, a compiler that is not there
            _skip(f"{ext.name} did not compile: {exc!r}")


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
