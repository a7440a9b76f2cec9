"""The Amazon SQS/SNS backend: ``sqs://REGION`` (SNS mode) and ``sqs://REGION?mode=queue``.

=============================  ===================================================================
portable                       SQS / SNS
=============================  ===================================================================
topic                          SNS mode: an SNS topic; queue mode: an SQS queue
subscription                   SNS mode: the SQS queue ``<topic>--<subscription>``, subscribed to
                               the topic with raw message delivery (payload and attributes arrive
                               unchanged) and a queue policy that lets the topic send to it;
                               queue mode: every subscription name consumes the topic's one queue
                               (competing consumers)
publish                        ``Publish`` / ``SendMessage``; a batch in chunks of at most ten
                               and at most the request's limit (``PublishBatch`` 256 KiB,
                               ``SendMessageBatch`` 1 MiB), a partial failure a
                               :class:`BatchPublishError` naming the indices that failed
``messages()``                 ``ReceiveMessage`` with long polling (``wait_time``)
``ack``                        ``DeleteMessage`` (a batch of acks: ``DeleteMessageBatch``)
``ack_deadline``               the visibility timeout each receive asks for (whole seconds, up)
``in_progress``                ``ChangeMessageVisibility`` to the ack deadline
``nack(delay)``                ``ChangeMessageVisibility`` to ``delay`` (whole seconds, up; 12 h)
``delivery_attempt``           ``ApproximateReceiveCount``
``max_attempts``               queue mode under ``provision=create`` with a ``dead_letter_topic``:
                               the queue's ``RedrivePolicy`` (SQS moves the message after
                               ``maxReceiveCount`` receives); elsewhere the consumer publishes a
                               message received more often, or nacked on its last allowed
                               delivery, to ``dead_letter_topic`` and deletes it
FIFO (``fifo=true``)           ``.fifo`` topics and queues; the key is the ``MessageGroupId``, the
                               ``MessageDeduplicationId`` a digest of the message
=============================  ===================================================================

The size limit is checked before sending, else :class:`~broker.errors.MessageTooLarge` and nothing
of the batch is sent: 256 KiB per message on SNS (payload and attributes, as AWS counts them), the
queue's ``MaximumMessageSize`` (read at the first publish, up to 1 MiB) in queue mode; attributes
past the limit of 10 travel packed in one (:mod:`broker.backends.sqs.mapping`). The backend holds
one SNS and one SQS client (aiobotocore), made on first use and shared by the publisher and the
consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import SSLError

from broker import Capabilities, OutboundMessage
from broker.backends.sqs.consumer import SqsBatchedMessageIterator, SqsMessageIterator
from broker.backends.sqs.errors import error_code, translate
from broker.backends.sqs.mapping import deduplication_id, encoded_size, group_id, to_attributes, to_body
from broker.backends.sqs.registration import SqsFactory
from broker.backends.sqs.settings import (
    MAX_PAYLOAD_BYTES,
    MAX_QUEUE_PAYLOAD_BYTES,
    MAX_SNS_BYTES,
    MAX_SQS_BYTES,
    ConsumerOptions,
    SqsSettings,
    check_name,
)
from broker.driver.base import BackendBase, Batching
from broker.driver.publishing import DriverPublisher
from broker.errors import (
    BrokerError,
    ClosedError,
    MessageTooLarge,
    ProvisioningError,
    PublishError,
    Timeout,
    UnknownTopic,
)

if TYPE_CHECKING:
    from types_aiobotocore_sns import SNSClient
    from types_aiobotocore_sqs import SQSClient
else:
    SNSClient = SQSClient = Any

__all__ = [
    "CAPABILITIES",
    "BatchPublishError",
    "SqsBackend",
    "SqsConnection",
    "SqsPublishDriver",
    "queue_policy",
]

#: The claims and their mechanisms are ``SqsFactory.mechanisms``. Not ``per_key_order`` (standard
#: queues do not keep order; FIFO ones do per group, but a nacked message blocks only its group),
#: ``records``, nor ``backlog_for_new_subscriptions`` (a new subscription's queue starts empty).
CAPABILITIES = Capabilities.claiming(SqsFactory.mechanisms, max_message_bytes=MAX_PAYLOAD_BYTES)

#: Messages one ``PublishBatch`` / ``SendMessageBatch`` / ``DeleteMessageBatch`` takes.
BATCH = 10

#: A session token in botocore's DEBUG lines of a request (a header, a canonical header, a query).
_SECURITY_TOKEN = re.compile(r"(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)[^'\"&\s,}]+", re.IGNORECASE)


class _RedactSecurityToken(logging.Filter):
    """Replaces the session token in botocore's DEBUG lines of each request (``botocore.endpoint``
    logs its headers, ``botocore.auth`` its canonical request, ``X-Amz-Security-Token`` included):
    a session token is a credential."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "security-token" in message.lower():
            record.msg, record.args = _SECURITY_TOKEN.sub(r"\1***", message), None
        return True


