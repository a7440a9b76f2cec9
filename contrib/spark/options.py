"""The ``broker`` data source's options: which broker, which topic, where to start, how fast.

Spark hands options over as strings with lower-cased keys, so every name here is matched without
regard to case. Choosing the broker (one of these):

* ``url``: a backend URL (``kafka://host:9092``, ``nats://host:4222``, ...);
* ``urlEnv``: the name of an environment variable holding that URL;
* ``config``: a JSON object as :func:`broker.connect` takes it (``{"url": ..., "linger": 0}``);
* ``configEnv``: the name of an environment variable holding that JSON.

``setting.<name>`` options add single settings (``setting.group_id=g``), and
``secretEnv.<name>=VAR`` reads a setting from the environment variable ``VAR`` where the
connection is made (driver and executors), so credentials never enter the query plan, the
checkpoint or logs. Environment variables must exist on every executor (``spark.executorEnv.*``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from broker import Backend, connect
from broker.driver.settings import parse_url
from broker.errors import ConfigError

__all__ = ["Options"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class Options:
    """Case-insensitive string options with typed getters and the broker connection they name."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw: dict[str, str] = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}

    def __repr__(self) -> str:
        return f"<Options {sorted(self.raw)}>"

    def __contains__(self, name: str) -> bool:
        return name.lower() in self.raw

    def get(self, name: str, default: str | None = None) -> str | None:
        """The option ``name`` (any case), or ``default``."""
        value = self.raw.get(name.lower())
        return default if value is None or value == "" else value

    def first(self, *names: str) -> str | None:
        """The first of ``names`` that is set."""
        for name in names:
            value = self.get(name)
            if value is not None:
                return value
        return None

    def require(self, name: str, what: str) -> str:
        """The option ``name``; ``ConfigError`` explaining ``what`` it is for when missing."""
        value = self.get(name)
        if value is None:
            raise ConfigError(f"the broker data source needs option {name!r}: {what}")
        return value

    def get_int(self, name: str, default: int) -> int:
        """An integer option."""
        value = self.get(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"option {name!r} must be an integer, got {value!r}") from None

    def get_float(self, name: str, default: float) -> float:
        """A number option (seconds, rates)."""
        value = self.get(name)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"option {name!r} must be a number, got {value!r}") from None

    def get_bool(self, name: str, default: bool) -> bool:
        """A true/false option."""
        value = self.get(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise ConfigError(f"option {name!r} must be true or false, got {value!r}")

    # -- the broker ---------------------------------------------------------------------------
    def _env(self, variable: str, what: str) -> str:
        value = os.environ.get(variable)
        if value is None:
            raise ConfigError(
                f"option {what} names the environment variable {variable!r}, which is not set in this "
                f"process (pid {os.getpid()}); on a cluster set it on the executors too (spark.executorEnv.*)"
            )
        return value

    def target(self) -> dict[str, Any]:
        """The mapping :func:`broker.connect` takes, with environment variables resolved now."""
        mapping: dict[str, Any] = {}
        config = self.get("config")
        config_env = self.get("configEnv")
        if config_env is not None:
            config = self._env(config_env, "configEnv")
        if config is not None:
            try:
                loaded = json.loads(config)
            except ValueError as exc:
                raise ConfigError(f"option 'config' is not a JSON object: {exc}") from None
            if not isinstance(loaded, dict):
                raise ConfigError("option 'config' must be a JSON object")
            mapping.update(loaded)
        url = self.get("url")
        url_env = self.get("urlEnv")
        if url_env is not None:
            url = self._env(url_env, "urlEnv")
        if url is not None:
            mapping["url"] = url
        for key, value in self.raw.items():
            if key.startswith("setting."):
                mapping[key.removeprefix("setting.")] = value
            elif key.startswith("secretenv."):
                mapping[key.removeprefix("secretenv.")] = self._env(value, key)
        if "url" not in mapping and "backend" not in mapping:
            raise ConfigError(
                "the broker data source needs the broker: option 'url' (or 'urlEnv', 'config', 'configEnv')"
            )
        return mapping

    def scheme(self) -> str:
        """The backend's URL scheme (``kafka``, ``nats``, ...), without connecting."""
        mapping = self.target()
        if "url" in mapping:
            url = str(mapping["url"])
            if url.lower().startswith("endpoint="):
                return "servicebus"
            return parse_url(url).scheme
        return str(mapping["backend"]).lower()

    def connect(self) -> Backend:
        """Open the backend these options name (call it where it is used: driver or executor)."""
        scheme = self.scheme()
        if scheme == "inmem":
            raise ConfigError(
                "inmem:// cannot be used from Spark: Spark's Python workers are separate processes that "
                "cannot see the driver's memory; use a broker server (kafka://, nats://, ...)"
            )
        return connect(self.target())

    def topics(self) -> tuple[str, ...]:
        """The ``topic`` option: one or more comma-separated topics (subjects)."""
        value = self.first("topic", "topics", "subject")
        if value is None:
            raise ConfigError("the broker data source needs option 'topic'")
        names = tuple(t.strip() for t in value.split(",") if t.strip())
        if not names:
            raise ConfigError("option 'topic' names no topic")
        return names
