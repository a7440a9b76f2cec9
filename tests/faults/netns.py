"""A network namespace reached over a veth pair, for the network-cut fault.

:func:`network_namespace` makes a namespace ``pbf-<tag>`` with one end of a veth pair in it and the
other in the test's namespace, a private /30 on the pair (the host side ``.1``, the namespace side
``.2``), the namespace's loopback up and no default route: a server started inside
(:meth:`Namespace.command`) is reachable from the test only over the pair, so setting the pair
down (:meth:`Namespace.cut`) silently cuts every connection until :meth:`Namespace.heal`.

This is the one place the suite binds a server to an address other than 127.0.0.1: the address
exists only on the pair, inside a namespace that is removed afterwards even when the test fails.
Where the kernel or the user cannot make namespaces (not root, no ``ip``), the test skips with the
reason.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

__all__ = ["Namespace", "network_namespace"]

#: Every namespace and link the suite makes starts with this.
PREFIX = "pbf"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)


def _must(*args: str) -> None:
    result = _ip(*args)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")


@dataclass(frozen=True)
class Namespace:
    """A namespace with a veth pair to the test's namespace."""

    #: The namespace's name (``ip netns``).
    name: str
    #: The pair's end in the test's namespace, and the one inside.
    host_link: str
    inner_link: str
    #: The addresses on the pair: the test's side and the namespace's (where servers listen).
    host_address: str
    address: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: same pid, same group)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Set the pair down: packets either way are dropped, connections are not reset."""
        _must("-n", self.name, "link", "set", self.inner_link, "down")

    def heal(self) -> None:
        """Set the pair up again."""
        _must("-n", self.name, "link", "set", self.inner_link, "up")

    @property
    def is_cut(self) -> bool:
        """True while the pair is down."""
        shown = _ip("-n", self.name, "-o", "link", "show", self.inner_link).stdout
        return "state DOWN" in shown or ",UP" not in shown.split(">")[0]


@contextmanager
def network_namespace() -> Iterator[Namespace]:
    """Make the namespace and its pair; remove both on exit, whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("network-cut: making a network namespace needs root (CI runs as root)")
    if shutil.which("ip") is None:
        pytest.skip("network-cut: the ip command (iproute2) is not installed")
    tag = uuid.uuid4().hex[:6]
    name, host_link, inner_link = f"{PREFIX}-{tag}", f"{PREFIX}{tag}h", f"{PREFIX}{tag}n"
    base = random.randrange(0, 64) * 4
    third = random.randrange(0, 256)
    host_address, address = f"10.213.{third}.{base + 1}", f"10.213.{third}.{base + 2}"
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"network-cut: the kernel refused a network namespace: {made.stderr.strip()}")
    try:
        _must("link", "add", host_link, "type", "veth", "peer", "name", inner_link, "netns", name)
        _must("addr", "add", f"{host_address}/30", "dev", host_link)
        _must("link", "set", host_link, "up")
        _must("-n", name, "addr", "add", f"{address}/30", "dev", inner_link)
        _must("-n", name, "link", "set", inner_link, "up")
        _must("-n", name, "link", "set", "lo", "up")
        yield Namespace(name, host_link, inner_link, host_address, address)
    finally:
        _ip("netns", "del", name)  # takes its end of the pair, and with it the pair
        _ip("link", "del", host_link)  # in case the namespace went first
