"""The ``$management`` request/response operations of the fake, one function per operation.

A request is an AMQP message whose application property ``operation`` names the operation and
whose body is a map; the answer carries ``statusCode``/``statusDescription`` (and
``errorCondition`` on failure) as application properties and a map body, correlated to the
request's message id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from proton import UNDESCRIBED, Array, Data, Message, symbol, timestamp

from tests.servicebus_fake.entities import EntityError, Namespace, Queue, Topic, scheduled_time

__all__ = ["handle_management"]

VENDOR = "com.microsoft:"


class _Reply(Exception):
    """A non-200 answer without an entity error (e.g. 204 No Content)."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(str(value))


def _encoded(message: Message) -> bytes:
    return bytes(message.encode())


def _queue(namespace: Namespace, node: str) -> Queue:
    return namespace.queue(node)


def _renew_lock(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    queue = _queue(namespace, node)
    expirations = [timestamp(int(queue.renew(_uuid(t)) * 1000)) for t in _items(body.get("lock-tokens"))]
    return {"expirations": Array(UNDESCRIBED, Data.TIMESTAMP, *expirations)}


def _renew_session_lock(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    until = _queue(namespace, node).renew_session(str(body.get("session-id")))
    return {"expiration": timestamp(int(until * 1000))}


def _peek(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    queue = _queue(namespace, node)
    start = int(body.get("from-sequence-number") or 0)
    count = int(body.get("message-count") or 1)
    session_id = body.get("session-id")
    found = queue.peek(start, count, None if session_id is None else str(session_id))
    if not found:
        raise _Reply(204, "No messages to peek")
    return {"messages": [{"message": _encoded(s.annotated(None))} for s in found]}


def _receive_deferred(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    queue = _queue(namespace, node)
    seqs = [int(s) for s in _items(body.get("sequence-numbers"))]
    session_id = body.get("session-id")
    peek_lock = int(body.get("receiver-settle-mode", 1)) == 1
    locked = queue.receive_deferred(seqs, None if session_id is None else str(session_id))
    messages = []
    for stored, lock in locked:
        entry: dict[str, Any] = {"message": _encoded(stored.annotated(lock.until if peek_lock else None))}
        if peek_lock:
            entry["lock-token"] = lock.token
        else:
            queue.complete(lock.token)
        messages.append(entry)
    return {"messages": messages}


def _update_disposition(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    queue = _queue(namespace, node)
    status = str(body.get("disposition-status"))
    for token in (_uuid(t) for t in _items(body.get("lock-tokens"))):
        lock = queue.locks.get(token)
        delivery = None if lock is None else lock.delivery
        if status == "completed":
            queue.complete(token)
        elif status == "abandoned":
            queue.abandon(token)
        elif status == "defered":
            queue.defer(token)
        elif status == "suspended":
            reason = body.get("deadletter-reason")
            description = body.get("deadletter-description")
            queue.dead_letter(
                token,
                None if reason is None else str(reason),
                None if description is None else str(description),
            )
        else:
            raise EntityError("com.microsoft:argument-error", f"unknown disposition status {status!r}")
        if delivery is not None and not delivery.settled:
            delivery.settle()
    return {}


def _schedule(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    target = namespace.target(node)
    seqs = []
    for entry in _items(body.get("messages")):
        message = Message()
        message.decode(bytes(entry["message"]))
        when = scheduled_time(message) or time.time()
        if isinstance(target, Topic):
            seqs.append(target.add(message, when=max(when, time.time() + 0.001)))
        else:
            seqs.append(target.add(message, when=max(when, time.time() + 0.001)).seq)
    return {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, *seqs)}


def _cancel_scheduled(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    target = namespace.target(node)
    for seq in _items(body.get("sequence-numbers")):
        target.cancel_scheduled(int(seq))
    return {}


def _get_session_state(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    session = _queue(namespace, node).session(str(body.get("session-id")))
    return {"session-state": session.state}


def _set_session_state(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    session = _queue(namespace, node).session(str(body.get("session-id")))
    state = body.get("session-state")
    session.state = None if state is None else bytes(state)
    return {}


def _get_message_sessions(namespace: Namespace, node: str, body: dict[str, Any]) -> dict[str, Any]:
    queue = _queue(namespace, node)
    skip = int(body.get("skip") or 0)
    top = int(body.get("top") or 100)
    ids = queue.session_ids()[skip : skip + top]
    if not ids:
        raise _Reply(204, "No sessions")
    return {"skip": skip + len(ids), "sessions-ids": ids}


OPERATIONS: dict[str, Callable[[Namespace, str, dict[str, Any]], dict[str, Any]]] = {
    VENDOR + "renew-lock": _renew_lock,
    VENDOR + "renew-session-lock": _renew_session_lock,
    VENDOR + "peek-message": _peek,
    VENDOR + "receive-by-sequence-number": _receive_deferred,
    VENDOR + "update-disposition": _update_disposition,
    VENDOR + "schedule-message": _schedule,
    VENDOR + "cancel-scheduled-message": _cancel_scheduled,
    VENDOR + "get-session-state": _get_session_state,
    VENDOR + "set-session-state": _set_session_state,
    VENDOR + "get-message-sessions": _get_message_sessions,
}

_STATUS_BY_CONDITION = {
    "amqp:not-found": 404,
    "com.microsoft:message-not-found": 404,
    "com.microsoft:message-lock-lost": 410,
    "com.microsoft:session-lock-lost": 410,
    "com.microsoft:session-cannot-be-locked": 410,
    "amqp:not-allowed": 400,
    "amqp:invalid-field": 400,
    "com.microsoft:argument-error": 400,
    "amqp:not-implemented": 501,
}


def handle_management(namespace: Namespace, node: str, request: Message) -> Message:
    """Run the operation ``request`` names against the entity at ``node``; the response message."""
    properties = request.properties or {}
    operation = str(properties.get("operation", ""))
    body = request.body if isinstance(request.body, dict) else {}
    status, description, condition = 200, "OK", None
    result: dict[str, Any] = {}
    handler = OPERATIONS.get(operation)
    try:
        if handler is None:
            raise EntityError("amqp:not-implemented", f"the fake Service Bus has no operation {operation!r}")
        result = handler(namespace, node, {str(k): v for k, v in body.items()})
    except _Reply as reply:
        status, description = reply.status, reply.description
    except EntityError as exc:
        status = _STATUS_BY_CONDITION.get(exc.condition, 500)
        description, condition = exc.description, exc.condition
    reply_properties: dict[str, Any] = {"statusCode": status, "statusDescription": description}
    if condition is not None:
        reply_properties["errorCondition"] = symbol(condition)
    return Message(
        body=result,
        correlation_id=request.id,
        address=request.reply_to,
        properties=reply_properties,
    )
