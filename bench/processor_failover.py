"""Processor failover: how long the survivor takes to resume, with and without hot standby.

One run, two scenarios on one log (default: the in-memory broker, in this process; ``--url
kafka://HOST:PORT`` runs them on a Kafka-compatible broker, ``--url dev`` starts Tansu):

1. a group table of ``--keys`` keys (default 1,000,000) is written to ``<group>-table``
   (``--partitions`` partitions, default 2), as a processor's checkpoints write it;
2. two members of the group start (memory storage; ``hot_standby`` off in the *cold* scenario,
   on in the *warm* one) and split the partitions; in the warm scenario each member also keeps
   the other's partitions up to date, and the run waits until it has read them;
3. one member is killed (its task cancelled: no last checkpoint, no graceful hand-over; its
   consumer leaves the group, so the survivor is assigned at once and the figures are the
   takeover itself, not the broker's failure detection);
4. a message is written to a key of a partition the dead member owned; timed: from the kill to
   the survivor's callback for it (*resume*), and the survivor's recovery of the partitions it
   took over (*recovery*: records read and seconds, from the table statistics).

Printed: both scenarios and the ratio warm/cold of the resume time. Target: warm resumes in at
most a tenth of the cold time.

Usage: python bench/processor_failover.py [--keys N] [--partitions P] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from typing import Any

import broker
from broker.backends.kafka.processor import Context, Processor, define_group, input, persist
from broker.driver.partitioning import partitioner_by_name
from broker.log import Log, TopicPartition

murmur2 = partitioner_by_name("murmur2")


async def fill_table(log: Log, table: str, keys: int, partitions: int) -> None:
    await log.create_topic(table, partitions, config={"cleanup.policy": "compact"})
    value = (1).to_bytes(8, "big")
    futures = []
    for i in range(keys):
        key = f"key-{i}"
        futures.append(log.send(table, value, key=key, partition=murmur2(key.encode(), partitions)))
        if len(futures) >= 50_000:
            await asyncio.gather(*futures)
            futures.clear()
    await asyncio.gather(*futures)
    await log.flush()


async def scenario(log: Log, keys: int, partitions: int, standby: bool) -> dict[str, Any]:
    group = f"failover-{'warm' if standby else 'cold'}-{uuid.uuid4().hex[:6]}"
    source = f"{group}-in"
    await log.create_topic(source, partitions)
    started = time.perf_counter()
    await fill_table(log, f"{group}-table", keys, partitions)
    fill = time.perf_counter() - started
    seen: dict[str, float] = {}

    def count(ctx: Context, msg: Any) -> None:
        seen.setdefault(ctx.key or "", time.perf_counter())
        ctx.set_value((ctx.value() or 0) + 1)

    graph = define_group(group, input(source, "str", count), persist("int64"))
    survivor = Processor(log, graph, hot_standby=standby)
    victim = Processor(log, graph, hot_standby=standby)
    async with survivor:
        victim_task = victim.start()
        await victim.wait_ready(600)
        while len(survivor.partitions) + len(victim.partitions) != partitions or not victim.partitions:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        taken = sorted(victim.partitions)
        if standby:  # wait until the survivor has read the victim's table partitions
            for p in taken:
                _, high = await log.watermarks(TopicPartition(f"{group}-table", p))
                while not _standby_at(survivor, p, high):  # noqa: ASYNC110 - polled state
                    await asyncio.sleep(0.05)
        probes = (f"probe-{i}" for i in range(10_000))
        probe = next(key for key in probes if murmur2(key.encode(), partitions) in taken)
        killed = time.perf_counter()
        victim_task.cancel()
        await log.produce(source, b"x", key=probe)
        while probe not in seen:  # noqa: ASYNC110 - the callback only records a time
            await asyncio.sleep(0.001)
        resume = seen[probe] - killed
        stats = await survivor.stats()
    with_tables = [stats.group[p].table for p in taken]
    read = sum(t.recovery.hwm - t.recovery.start_offset for t in with_tables if t is not None)
    took = max(
        (t.recovery.finished or 0) - (t.recovery.started or 0) for t in with_tables if t is not None
    )
    return {"fill": fill, "resume": resume, "read": read, "recovery": took, "partitions": taken}


def _standby_at(proc: Processor, partition: int, offset: int) -> bool:
    tables = proc._standby.get(partition, [])
    return bool(tables) and all((t.storage.offset() or 0) >= offset for t in tables)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--url", default=None, help="a broker URL (default: in-memory); 'dev' starts Tansu")
    args = parser.parse_args()
    # the start-up warning that memory storage re-reads tables is what this bench measures
    logging.getLogger("broker.backends.kafka.processor").setLevel(logging.ERROR)
    url = args.url or f"inmem://failover-{uuid.uuid4().hex}"
    server = None
    if url == "dev":
        from broker.backends.kafka.registration import factory

        server = factory.dev_server()
        url = server.__enter__().url
    try:
        async with broker.connect(url) as backend:
            log = backend.log()  # type: ignore[attr-defined]
            print(f"{args.keys:,} keys in {args.partitions} partitions on {url.split('?')[0]}")
            results = {}
            for name, standby in (("cold (no standby)", False), ("warm (hot standby)", True)):
                result = results[name] = await scenario(log, args.keys, args.partitions, standby)
                print(
                    f"{name:20} resume {result['resume'] * 1000:9.1f} ms after the kill; the survivor read "
                    f"{result['read']:,} table records of partitions {result['partitions']} in "
                    f"{result['recovery']:.3f} s (table written in {result['fill']:.1f} s)"
                )
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    cold, warm = results["cold (no standby)"], results["warm (hot standby)"]
    ratio = warm["resume"] / cold["resume"]
    verdict = "met" if ratio <= 0.1 else "NOT met"
    print(f"ratio warm/cold resume time: {ratio:.3f} (target <= 0.10: {verdict})")


if __name__ == "__main__":
    asyncio.run(main())
