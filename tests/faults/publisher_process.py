"""The fault workload's publisher in a process of its own, for the client-crash fault.

``python -m tests.faults.publisher_process CONFIG.json`` runs :func:`~tests.faults.workload.publish_at_rate`
with the settings in the file (``connect``, ``topic``, ``run``, ``count``, ``rate``, ``confirmed``,
``batch``) and appends each confirmed id to ``confirmed`` as soon as its publish returned: what
the process recorded before it was SIGKILLed is what the checker holds the broker to.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import broker
from tests.faults.workload import Outcome, publish_at_rate


async def main(config: dict[str, Any]) -> None:
    """Publish as ``config`` says; exits when every message was confirmed or failed."""
    async with broker.connect(config["connect"]) as backend:
        await publish_at_rate(
            backend,
            config["topic"],
            config["run"],
            int(config["count"]),
            float(config["rate"]),
            Path(config["confirmed"]),
            Outcome(),
            batch=int(config.get("batch", 1)),
        )


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))))
