"""The raw-client reproduction of the Tansu defect the Kafka restart cell runs into.

Raw confluent-kafka (acks=all, idempotence on), no polybroker code: 3,000 records at 300/s to Tansu
on ``s3://`` storage (a local SeaweedFS), Tansu SIGKILLed and started again on the same port and
bucket 1.5 s in. Every record whose delivery report said it was written must be in the log. On
Tansu 0.6 some are not (3 of 6 runs lost 2 records each here), so the test is an xfail that is not
strict: the defect shows in some runs only. Part of ``make faults``, not of ``make test``.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.faults.servers import _seaweedfs, _tansu_on_s3
from tests.faults.test_faults import TANSU_S3_LOSES_ACKED_RECORDS


@pytest.mark.faults
@pytest.mark.faults_full
@pytest.mark.timeout(300)
@pytest.mark.xfail(reason=TANSU_S3_LOSES_ACKED_RECORDS, strict=False)
def test_raw_client_acked_records_survive_a_tansu_restart_on_s3(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka")
    lost: list[str] = []
    for attempt in range(3):
        storage = tmp_path / f"attempt-{attempt}"
        storage.mkdir()
        lost += _acked_but_missing_after_a_restart(storage)
    assert not lost, f"acknowledged by Tansu, missing from the log after its restart: {lost}"


def _acked_but_missing_after_a_restart(storage: Path) -> list[str]:
    import confluent_kafka

    with _seaweedfs(storage) as s3, _tansu_on_s3(s3) as tansu:
        bootstrap, topic = f"127.0.0.1:{tansu.port}", f"raw-restart-{uuid.uuid4().hex[:8]}"
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
        )
        acked: list[str] = []

        def delivered(err: object, msg: object) -> None:
            if err is None:
                acked.append(msg.value().decode())  # type: ignore[attr-defined]

        start = time.monotonic()

        def produce() -> None:
            for i in range(3000):
                while time.monotonic() < start + i / 300:
                    producer.poll(0.001)
                producer.produce(topic, f"m{i:05d}".encode(), callback=delivered)
                producer.poll(0)
            producer.flush(60)

        thread = threading.Thread(target=produce)
        thread.start()
        time.sleep(1.5)
        tansu.restart()
        thread.join(120)
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not set(acked) <= seen:
            seen.update(m.value().decode() for m in consumer.consume(500, 1) if m.error() is None)
        consumer.close()
        assert len(acked) == 3000, f"only {len(acked)} of 3000 were acknowledged"
        return sorted(set(acked) - seen)
