"""The ``Backend`` protocol that ``broker.connect()`` returns is ``BackendBase``, member for member.

Applications type against :class:`broker.Backend`; backends build on
:class:`broker.driver.BackendBase`. Every public member of one is on the other with the same
signature (parameter names, kinds, defaults and annotations), so what the docs call on a backend
type-checks and the two cannot drift apart. What depends on a capability raises
:class:`broker.errors.NotSupported` on a backend that lacks it, without dialing the broker.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import broker
from broker.backend import Backend
from broker.cli.matrix import EXAMPLE_URLS
from broker.driver.base import BackendBase
from broker.errors import NotSupported

#: Members whose form differs on purpose, with the reason.
EXCEPTIONS: dict[str, str] = {
    "name": "a class attribute of BackendBase that each backend sets; read-only (a property) to users",
    "capabilities": "a class attribute of BackendBase that each backend sets; read-only to users",
    "provision_modes": "a class attribute of BackendBase that each backend sets; read-only to users "
    "(a property, so a wrapper such as broker.telemetry's forwards it)",
}


def _public(cls: type) -> dict[str, Any]:
    """The public members of ``cls`` and its bases (annotated attributes included), by name."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass.__module__ == "typing":
            continue
        for name in inspect.get_annotations(klass):
            if not name.startswith("_"):
                found[name] = "attribute"
        for name, value in vars(klass).items():
            if not name.startswith("_") or name in ("__aenter__", "__aexit__"):
                found[name] = value
    return found


def _form(member: Any) -> str:
    if isinstance(member, property):
        return "property"
    if callable(member):
        return "method"
    return "attribute"


def _signature(member: Any) -> inspect.Signature:
    function = member.fget if isinstance(member, property) else member
    return inspect.signature(function)


def test_every_member_of_backend_base_is_on_the_protocol_with_the_same_signature() -> None:
    base = _public(BackendBase)
    protocol = _public(Backend)
    missing = sorted(set(base) - set(protocol) - set(EXCEPTIONS))
    extra = sorted(set(protocol) - set(base) - set(EXCEPTIONS))
    assert not missing, f"BackendBase members missing from the Backend protocol: {missing}"
    assert not extra, f"Backend protocol members BackendBase lacks: {extra}"
    different = []
    for name in sorted(set(base) - set(EXCEPTIONS)):
        ours, theirs = base[name], protocol[name]
        if _form(ours) != _form(theirs):
            different.append(f"{name}: a {_form(ours)} on BackendBase, a {_form(theirs)} on Backend")
        elif _form(ours) != "attribute" and _signature(ours) != _signature(theirs):
            different.append(f"{name}: BackendBase{_signature(ours)} vs Backend{_signature(theirs)}")
    assert not different, "signatures that drifted apart:\n" + "\n".join(different)
    for name, reason in EXCEPTIONS.items():
        assert reason and name in base and name in protocol, f"{name}: a stale exception"


def _backends() -> Iterator[tuple[str, Any]]:
    for scheme, url in sorted(EXAMPLE_URLS.items()):
        try:
            yield scheme, broker.connect(url)
        except broker.errors.MissingDependency:
            continue


#: Capability-dependent members: (scheme -> whether it has the member), and how to call it.
CAPABILITY_MEMBERS: dict[str, tuple[Callable[[str, Any], bool], Callable[[Any], Any]]] = {
    "transactional_publisher": (
        lambda _, b: b.capabilities.transactions,
        lambda b: b.transactional_publisher(),
    ),
    "log": (lambda s, _: s in ("inmem", "kafka"), lambda b: b.log()),
    "queue_tracker": (lambda s, _: s == "kafka", lambda b: b.queue_tracker("orders")),
    "faults": (lambda s, _: s == "inmem", lambda b: b.faults.fail_publishes(1)),
}


@pytest.mark.parametrize("member", sorted(CAPABILITY_MEMBERS))
def test_a_capability_a_backend_lacks_raises_not_supported(member: str) -> None:
    has, call = CAPABILITY_MEMBERS[member]
    lacking = []
    for scheme, backend in _backends():
        try:
            assert isinstance(backend, Backend)
            if has(scheme, backend):
                continue
            lacking.append(scheme)
            with pytest.raises(NotSupported, match=f"the {backend.name} backend has no"):
                call(backend)
        finally:
            asyncio.run(backend.close())
    assert "rabbitmq" in lacking or "pubsub" in lacking, f"no backend without {member}: {lacking}"


async def test_the_in_memory_backend_has_its_capability_members_and_lacks_the_marker_queue() -> None:
    async with broker.connect("inmem://protocol-members") as backend:
        backend.faults.fail_publishes(1)
        assert backend.faults.active and backend.faults.injected == 0
        backend.faults.clear()
        log = backend.log()
        await log.create_topic("t", 2)
        assert await log.partitions("t") == 2
        async with backend.transactional_publisher() as publisher:
            await publisher.begin()
            await publisher.topic("t").publish(broker.OutboundMessage(b"x"))
            assert await publisher.commit()
        with pytest.raises(NotSupported, match="marker queue"):
            backend.queue_tracker("t")
        seen: list[Any] = []
        backend.on_publisher(seen.append)
        publisher = backend.publisher()
        assert seen == [publisher] and publisher in backend.resources
