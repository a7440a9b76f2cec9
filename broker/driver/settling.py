"""Settling for backend authors: acks in delivery order, and the unsettled-handler warnings receivers give.

The definitions live in :mod:`broker.settle` beside the public :func:`~broker.ack_all` family that
uses them; this module is where a backend imports them from.
"""

from broker.settle import UnsettledWarnings, ack_in_turn, handler_name

__all__ = ["UnsettledWarnings", "ack_in_turn", "handler_name"]