_REDACT_SECURITY_TOKEN = _RedactSecurityToken()


def _no_retry_on_a_refused_certificate(caught_exception: BaseException | None = None, **_: Any) -> None:
    """Ends a call at once when the server's certificate failed verification: botocore's retries
    (three attempts with backoff, about 5 s) would only meet the same certificate again."""
    if isinstance(caught_exception, SSLError) and "certificate verify failed" in str(caught_exception):
        raise caught_exception


class BatchPublishError(PublishError):
    """Some messages of a batch were refused: :attr:`failed` holds their indices in the batch
    (the others were sent), :attr:`codes` AWS's error code for each."""

    def __init__(self, message: str, failed: Sequence[int], codes: Sequence[str]) -> None:
        super().__init__(message)
        #: Indices (in the batch published) of the messages that were not sent.
        self.failed = tuple(failed)
        #: AWS's error code for each index of :attr:`failed`.
        self.codes = tuple(codes)


def queue_policy(queue_arn: str, topic_arn: str) -> dict[str, Any]:
    """The queue policy that lets the SNS topic ``topic_arn`` send to the queue ``queue_arn`` (and
    nothing else: the source ARN is a condition). AWS drops what SNS delivers without it."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "polybroker-sns-to-sqs",
                "Effect": "Allow",
                "Principal": {"Service": "sns.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": topic_arn}},
            }
        ],
    }


class SqsConnection:
    """The backend's SNS and SQS clients, made on first use, closed once; and the names resolved."""

    def __init__(self, settings: SqsSettings) -> None:
        self.settings = settings
        self._stack: contextlib.AsyncExitStack | None = None
        self._clients: tuple[SNSClient, SQSClient] | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self.provision = settings.provision
        #: topic name -> SNS topic ARN (SNS mode) or queue URL (queue mode)
        self.targets: dict[str, str] = {}
        #: queue name -> queue URL
        self.queues: dict[str, str] = {}
        #: (topic, subscription) pairs whose subscription exists
        self.subscribed: set[tuple[str, str]] = set()
        #: topic name -> the largest message it takes (queue mode: the queue's ``MaximumMessageSize``)
        self.limits: dict[str, int] = {}

    def __repr__(self) -> str:
        s = self.settings
        return f"<SqsConnection {s.region} mode={s.mode}{' fifo' if s.fifo else ''}>"

    async def clients(self) -> tuple[SNSClient, SQSClient]:
        """The SNS and SQS clients."""
        if self._closed:
            raise ClosedError("the SQS connection is closed")
        if self._clients is None:
            async with self._lock:
                if self._clients is None:
                    s = self.settings
                    config = AioConfig(
                        connect_timeout=s.connect_timeout,
                        read_timeout=max(60.0, s.wait_time + 10.0),
                        retries={"mode": "standard", "max_attempts": 3},
                    )
                    common: dict[str, Any] = {
                        "region_name": s.region,
                        "endpoint_url": s.endpoint_url,
                        "config": config,
                    }
                    if s.tls_ca_file:
                        common["verify"] = s.tls_ca_file
                    if s.access_key_id:
                        common.update(
                            aws_access_key_id=s.access_key_id,
                            aws_secret_access_key=s.secret_access_key,
                            aws_session_token=s.session_token,
                        )
                    for logger in ("botocore.endpoint", "botocore.auth"):
                        logging.getLogger(logger).addFilter(_REDACT_SECURITY_TOKEN)
                    session = get_session()
                    stack = contextlib.AsyncExitStack()
                    sns = await stack.enter_async_context(session.create_client("sns", **common))
                    sqs = await stack.enter_async_context(session.create_client("sqs", **common))
                    # only a TLS endpoint (AWS's included) has a certificate to refuse: over plain
                    # http the handler would run on every request for nothing
                    tls = s.endpoint_url is None or s.endpoint_url.startswith("https://")
                    for client in (sns, sqs) if tls else ():
                        client.meta.events.register_first("needs-retry", _no_retry_on_a_refused_certificate)
                    self._stack, self._clients = stack, (sns, sqs)
        assert self._clients is not None
        return self._clients

    def name(self, name: str) -> str:
        """The AWS name of a topic or queue (``.fifo`` added on FIFO)."""
        return f"{name}.fifo" if self.settings.fifo else name

    async def queue_url(self, name: str, *, create: bool, visibility: int | None = None) -> str:
        """The URL of the queue ``name`` (created when missing and ``create``)."""
        url = self.queues.get(name)
        if url is not None:
            return url
        _, sqs = await self.clients()
        aws_name = self.name(name)
        if create:
            attributes: dict[Any, str] = {"MaximumMessageSize": str(MAX_SQS_BYTES)}
            if self.settings.fifo:
                attributes["FifoQueue"] = "true"
            if visibility is not None:
                attributes["VisibilityTimeout"] = str(visibility)
            try:
                url = (await sqs.create_queue(QueueName=aws_name, Attributes=attributes))["QueueUrl"]
            except Exception as exc:
                if error_code(exc) not in ("QueueAlreadyExists", "QueueNameExists"):
                    raise translate(exc, f"creating queue {aws_name!r}") from exc
                url = (await sqs.get_queue_url(QueueName=aws_name))["QueueUrl"]
        else:
            try:
                url = (await sqs.get_queue_url(QueueName=aws_name))["QueueUrl"]
            except Exception as exc:
                if error_code(exc).endswith(("NonExistentQueue", "QueueDoesNotExist")):
                    if self.provision == "verify":
                        raise ProvisioningError("sqs", [f"queue {aws_name!r}"]) from exc
                    raise UnknownTopic(f"no SQS queue {aws_name!r}") from exc
                raise translate(exc, f"looking up queue {aws_name!r}") from exc
        self.queues[name] = url
        return url

    async def topic_arn(self, topic: str) -> str:
        """The ARN of the SNS topic ``topic`` (created when missing under ``provision=create``)."""
        arn = self.targets.get(topic)
        if arn is not None:
            return arn
        sns, _ = await self.clients()
        aws_name = self.name(topic)
        if self.provision == "create":
            attributes = {"FifoTopic": "true"} if self.settings.fifo else {}
            try:
                arn = (await sns.create_topic(Name=aws_name, Attributes=attributes))["TopicArn"]
            except Exception as exc:
                raise translate(exc, f"creating SNS topic {aws_name!r}") from exc
        else:
            arn = await self._find_topic(aws_name)
        self.targets[topic] = arn
        return arn

    async def _find_topic(self, aws_name: str) -> str:
        sns, _ = await self.clients()
        try:
            paginator = sns.get_paginator("list_topics")
            async for page in paginator.paginate():
                for entry in page.get("Topics", ()):
                    arn = entry.get("TopicArn", "")
                    if arn.rsplit(":", 1)[-1] == aws_name:
                        return arn
        except Exception as exc:
            raise translate(exc, f"looking up SNS topic {aws_name!r}") from exc
        if self.provision == "verify":
            raise ProvisioningError("sqs", [f"SNS topic {aws_name!r}"])
        raise UnknownTopic(f"no SNS topic {aws_name!r}")

    async def target(self, topic: str) -> tuple[str, int]:
        """Where a publish to ``topic`` goes, the topic's ARN (SNS mode) or queue URL (queue mode),
        and the largest message it takes: SNS's 256 KiB, or the queue's ``MaximumMessageSize``
        (read once with ``GetQueueAttributes``)."""
        if self.settings.mode == "sns":
            return await self.topic_arn(topic), MAX_SNS_BYTES
        url = await self.queue_url(topic, create=self.provision == "create")
        limit = self.limits.get(topic)
        if limit is None:
            _, sqs = await self.clients()
            try:
                got = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
            except Exception as exc:
                raise translate(exc, f"reading the size limit of queue {self.name(topic)!r}") from exc
            values = got.get("Attributes", {})
            limit = self.limits[topic] = int(values.get("MaximumMessageSize", MAX_SNS_BYTES))
        return url, limit

    async def queue_arn(self, url: str) -> str:
        """The ARN of the queue at ``url``."""
        _, sqs = await self.clients()
        try:
            got = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except Exception as exc:
            raise translate(exc, f"reading the ARN of queue {url!r}") from exc
        return str(got["Attributes"]["QueueArn"])

    async def redrive(self, url: str, dead_letter_queue: str, max_receive_count: int) -> None:
        """Give the queue at ``url`` a native redrive policy: SQS itself moves a message received
        more than ``max_receive_count`` times to the queue ``dead_letter_queue`` (made if missing)."""
        dlq_url = await self.queue_url(dead_letter_queue, create=True)
        policy = {"deadLetterTargetArn": await self.queue_arn(dlq_url), "maxReceiveCount": max_receive_count}
        _, sqs = await self.clients()
        try:
            await sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps(policy)})
        except Exception as exc:
            raise translate(exc, f"setting the redrive policy of queue {url!r}") from exc

    async def subscription_queue(self, topic: str, subscription: str, visibility: int) -> str:
        """The URL of the queue a consumer of ``subscription`` reads (made and subscribed when
        missing under ``provision=create``)."""
        if self.settings.mode == "queue":
            return await self.queue_url(topic, create=self.provision == "create", visibility=visibility)
        name = f"{topic}--{subscription}"
        check_name(name, "subscription queue", self.settings.fifo)
        create = self.provision == "create"
        url = await self.queue_url(name, create=create, visibility=visibility)
        if create and (topic, subscription) not in self.subscribed:
            arn = await self.topic_arn(topic)
            sns, sqs = await self.clients()
            doing = f"subscribing queue {self.name(name)!r} to SNS topic {self.name(topic)!r}"
            queue_arn = await self.queue_arn(url)
            try:
                await sqs.set_queue_attributes(
                    QueueUrl=url, Attributes={"Policy": json.dumps(queue_policy(queue_arn, arn))}
                )
                await sns.subscribe(
                    TopicArn=arn,
                    Protocol="sqs",
                    Endpoint=queue_arn,
                    Attributes={"RawMessageDelivery": "true"},
                )
            except Exception as exc:
                raise translate(exc, doing) from exc
            self.subscribed.add((topic, subscription))
        return url

    async def close(self) -> None:
        """Close the clients (idempotent)."""
        self._closed = True
        stack, self._stack, self._clients = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception, TimeoutError):
                async with asyncio.timeout(self.settings.close_timeout):
                    await stack.aclose()


