"""Settings of the Service Bus backend: the connection, and per-consumer options.

Credentials (``connection_string``, ``shared_access_key``, ``sas_token``, ``credential``) are
:func:`~broker.driver.settings.secret` fields: they never appear in ``repr`` or in
:func:`~broker.driver.settings.describe`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from broker.driver.provision import Provision, reconcile_create_flag
from broker.driver.settings import (
    check_at_least,
    check_positive,
    field_values,
    normalize_choices,
    options_from,
    parse_url,
    secret,
)
from broker.errors import ConfigError

__all__ = ["MAX_BATCH_SIZE", "ConsumerOptions", "ReceiveMode", "ServiceBusSettings", "SubQueue"]

#: The largest ``batch_size`` a batched consumer accepts (lib-brokers' Service Bus limit).
MAX_BATCH_SIZE: Final = 5000

ReceiveMode = Literal["peek_lock", "receive_and_delete"]
SubQueue = Literal["", "dead_letter", "transfer_dead_letter"]
KeyTo = Literal["partition_key", "session_id"]


def check_batch_size(batch_size: int) -> None:
    """Raise :class:`~broker.errors.ConfigError` unless ``1 <= batch_size <= MAX_BATCH_SIZE``."""
    if batch_size > MAX_BATCH_SIZE:
        raise ConfigError(f"batch size needs to be at most {MAX_BATCH_SIZE} but {batch_size} was provided")
    if batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")


#: The properties of a Service Bus connection string (matched without regard to case), by their
#: lower-case name: those azure-servicebus reads (``_parse_conn_str``), less ``HostName``, an alias
#: of ``Endpoint`` it accepts for other services' strings (IoT Hub), which Service Bus never issues.
_CONNECTION_STRING_KEYS: Final = {
    "endpoint": "Endpoint",
    "sharedaccesskeyname": "SharedAccessKeyName",
    "sharedaccesskey": "SharedAccessKey",
    "sharedaccesssignature": "SharedAccessSignature",
    "entitypath": "EntityPath",
    "usedevelopmentemulator": "UseDevelopmentEmulator",
}
#: The properties whose values are credentials.
_SECRET_KEYS: Final = ("sharedaccesskey", "sharedaccesssignature")
#: What an unknown property's name must look like to be shown in an error: a pasted key or
#: signature that became a "name" (``...;<key>==``) is not shown.
_SHOWABLE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z_]{0,39}")
_MALFORMED: Final = (
    "a Service Bus connection string looks like "
    "'Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY'"
)


def check_connection_string(connection_string: str) -> dict[str, str]:
    """The properties of ``connection_string`` (lower-case keys); ``ConfigError`` when it is malformed.

    Checks what the SDK would only find at the first publish or receive (as a plain ``ValueError``),
    and more: ``Key=Value`` parts, no property twice, only the properties Service Bus defines
    (``Endpoint``, ``SharedAccessKeyName``, ``SharedAccessKey``, ``SharedAccessSignature``,
    ``EntityPath``, ``UseDevelopmentEmulator``; the SDK ignores any other, so a misspelt one would
    surface as a timeout at the first publish), an ``Endpoint=sb://host[:port]`` whose port is
    1-65535, both or neither of ``SharedAccessKeyName`` and ``SharedAccessKey``, exactly one of a key
    and a ``SharedAccessSignature``, and ``UseDevelopmentEmulator`` true or false. The values are
    never put into the error messages (they hold the key), nor is an unknown property's name that
    could be part of one.
    """
    if not isinstance(connection_string, str) or not connection_string.strip():
        raise ConfigError(f"the connection string is empty; {_MALFORMED}")
    properties: dict[str, str] = {}
    names: dict[str, str] = {}  # lower-case name -> the name as written
    for part in connection_string.strip().rstrip(";").split(";"):
        key, equals, value = part.partition("=")
        name = key.strip().lower()
        if not equals or not name:
            raise ConfigError(f"a connection string part is not Key=Value; {_MALFORMED}")
        if name in properties:
            shown = (
                key.strip()
                if name in _CONNECTION_STRING_KEYS or _SHOWABLE_NAME.fullmatch(key.strip())
                else None
            )
            raise ConfigError(
                f"the connection string gives {shown!r} twice" if shown else "a property is given twice"
            )
        if name in _CONNECTION_STRING_KEYS and not value.strip():
            raise ConfigError(f"the connection string gives {key.strip()!r} no value")
        properties[name] = value.strip()
        names[name] = key.strip()
    _check_known(properties, names)
    endpoint = properties.get("endpoint")
    if endpoint is None:
        raise ConfigError(f"the connection string has no Endpoint; {_MALFORMED}")
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme.lower() != "sb":
        raise ConfigError(f"the connection string's Endpoint must start with sb://; {_MALFORMED}")
    host = rest.split("/", 1)[0]
    if not host:
        raise ConfigError(f"the connection string's Endpoint names no host; {_MALFORMED}")
    parse_url(f"sb://{host}")  # ConfigError for a bad host or port
    has_name, has_key = "sharedaccesskeyname" in properties, "sharedaccesskey" in properties
    if has_name != has_key:
        raise ConfigError("the connection string needs both SharedAccessKeyName and SharedAccessKey")
    signature = "sharedaccesssignature" in properties
    if has_key and signature:
        raise ConfigError("the connection string may hold SharedAccessKey or SharedAccessSignature, not both")
    if not has_key and not signature:
        raise ConfigError(
            "the connection string needs SharedAccessKeyName + SharedAccessKey or a SharedAccessSignature"
        )
    emulator = properties.get("usedevelopmentemulator")
    if emulator is not None and emulator.lower() not in ("true", "false"):
        raise ConfigError("UseDevelopmentEmulator in the connection string must be true or false")
    return properties


def _check_known(properties: dict[str, str], names: dict[str, str]) -> None:
    """``ConfigError`` naming the properties of a connection string that Service Bus does not define.

    A name is shown only when it looks like a property name and is no part of a credential's value:
    a key pasted without its ``SharedAccessKey=`` would otherwise be echoed in the error.
    """
    unknown = [name for name in properties if name not in _CONNECTION_STRING_KEYS]
    if not unknown:
        return
    secrets = [properties[key].lower() for key in _SECRET_KEYS if properties.get(key)]
    shown = [
        repr(names[name])
        for name in unknown
        if _SHOWABLE_NAME.fullmatch(names[name]) and not any(name in value for value in secrets)
    ]
    hidden = len(unknown) - len(shown)
    if hidden:
        shown.append(f"{hidden} whose name is not shown (it may be part of a key)")
    raise ConfigError(
        f"unknown connection string propert{'y' if len(unknown) == 1 else 'ies'}: {', '.join(shown)}; "
        f"a Service Bus connection string may hold {', '.join(_CONNECTION_STRING_KEYS.values())}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Options of one consumer (``Backend.messages(..., **options)``); defaults come from the settings.

    :class:`ServiceBusSettings` inherits these fields: they are declared here only.
    """

    #: ``peek_lock`` (settle each message) or ``receive_and_delete`` (removed on delivery; ack is a no-op).
    receive_mode: ReceiveMode = "peek_lock"
    #: Messages the SDK asks for ahead of the application (its ``prefetch_count``); 0 = off.
    prefetch: int = 0
    #: Longest single wait of one SDK receive call, in seconds (``next_message(timeout=None)`` loops).
    max_wait: float = 5.0
    #: Seconds for which the consumer renews each unsettled message's lock (at half its time); 0 = off.
    lock_renewal: float = 0.0
    #: Receive from sessions: a named ``session_id``, or the next available session when it is None.
    sessions: bool = False
    #: The session to receive from (implies ``sessions``).
    session_id: str | None = None
    #: Largest batch a batched consumer returns (at most 5000).
    batch_size: int = 100
    #: Read a sub-queue instead of the entity: ``dead_letter`` or ``transfer_dead_letter``.
    sub_queue: SubQueue = ""
    #: Portable: seconds after which a message handed out and not settled is redelivered. The
    #: consumer renews its lock until then and abandons it at the deadline. A consumer that dies
    #: renews nothing, so Service Bus redelivers when the entity's lock duration runs out: an entity
    #: whose lock duration is longer than ``ack_deadline`` cannot honour it (``ConfigError`` at the
    #: first message; set the entity's LockDuration to at most ``ack_deadline``).
    ack_deadline: float | None = None
    #: Portable: deliveries after which a message is dead-lettered instead of redelivered (a nack of
    #: the last one dead-letters; a message whose lock expired on it is dead-lettered on receipt).
    #: The entity's own MaxDeliveryCount still applies: keep it above this.
    max_attempts: int | None = None
    #: Portable: the queue or topic dead-lettered messages are sent to (None: the entity's
    #: ``$DeadLetterQueue``), like the entity property ForwardDeadLetteredMessagesTo.
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        normalize_choices(self)
        check_at_least(0, prefetch=self.prefetch)
        check_positive("seconds", max_wait=self.max_wait)
        check_at_least(0, "seconds", lock_renewal=self.lock_renewal)
        check_batch_size(self.batch_size)
        if self.session_id is not None and not self.session_id:
            raise ConfigError("session_id must be a non-empty string or None")
        if self.ack_deadline is not None:
            check_positive("seconds", ack_deadline=self.ack_deadline)
            if self.lock_renewal:
                raise ConfigError("give ack_deadline or lock_renewal, not both")
            if self.receive_mode == "receive_and_delete":
                raise ConfigError("ack_deadline needs receive_mode peek_lock (received messages are deleted)")
        if self.max_attempts is not None:
            check_at_least(1, max_attempts=self.max_attempts)
        if self.dead_letter_topic is not None and not self.dead_letter_topic:
            raise ConfigError("dead_letter_topic must be a queue or topic name or None")

    @property
    def uses_sessions(self) -> bool:
        """True when receiving goes through session receivers."""
        return self.sessions or self.session_id is not None


