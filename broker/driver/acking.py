"""Acknowledgement for backend authors: the ``Acker`` a backend gives its messages, and the claims.

A backend builds each :class:`~broker.Message` with an :class:`Acker` (and a :class:`Committer`
for records); the message claims its settlement once (:func:`claim_ack`, :func:`claim_acks`) so
an ack and a nack racing each other settle it one way. The definitions live beside
:class:`~broker.Message` because its methods use them; this module is where a backend imports
them from.
"""

from broker.message import (
    EMPTY_ATTRIBUTES,
    UNDECODED,
    Acker,
    BulkAcker,
    Committer,
    DeadLetterAcker,
    LazyMessage,
    NativePropertiesAcker,
    acks_in_bulk,
    can_dead_letter,
    claim_ack,
    claim_acks,
    has_native_properties,
    late_ack_error,
    late_acks,
    own_acker,
    release_claim,
    start_ack_deadline,
)

__all__ = [
    "EMPTY_ATTRIBUTES",
    "UNDECODED",
    "Acker",
    "BulkAcker",
    "Committer",
    "DeadLetterAcker",
    "LazyMessage",
    "NativePropertiesAcker",
    "acks_in_bulk",
    "can_dead_letter",
    "claim_ack",
    "claim_acks",
    "has_native_properties",
    "late_ack_error",
    "late_acks",
    "own_acker",
    "release_claim",
    "start_ack_deadline",
]
