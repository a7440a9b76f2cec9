"""The ``provision`` setting: whether a backend creates, verifies or leaves alone the resources it uses.

Every backend's settings carry ``provision``:

- ``"create"`` (the default): topics, subscriptions, queues and streams the application names are
  created when missing, with the backend's documented defaults;
- ``"verify"``: nothing is created; a missing resource is a :class:`~broker.errors.ProvisioningError`
  naming it, and :meth:`Backend.ping <broker.Backend.ping>` checks the resources the settings name;
- ``"none"``: nothing is created and nothing is checked beforehand; the broker's own error surfaces
  when a resource is missing (for estates where the application may not even read the topology).

A backend declares which modes it implements in :attr:`BackendBase.provision_modes
<broker.driver.base.BackendBase.provision_modes>`; connecting with another is a ``ConfigError``
(never a silent ``create``). Under ``verify``, :meth:`BackendBase.ping` calls the backend's
:meth:`~broker.driver.base.BackendBase.missing_resources` hook and raises ``ProvisioningError`` when
it names any.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

from broker.errors import ConfigError

__all__ = ["PROVISION_MODES", "Provision", "check_provision"]

#: The values of the ``provision`` setting.
Provision = Literal["create", "verify", "none"]

#: Every mode, in the order the docs give them.
PROVISION_MODES: tuple[Provision, ...] = get_args(Provision)


def check_provision(backend: str, mode: str, supported: Iterable[str]) -> Provision:
    """``mode`` as a :data:`Provision`; ``ConfigError`` unless it is one the backend implements."""
    if mode not in PROVISION_MODES:
        raise ConfigError(
            f"{backend}: provision={mode!r} is not one of {', '.join(map(repr, PROVISION_MODES))}"
        )
    modes = tuple(supported)
    if mode not in modes:
        raise ConfigError(
            f"{backend}: provision={mode!r} is not implemented by this backend "
            f"(it offers {', '.join(map(repr, modes))})"
        )
    return next(known for known in PROVISION_MODES if known == mode)
