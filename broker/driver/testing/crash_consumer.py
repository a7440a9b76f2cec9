"""A consumer to be killed: the conformance suite runs it in a subprocess and SIGKILLs it mid-flight.

``python -m broker.driver.testing.crash_consumer CONFIG`` where CONFIG is a JSON object with ``url``
(a URL string or a connect mapping), ``topic``, ``subscription``, ``options`` (keyword options of
``messages()``) and ``pause`` (seconds to spend on each message). It prints ``ready`` once its
consumer is entered, then for every message ``took DATA`` when handed out and ``acked DATA`` once
``ack()`` returned, flushing each line, until it is killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import broker

__all__ = ["main"]


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _consume(config: dict[str, Any]) -> None:
    async with (
        broker.connect(config["url"]) as backend,
        backend.messages(config["topic"], config["subscription"], **config.get("options", {})) as consumer,
    ):
        _say("ready")
        pause = float(config.get("pause", 0.0))
        async for message in consumer:
            data = message.data.decode()
            _say(f"took {data}")
            if pause:
                await asyncio.sleep(pause)
            await message.ack()
            _say(f"acked {data}")


def main(argv: list[str] | None = None) -> None:
    """Run the consumer described by the JSON config in ``argv[0]`` until killed."""
    args = sys.argv[1:] if argv is None else argv
    asyncio.run(_consume(json.loads(args[0])))


if __name__ == "__main__":
    main()
