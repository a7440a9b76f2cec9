"""The ``broker`` command: a demo, publish and consume from a terminal, and local dev servers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from broker import __version__
from broker.cli import commands, running

DESCRIPTION = """\
polybroker: one Python API for Kafka, NATS JetStream, Google Pub/Sub, Pulsar, Azure Service Bus,
RabbitMQ, Redis Streams and an in-memory broker. A broker is chosen by URL:

  inmem://NAME              in-memory, inside this process (the default; nothing to install)
  kafka://HOST:PORT         Kafka (pip install 'polybroker[kafka]')
  nats://HOST:PORT          NATS JetStream (pip install 'polybroker[nats]')
  pubsub://PROJECT          Google Cloud Pub/Sub (pip install 'polybroker[pubsub]')
  pulsar://HOST:PORT        Apache Pulsar (pip install 'polybroker[pulsar]')
  servicebus://NAMESPACE    Azure Service Bus, or a connection string (pip install 'polybroker[servicebus]')
  rabbitmq://USER:PASSWORD@HOST:PORT/VHOST
                            RabbitMQ (pip install 'polybroker[rabbitmq]')
  redis://[USER:PASSWORD@]HOST:PORT[/DB]
                            Redis Streams; rediss:// over TLS (pip install 'polybroker[redis]')
  sqs://REGION[?mode=queue]
                            SNS topics and SQS queues, or plain SQS queues (pip install 'polybroker[sqs]')

Settings go in the query string: kafka://localhost:9092?group_id=orders
"""

EPILOG = """\
examples:
  broker demo                                   walk through publish, ack, nack and redelivery
  broker dev kafka                              start a local Kafka-compatible broker, print its URL
  echo hello | broker publish kafka://127.0.0.1:9092 greetings
  broker consume kafka://127.0.0.1:9092 greetings --count 1
  broker queue tracker kafka://127.0.0.1:9092 orders   redeliver unacked messages of 'orders'
  broker backends                               list installed backends and what they support
  broker run myservice:app --workers 2          serve a broker.App in two worker processes
  broker asyncapi myservice:app --yaml          print the app's AsyncAPI 3.0 document