@dataclass(frozen=True, slots=True)
class ServiceBusSettings(ConsumerOptions):
    """``servicebus://NAMESPACE?...`` or a connection string: how to reach a Service Bus namespace.

    Give either ``connection_string`` (``Endpoint=sb://...;SharedAccessKeyName=...;...``), or a
    ``namespace`` (``myns`` stands for ``myns.servicebus.windows.net``) with one credential:
    ``shared_access_key_name`` + ``shared_access_key``, a ``sas_token``, or ``credential`` (an
    ``azure.core`` async token credential object, e.g. ``DefaultAzureCredential``). The consumer
    defaults (keyword-only) are the fields inherited from :class:`ConsumerOptions`; they can be
    overridden per consumer.
    """

    connection_string: str | None = secret()
    namespace: str | None = None
    shared_access_key_name: str | None = None
    shared_access_key: str | None = secret()
    sas_token: str | None = secret()
    credential: object | None = secret()
    #: TLS to the namespace (a connection string with ``UseDevelopmentEmulator=true`` turns it off).
    #: The certificate chain and the host name are always verified; no setting turns that off.
    use_tls: bool = True
    #: CA bundle that verifies the namespace's certificate (the SDK's ``connection_verify``;
    #: default: the system's CAs).
    tls_ca_file: str | None = None
    #: Connect here instead of the namespace's own host (``sb://host:port``: a proxy, a gateway, a
    #: test server); its host name is the one the certificate must name (``custom_endpoint_address``).
    custom_endpoint_address: str | None = None
    #: What a message key becomes on publish (and is read back from): partition key or session id.
    key_to: KeyTo = "partition_key"
    #: The attribute whose value becomes the message's ``MessageId`` on publish (and is taken out of the
    #: application properties), so Service Bus duplicate detection can drop a retried publish.
    message_id_attribute: str = "MessageId"
    #: Retries of the SDK for a failed operation.
    retry_total: int = 3
    #: Create missing queues, topics and subscriptions through the management API: a consumer
    #: creates what it reads when it is entered, a publisher creates a missing topic at its first
    #: send. Needs the Manage right; without it (or with False) a missing entity is ``UnknownTopic``.
    #: Unset, it follows ``provision``; ``false`` is the other spelling of ``provision=none``, and
    #: ``true`` with ``provision`` other than ``create`` is a ``ConfigError``.
    create_missing: bool | None = None
    #: Where the management API is (``https://NAMESPACE`` by default; ``http://HOST:5300`` for a
    #: connection string with ``UseDevelopmentEmulator=true``, the port of Microsoft's emulator).
    management_endpoint: str | None = None
    #: Whether missing queues, topics and subscriptions are created (:mod:`broker.driver.provision`):
    #: ``create``, ``verify`` (looked up through the management API; a missing one is a
    #: ``ProvisioningError`` naming it) or ``none`` (a missing one is ``UnknownTopic``), the latter
    #: also spelled ``create_missing=false``.
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        provision, create = reconcile_create_flag("servicebus", self.provision, self.create_missing)
        object.__setattr__(self, "provision", provision)
        object.__setattr__(self, "create_missing", create)
        if self.connection_string is not None:
            check_connection_string(self.connection_string)
            if self.namespace is not None:
                raise ConfigError("give either connection_string or namespace, not both")
        elif not self.namespace:
            raise ConfigError("the servicebus backend needs a connection_string or a namespace")
        else:
            parse_url(f"sb://{self.namespace}")  # ConfigError for a bad host or port
            keyed = self.shared_access_key_name is not None or self.shared_access_key is not None
            if keyed and (self.shared_access_key_name is None or self.shared_access_key is None):
                raise ConfigError("shared_access_key_name and shared_access_key go together")
            given = sum((keyed, self.sas_token is not None, self.credential is not None))
            if given != 1:
                raise ConfigError(
                    "a namespace needs exactly one credential: shared_access_key_name + shared_access_key, "
                    "sas_token, or credential (an azure.core async token credential)"
                )
        if isinstance(self.credential, str | bytes):
            raise ConfigError("credential must be a token credential object; give a SAS string as sas_token")
        if self.management_endpoint is not None:
            scheme, sep, rest = self.management_endpoint.partition("://")
            if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
                raise ConfigError(
                    "management_endpoint must be an http:// or https:// URL, "
                    f"got {self.management_endpoint!r}"
                )
            parse_url(f"{scheme.lower()}://{rest.rstrip('/')}")  # ConfigError for a bad host or port
        check_at_least(0, retry_total=self.retry_total)
        options_from(ConsumerOptions, self)  # validates the consumer defaults

    @property
    def fully_qualified_namespace(self) -> str | None:
        """The namespace host (``myns`` becomes ``myns.servicebus.windows.net``)."""
        namespace = self.namespace
        if namespace is None:
            return None
        if "." in namespace or ":" in namespace:
            return namespace
        return f"{namespace}.servicebus.windows.net"

    def consumer_defaults(self) -> dict[str, Any]:
        """The consumer options this connection uses unless a consumer overrides them."""
        return field_values(ConsumerOptions, self)
