"""The ``provision`` setting on Kafka (:mod:`broker.driver.provision`): what each mode does here.

- ``create``: topics are created as the backend always did (the broker's auto-creation on first
  produce or metadata request where the cluster allows it; the marker queue's topics by its
  tracker; the log port's ``create_topic``);
- ``verify``: no client asks the broker to auto-create (``allow.auto.create.topics=false``) and the
  marker queue creates nothing; a publisher checks a topic before its first send, a consumer
  checks its topics when it starts (``describe_topics``, which creates nothing), and a missing one
  is a :class:`~broker.errors.ProvisioningError` naming it;
- ``none``: nothing is created and nothing is checked beforehand; the broker's own answer
  surfaces (librdkafka fails a produce to a missing topic with ``UnknownTopic`` or a ``Timeout``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from broker.driver.provision import StartCheck
from broker.errors import ProvisioningError

__all__ = ["StartCheck", "TopicCheck", "TopicLister", "topic_resource"]


def topic_resource(name: str) -> str:
    """How a ``ProvisioningError`` names the topic ``name``."""
    return f"topic {name!r}"


class TopicLister(Protocol):
    """What :class:`TopicCheck` needs of the admin client (``KafkaAdmin``)."""

    async def missing_topics(self, topics: Iterable[str]) -> list[str]:
        """The names among ``topics`` the cluster does not have."""


class TopicCheck:
    """Under ``provision="verify"``: the topics a consumer or publisher names exist, asked once each.

    Calling it raises :class:`~broker.errors.ProvisioningError` naming every missing topic; a
    topic found once is not asked about again (topics are not expected to vanish under a running
    application, and a publisher's hot path stays one set lookup).
    """

    __slots__ = ("_admin", "_found")

    def __init__(self, admin: TopicLister) -> None:
        self._admin = admin
        self._found: set[str] = set()

    async def __call__(self, topics: Iterable[str]) -> None:
        """``ProvisioningError`` unless every one of ``topics`` exists."""
        unknown = [name for name in dict.fromkeys(topics) if name not in self._found]
        if not unknown:
            return
        missing = await self._admin.missing_topics(unknown)
        self._found.update(name for name in unknown if name not in missing)
        if missing:
            raise ProvisioningError("kafka", [topic_resource(name) for name in missing])