class SqsBackend(BackendBase):
    """SNS and SQS in one region (aiobotocore); connects on first use."""

    name = "sqs"
    capabilities = CAPABILITIES
    backlog_counts_in_flight = True
    provision_modes = ("create", "verify", "none")

    def __init__(self, settings: SqsSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or SqsSettings()
        self._check_provision()
        if self.settings.mode == "queue":
            # a queue takes up to 1 MiB (the ones this backend makes do); SNS takes 256 KiB
            self.capabilities = dataclasses.replace(CAPABILITIES, max_message_bytes=MAX_QUEUE_PAYLOAD_BYTES)
        self.connection = SqsConnection(self.settings)

    def __repr__(self) -> str:
        return f"<SqsBackend {self.connection!r}>"

    @property
    def messaging_publish_system(self) -> str:
        """The OpenTelemetry ``messaging.system`` of what publishing talks to: ``aws.sns`` in SNS mode
        (topics are SNS topics), ``aws_sqs`` in queue mode; consumers always read SQS (``aws_sqs``)."""
        return "aws.sns" if self.settings.mode == "sns" else "aws_sqs"

    def _driver(self) -> SqsPublishDriver:
        driver: SqsPublishDriver = self._shared_driver(lambda: SqsPublishDriver(self.connection))
        return driver

    def publisher(self) -> DriverPublisher:
        """A publisher over the backend's one publish driver (it shares the backend's clients)."""
        publisher = DriverPublisher(self._driver(), shared=True, close_timeout=self.settings.close_timeout)
        return self._track(publisher)  # type: ignore[no-any-return]

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return self.settings.consumer_options(options)

    def _open_messages(
        self, topic: str, subscription: str, options: ConsumerOptions, batching: Batching | None
    ) -> SqsMessageIterator | SqsBatchedMessageIterator:
        """Consume the queue of ``subscription`` (made when entered or on the first receive).

        Options: ``ack_deadline``, ``max_attempts``, ``dead_letter_topic``, ``wait_time``
        (:class:`~broker.backends.sqs.settings.ConsumerOptions`).
        """
        fifo = self.settings.fifo
        check_name(topic, "topic", fifo)
        check_name(subscription, "subscription", fifo)
        self._check_open()
        if batching is None:
            return SqsMessageIterator(self.connection, self._driver(), topic, subscription, options)
        return SqsBatchedMessageIterator(
            self.connection, self._driver(), topic, subscription, options, batching.size, batching.timeout
        )

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """``ApproximateNumberOfMessages`` plus ``...NotVisible`` of the subscription's queue
        (approximate, as SQS says); ``UnknownTopic`` without the queue."""
        self._check_open()
        name = topic if self.settings.mode == "queue" else f"{topic}--{subscription}"
        saved = self.connection.provision
        _, sqs = await self.connection.clients()
        try:
            url = self.connection.queues.get(name)
            if url is None:
                self.connection.provision = "none"
                url = await self.connection.queue_url(name, create=False)
        finally:
            self.connection.provision = saved
        try:
            got = await sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )
        except Exception as exc:
            raise translate(exc, f"reading the backlog of queue {name!r}") from exc
        values = got.get("Attributes", {})
        return int(values.get("ApproximateNumberOfMessages", 0)) + int(
            values.get("ApproximateNumberOfMessagesNotVisible", 0)
        )

    async def _ping(self, timeout: float) -> None:
        """``ListQueues`` with one result: answered only to credentials AWS accepts."""
        try:
            async with asyncio.timeout(timeout):
                _, sqs = await self.connection.clients()
                await sqs.list_queues(MaxResults=1)
        except TimeoutError as exc:
            raise Timeout(f"pinging SQS in {self.settings.region}: no answer") from exc
        except Exception as exc:
            raise translate(exc, f"pinging SQS in {self.settings.region}") from exc

    async def _close_connection(self) -> None:
        await self.connection.close()