"""


def kafka_hot_path() -> str:
    """Which variant of the Kafka hot path this installation runs (compiled or pure Python).

    Asked by name when ``--version`` is given, so the core imports no backend.
    """
    try:
        mapping = importlib.import_module("broker.backends.kafka.mapping")
    except ImportError as exc:  # pragma: no cover - the Kafka package ships with the core
        return f"not available ({exc})"
    return str(mapping.FASTPATH_VARIANT)


class _Version(argparse.Action):
    """``--version``: the package version, and the Kafka hot path's variant."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        # The version alone on standard output, as argparse's own action prints it (scripts read
        # it); the hot path beside it, for a person reading the terminal.
        print(f"polybroker {__version__}")
        sys.stdout.flush()
        parser.exit(message=f"Kafka hot path: {kafka_hot_path()}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``broker`` command."""
    parser = argparse.ArgumentParser(
        prog="broker",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="log what the library does")
    parser.add_argument("--version", action=_Version, help="show the version and the Kafka hot path in use")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="a guided tour: publish, consume, ack, nack, redelivery")
    demo.add_argument(
        "--url",
        default="inmem://demo?partitions=2",
        help="broker to run the demo on (default: the in-memory one)",
    )
    demo.set_defaults(run=commands.demo)

    publish = sub.add_parser(
        "publish",
        help="publish each line of standard input as one message",
        description="Publish each line of standard input as one message.",
    )
    publish.add_argument("url", help="broker URL, e.g. kafka://127.0.0.1:9092")
    publish.add_argument("topic", help="topic (subject, queue) to publish to")
    publish.add_argument("--key", help="key of every message (ordering/partitioning)")
    publish.add_argument(
        "--attribute",
        "-a",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an attribute (repeatable)",
    )
    publish.add_argument(
        "--json",
        action="store_true",
        help='read JSON lines: {"data": "...", "key": "...", "attributes": {...}}',
    )
    publish.add_argument(
        "--typed",
        choices=["json", "msgpack"],
        help='each line (with --json: its "data") is a JSON value, published as a typed message in this '
        "format with its content-type (with --cloudevents: the format of the events' data)",
    )
    publish.add_argument(
        "--cloudevents",
        choices=["binary", "structured"],
        help='each line is a CloudEvent in the JSON event format ({"type": ..., "source": ..., "data": ...}; '
        "id and time default to a new UUID and now), published in this content mode",
    )
    publish.set_defaults(run=commands.publish)

    consume = sub.add_parser(
        "consume",
        help="print messages as they arrive (acking each)",
        description=(
            "Print messages as they arrive, acking each unless --no-ack. SIGTERM or Ctrl-C stops "
            "gracefully: the message being printed is finished, what was taken and not printed is nacked."
        ),
    )
    consume.add_argument("url", help="broker URL")
    consume.add_argument("topic", help="topic to consume")
    consume.add_argument("--subscription", "-s", default="broker-cli", help="subscription / consumer group")
    consume.add_argument("--count", "-n", type=int, default=0, help="stop after N messages (default: run on)")
    consume.add_argument("--timeout", type=float, default=None, help="stop after SECONDS with no message")
    consume.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: the payload; json: JSON lines with key, attributes, ids, the decoded value of a typed "
        'message and a CloudEvent\'s attributes ("cloudevent")',
    )
    consume.add_argument("--json", action="store_true", help="the same as --format json")
    consume.add_argument("--no-ack", action="store_true", help="nack instead of ack (messages come back)")
    consume.add_argument("--concurrency", type=int, default=1, help="messages handled at a time (default 1)")
    consume.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM/Ctrl-C, seconds to let running handlers finish (default 30)",
    )
    consume.set_defaults(run=commands.consume)

    dev = sub.add_parser(
        "dev",
        help="start a local broker server for development and print its URL",
        description="Start a local server for a backend (bound to 127.0.0.1) and keep it up until Ctrl-C.",
    )
    dev.add_argument("backend", help="kafka, nats, pubsub, pulsar, rabbitmq, redis or sqs (a fake: moto)")
    dev.add_argument("--port", type=int, default=None, help="port to listen on (default: a free one)")
    dev.set_defaults(run=commands.dev)

    queue = sub.add_parser("queue", help="the marker-topic queue that gives Kafka per-message acks")
    queue_sub = queue.add_subparsers(dest="queue_command", metavar="QUEUE_COMMAND", required=True)
    tracker = queue_sub.add_parser(
        "tracker",
        help="run a redelivery tracker for a topic until Ctrl-C",
        description=(
            "Redeliver messages of TOPIC that were received but neither acked nor kept alive in time. "
            "Every consumer runs one by default; run this one as well (or alone, with consumers opened "
            "with embedded_tracker=false) for fail-over. Several trackers share the work."
        ),
    )
    tracker.add_argument("url", help="broker URL, e.g. kafka://127.0.0.1:9092")
    tracker.add_argument("topic", help="the topic consumed with per-message acks")
    tracker.add_argument("--marker-topic", help="markers topic (default: TOPIC.markers)")
    tracker.add_argument("--ack-deadline", type=float, help="redelivery timeout in seconds (default 60)")
    tracker.add_argument("--max-attempts", type=int, help="deliveries before dead-lettering")
    tracker.add_argument("--dead-letter-topic", help="where messages go after --max-attempts")
    tracker.add_argument(
        "--group", help="the trackers' consumer group (default: kafka-mq-redelivery-MARKER_TOPIC)"
    )
    tracker.add_argument(
        "--go-fleet",
        action="store_true",
        help="share the topics with kafka-mq-go: per-message markers, its tracker group kafka-mq-redelivery",
    )
    tracker.add_argument(
        "--max-failures",
        type=int,
        default=10,
        help=(
            "exit with status 1 after this many tracker failures in a row, e.g. the broker unreachable "
            "(default 10; 0: keep restarting forever)"
        ),
    )
    tracker.set_defaults(run=commands.queue_tracker)

    backends = sub.add_parser("backends", help="list the installed backends and their capabilities")
    backends.add_argument(
        "--matrix", action="store_true", help="print the capability matrix (Markdown) at default settings"
    )
    backends.set_defaults(run=commands.backends)

    serve = sub.add_parser(
        "run",
        help="serve a broker.App (pkg.module:app or path/to/file.py:app) until SIGTERM",
        description=(
            "Serve the broker.App TARGET names until SIGTERM or Ctrl-C: the first signal drains every "
            "worker (running handlers finish, the rest is nacked for redelivery), a second cuts the "
            "drain short. The broker URL is --url, else POLYBROKER_URL; the app's own settings come "
            "from the environment as well."
        ),
    )
    serve.add_argument("target", help="pkg.module:app or path/to/file.py:app (':app' may be left out)")
    serve.add_argument("--url", help="the default backend's URL (overrides POLYBROKER_URL and the app's own)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes, one consumer group (default 1; more need a server broker, not inmem://)",
    )
    serve.add_argument(
        "--reload",
        action="store_true",
        help="restart the workers (drain, then start) when a Python file changes (the 'reload' extra)",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM, seconds running handlers get to finish (default 30)",
    )
    serve.set_defaults(run=running.command)

    spec = sub.add_parser(
        "asyncapi",
        help="write the AsyncAPI 3.0 document of a broker.App",
        description=(
            "Write the AsyncAPI 3.0 document of the broker.App TARGET names: its servers (credentials "
            "left out), channels, send and receive operations and message payloads as JSON Schema."
        ),
    )
    spec.add_argument("target", help="pkg.module:app or path/to/file.py:app (':app' may be left out)")
    spec.add_argument("--url", help="the default backend's URL (overrides POLYBROKER_URL and the app's own)")
    spec.add_argument("--yaml", action="store_true", help="YAML instead of JSON (needs PyYAML)")
    spec.add_argument("--output", "-o", help="the file to write (default: standard output)")
    spec.add_argument("--title", help="info.title (default: the target's module name)")
    spec.add_argument("--app-version", default="0.1.0", help="info.version (default 0.1.0)")
    spec.set_defaults(run=running.asyncapi_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``broker`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    commands.configure_logging(args.verbose)
    with contextlib.suppress(KeyboardInterrupt):
        try:
            result: int = asyncio.run(args.run(args))
        except commands.CommandError as exc:
            print(f"broker {args.command}: {exc}", file=sys.stderr)
            return exc.status
        return result
    return 130


if __name__ == "__main__":
    sys.exit(main())
