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

from collections.abc import Awaitable, Callable, Iterable
from typing import get_args

from broker.backend import Provision
from broker.errors import ConfigError, ProvisioningError

__all__ = ["PROVISION_MODES", "Provision", "StartCheck", "check_provision", "reconcile_create_flag"]


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


def reconcile_create_flag(
    backend: str, provision: Provision, flag: bool | None, flag_name: str = "create_missing"
) -> tuple[Provision, bool]:
    """``provision`` and a backend's own on/off creation setting (``flag_name``) made one answer.

    Some backends have a creation switch of their own (Pub/Sub's and Service Bus's
    ``create_missing``); it stays, and means the same thing:

    - unset (None): it follows ``provision`` (on under ``create``, off otherwise);
    - ``False`` under ``create`` (the default) is the other spelling of ``provision="none"``,
      so the settings read ``none``;
    - ``True`` under ``verify`` or ``none`` contradicts it: :class:`~broker.errors.ConfigError`.

    Returns ``(provision, flag)`` as the settings should hold them.
    """
    if flag is None:
        return provision, provision == "create"
    if flag and provision != "create":
        raise ConfigError(
            f"{backend}: provision={provision!r} creates nothing, but {flag_name}=true asks to create "
            f"missing resources; drop {flag_name} (provision decides) or use provision='create'"
        )
    if not flag and provision == "create":
        return "none", False
    return provision, flag


class StartCheck:
    """Mixin of the consumers: a check (``verify``'s topic check) awaited once before they start.

    The backend sets :attr:`start_check`; the consumer awaits :meth:`_checked_start` when it is
    entered and before its first fetch. A ``ProvisioningError`` closes the consumer (it can never
    deliver) and is raised; another error (the cluster did not answer) leaves the check to be
    asked again by the next call.
    """

    #: Awaited before the consumer starts (None: nothing to check).
    start_check: Callable[[], Awaitable[None]] | None = None

    async def close(self) -> None:
        """Release the consumer (the class mixed with this one implements it)."""

    async def _checked_start(self) -> None:
        check, self.start_check = self.start_check, None
        if check is None:
            return
        try:
            await check()
        except ProvisioningError:
            await self.close()
            raise
        except BaseException:
            self.start_check = check
            raise