class SqsPublishDriver:
    """A ``broker.driver.publishing.PublishDriver``: ``Publish``/``SendMessage`` and their batches.

    Every message is checked against the target's size limit before anything is sent (SNS: 256
    KiB; a queue: its ``MaximumMessageSize``, up to 1 MiB). A batch goes in chunks of at most ten
    messages and at most the request's aggregate limit (``PublishBatch`` 256 KiB, ``SendMessageBatch``
    1 MiB). On FIFO topics and queues each message's deduplication id is a digest of its key,
    payload and attributes, so sending the same message again (a retried publish) within AWS's
    five-minute window stores it once.
    """

    def __init__(self, connection: SqsConnection) -> None:
        self._connection = connection
        self._settings = connection.settings
        self._sns_mode = connection.settings.mode == "sns"
        self._fifo = connection.settings.fifo
        self._batch_bytes = MAX_SNS_BYTES if self._sns_mode else MAX_SQS_BYTES
        self._body_field = "Message" if self._sns_mode else "MessageBody"

    def check_topic(self, name: str) -> None:
        """Refuse names that cannot name a topic or queue."""
        check_name(name, "topic", self._fifo)

    def entry(self, message: OutboundMessage, index: int) -> tuple[dict[str, Any], int]:
        """The batch entry of ``message`` (``Id`` its index) and its size as AWS counts it."""
        body, encoding = to_body(message.data)
        if encoding is None and not message.attributes and (message.key is None or self._fifo):
            # the common case, a text payload and nothing else: no attribute to build or count
            attributes: dict[str, dict[str, str]] = {}
            size = len(body) if body.isascii() else len(body.encode())
        else:
            attributes = to_attributes(message, self._fifo, encoding)
            size = encoded_size(body, attributes)
        entry: dict[str, Any] = {"Id": str(index), self._body_field: body, "MessageAttributes": attributes}
        if self._fifo:
            entry["MessageGroupId"] = group_id(message)
            entry["MessageDeduplicationId"] = deduplication_id(message)
        return entry, size

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Send every message; return once AWS has them all. A message past the target's limit is
        :class:`MessageTooLarge` before anything is sent."""
        built = [self.entry(m, i) for i, m in enumerate(messages)]
        try:
            async with asyncio.timeout(self._settings.publish_timeout if timeout is None else timeout):
                target, limit = await self._connection.target(topic)
                for index, (_, size) in enumerate(built):
                    if size > limit:
                        name = self._connection.name(topic)
                        where = "an SNS topic" if self._sns_mode else f"queue {name!r}"
                        raise MessageTooLarge(
                            f"message {index} is {size} bytes as SQS/SNS count it (body and attributes), "
                            f"more than the {limit} {where} takes; nothing was sent"
                        )
                await self.send_entries(topic, target, built)
        except TimeoutError as exc:
            raise Timeout(f"publishing to {topic!r}: no answer from AWS in time") from exc
        except BrokerError:
            raise
        except Exception as exc:
            raise translate(exc, f"publishing to {topic!r}", PublishError) from exc

    async def send_entries(
        self, topic: str, target: str, built: Sequence[tuple[dict[str, Any], int]]
    ) -> None:
        """Send built entries to ``target`` (one ``Publish``/``SendMessage`` for one entry, else
        batches); AWS's ``Failed`` entries are a :class:`BatchPublishError` with their indices."""
        doing = f"publishing to {topic!r}"
        failed: list[tuple[int, str]] = []
        try:
            sns, sqs = await self._connection.clients()
            if len(built) == 1:
                entry = dict(built[0][0])
                del entry["Id"]
                if self._sns_mode:
                    await sns.publish(TopicArn=target, **entry)
                else:
                    await sqs.send_message(QueueUrl=target, **entry)
                return
            for chunk in self._chunks(built):
                if self._sns_mode:
                    answer: Any = await sns.publish_batch(TopicArn=target, PublishBatchRequestEntries=chunk)
                else:
                    answer = await sqs.send_message_batch(QueueUrl=target, Entries=chunk)
                failed.extend((int(f["Id"]), str(f.get("Code", ""))) for f in answer.get("Failed", ()))
        except BrokerError:
            raise
        except Exception as exc:
            raise translate(exc, doing, PublishError) from exc
        if failed:
            failed.sort()
            raise BatchPublishError(
                f"{doing}: {len(failed)} of {len(built)} messages were refused "
                f"(indices {[i for i, _ in failed]}, codes {sorted({c for _, c in failed})})",
                [i for i, _ in failed],
                [c for _, c in failed],
            )

    def _chunks(self, built: Sequence[tuple[dict[str, Any], int]]) -> list[Any]:
        """Consecutive entries, at most ten and at most the aggregate limit a request each."""
        if len(built) <= BATCH and sum([size for _, size in built]) <= self._batch_bytes:
            return [[entry for entry, _ in built]]  # one request (a batch of ten or fewer)
        chunks: list[list[dict[str, Any]]] = []
        chunk: list[dict[str, Any]] = []
        total = 0
        for entry, size in built:
            if chunk and (len(chunk) == BATCH or total + size > self._batch_bytes):
                chunks.append(chunk)
                chunk, total = [], 0
            chunk.append(entry)
            total += size
        if chunk:
            chunks.append(chunk)
        return chunks

    async def close(self) -> None:
        """Nothing of its own to release: the clients are the backend's."""
