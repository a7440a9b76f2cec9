"""The SDK clients of one backend, built from its settings.

Two kinds are used: the SDK's threaded clients (``pubsub_v1.PublisherClient`` for its batching
and ordering, ``pubsub_v1.SubscriberClient`` for streaming pull with lease management), and the
generated asyncio clients (``PublisherAsyncClient`` / ``SubscriberAsyncClient``) for everything
unary: creating topics and subscriptions, pull, ack, modack. The asyncio clients are made on
first use inside the running event loop and belong to that loop.

With ``emulator_host`` every client talks plain-text gRPC to that address with anonymous
credentials; nothing is written to ``os.environ``. Otherwise credentials come from the
settings (a file or its JSON content) or Application Default Credentials, and ``endpoint``
overrides the API endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import Any

import grpc  # type: ignore[import-untyped]
from google.api_core.client_options import ClientOptions
from google.cloud import pubsub_v1  # type: ignore[import-untyped]
from google.pubsub_v1.services.publisher import PublisherAsyncClient
from google.pubsub_v1.services.publisher.transports import (
    PublisherGrpcAsyncIOTransport,
    PublisherGrpcTransport,
)
from google.pubsub_v1.services.subscriber import SubscriberAsyncClient
from google.pubsub_v1.services.subscriber.transports import (
    SubscriberGrpcAsyncIOTransport,
    SubscriberGrpcTransport,
)

from broker.backends.pubsub.settings import PubsubSettings
from broker.errors import ClosedError, ConfigError

__all__ = ["Clients"]

_SCOPES = ("https://www.googleapis.com/auth/pubsub",)
# As the SDK's own channels: no client-side message size limits (the server enforces 10 MB).
_CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)


class Clients:
    """Builds and owns the SDK clients of one backend."""

    def __init__(self, settings: PubsubSettings) -> None:
        self.settings = settings
        #: ``host:port`` of the emulator in use, or None for Google Cloud.
        self.emulator_host: str | None = (
            settings.emulator_host or os.environ.get("PUBSUB_EMULATOR_HOST") or None
        )
        self._credentials: Any = None
        self._credentials_loaded = False
        self._subscriber: Any = None
        self._async: (
            tuple[asyncio.AbstractEventLoop, PublisherAsyncClient, SubscriberAsyncClient, Any] | None
        ) = None
        self._closed = False

    def __repr__(self) -> str:
        where = (
            f"emulator {self.emulator_host}"
            if self.emulator_host
            else (self.settings.endpoint or "Google Cloud")
        )
        return f"<pubsub Clients {self.settings.project} via {where}>"

    # -- names ----------------------------------------------------------------------------
    def topic_path(self, name: str) -> str:
        """The full topic name (``projects/P/topics/T``); full names pass through."""
        return self._path("topic", name)

    def subscription_path(self, name: str) -> str:
        """The full subscription name (``projects/P/subscriptions/S``); full names pass through."""
        return self._path("subscription", name)

    def _path(self, kind: str, name: str) -> str:
        """``projects/P/<kind>s/<name>`` for a short name; a full name as it is."""
        if name.startswith("projects/"):
            return name
        if not name:
            raise ConfigError(f"a {kind} name must not be empty")
        return f"projects/{self.settings.project}/{kind}s/{name}"

    # -- credentials ----------------------------------------------------------------------
    def _load_credentials(self) -> Any:
        if self._credentials_loaded:
            return self._credentials
        import google.auth

        settings = self.settings
        credentials: Any = settings.credentials
        try:
            if credentials is not None:
                pass  # a credentials object: it refreshes its own tokens
            elif settings.credentials_json:
                info = json.loads(settings.credentials_json)
                credentials, _ = google.auth.load_credentials_from_dict(info, scopes=_SCOPES)  # type: ignore[no-untyped-call]
            elif settings.credentials_file:
                credentials, _ = google.auth.load_credentials_from_file(  # type: ignore[no-untyped-call]
                    settings.credentials_file, scopes=_SCOPES
                )
        except (ValueError, OSError, google.auth.exceptions.GoogleAuthError) as exc:
            # The message never includes the credential itself.
            raise ConfigError(f"the pubsub credentials could not be loaded: {type(exc).__name__}") from None
        self._credentials = credentials
        self._credentials_loaded = True
        return credentials

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        credentials = self._load_credentials()
        if credentials is not None:
            kwargs["credentials"] = credentials
        if self.settings.endpoint:
            kwargs["client_options"] = ClientOptions(api_endpoint=self.settings.endpoint)
        return kwargs

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the pubsub backend is closed")

    # -- threaded clients -----------------------------------------------------------------
    def publisher(self, batch_settings: Any, publisher_options: Any) -> Any:
        """A new ``pubsub_v1.PublisherClient`` (its owner stops and closes it)."""
        self._check_open()
        if self.emulator_host:
            channel = grpc.insecure_channel(self.emulator_host, options=_CHANNEL_OPTIONS)
            transport = PublisherGrpcTransport(channel=channel, host=self.emulator_host)
            return pubsub_v1.PublisherClient(batch_settings, publisher_options, transport=transport)
        return pubsub_v1.PublisherClient(batch_settings, publisher_options, **self._client_kwargs())

    def subscriber(self) -> Any:
        """The shared ``pubsub_v1.SubscriberClient`` (streaming pull)."""
        self._check_open()
        if self._subscriber is None:
            if self.emulator_host:
                channel = grpc.insecure_channel(self.emulator_host, options=_CHANNEL_OPTIONS)
                transport = SubscriberGrpcTransport(channel=channel, host=self.emulator_host)
                self._subscriber = pubsub_v1.SubscriberClient(transport=transport)
            else:
                self._subscriber = pubsub_v1.SubscriberClient(**self._client_kwargs())
        return self._subscriber

    # -- asyncio clients ------------------------------------------------------------------
    def _async_clients(self) -> tuple[PublisherAsyncClient, SubscriberAsyncClient]:
        self._check_open()
        loop = asyncio.get_running_loop()
        current = self._async
        if current is not None and current[0] is loop:
            return current[1], current[2]
        channel: Any = None
        if self.emulator_host:
            channel = grpc.aio.insecure_channel(self.emulator_host, options=_CHANNEL_OPTIONS)
            publisher = PublisherAsyncClient(
                transport=PublisherGrpcAsyncIOTransport(channel=channel, host=self.emulator_host)
            )
            subscriber = SubscriberAsyncClient(
                transport=SubscriberGrpcAsyncIOTransport(channel=channel, host=self.emulator_host)
            )
        else:
            kwargs = self._client_kwargs()
            publisher = PublisherAsyncClient(**kwargs)
            subscriber = SubscriberAsyncClient(**kwargs)
        # A client made for another (finished) loop is dropped; its channel died with that loop.
        self._async = (loop, publisher, subscriber, channel)
        return publisher, subscriber

    def admin_publisher(self) -> PublisherAsyncClient:
        """The asyncio publisher API client of the running loop (topics, direct publish)."""
        return self._async_clients()[0]

    def async_subscriber(self) -> SubscriberAsyncClient:
        """The asyncio subscriber API client of the running loop (subscriptions, pull, ack)."""
        return self._async_clients()[1]

    async def close(self) -> None:
        """Close every channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        subscriber, self._subscriber = self._subscriber, None
        if subscriber is not None:
            with contextlib.suppress(Exception):
                subscriber.close()
        current, self._async = self._async, None
        if current is not None:
            loop, publisher, async_subscriber, channel = current
            if loop is asyncio.get_running_loop():
                with contextlib.suppress(Exception):
                    if channel is not None:
                        await channel.close()
                    else:
                        await publisher.transport.close()  # type: ignore[no-untyped-call]
                        await async_subscriber.transport.close()  # type: ignore[no-untyped-call]
