"""The polybroker pytest plugin (broker.testing.plugin), run with pytester in fresh pytest sessions."""

from __future__ import annotations

import textwrap

import pytest

# Inline pytester runs drop the modules a run imported; the in-memory backend's settings dataclass
# (cached by its registration) needs its module to stay, so it is imported here, before the runs.
import broker.backends.inmem.backend
import broker.backends.inmem.faults  # noqa: F401

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


APP_TESTS = """
import asyncio
import sys

import pytest

import broker
from broker import OutboundMessage
from broker.driver.clock import clock
from broker.errors import Throttled

{mark}


{mark_asyncio}
async def test_backend_is_fresh_and_isolated(polybroker_backend, polybroker_name):
    topic = polybroker_name("orders")
    assert topic.startswith("orders-") and topic == polybroker_name("orders")
    await polybroker_backend.publisher().topic(topic).publish(OutboundMessage(b"one"))
    async with polybroker_backend.messages(topic, polybroker_name("app")) as consumer:
        message = await consumer.next_message(timeout=5)
        assert message.data == b"one"
        await message.ack()
    assert not clock.virtual


@pytest.mark.polybroker_virtual_time
{mark_asyncio}
async def test_a_30_s_ack_deadline_passes_in_virtual_time(polybroker_backend, polybroker_name):
    loop = asyncio.get_running_loop()
    assert clock.virtual
    topic, sub = polybroker_name("jobs"), polybroker_name("workers")
    await polybroker_backend.publisher().topic(topic).publish(OutboundMessage(b"job"))
    async with polybroker_backend.messages(topic, sub, ack_deadline=30) as consumer:
        await consumer.next_message(timeout=5)
        taken = loop.time()
        again = await consumer.next_message(timeout=60)
        assert again.delivery_attempt == 2
        assert abs(loop.time() - taken - 30) < 0.002


{mark_asyncio}
async def test_recorder_sees_what_was_published(polybroker_backend, polybroker_recorder, polybroker_name):
    topic = polybroker_name("events")
    publisher = polybroker_backend.publisher()
    await publisher.topic(topic).publish(OutboundMessage(b'{{"id": 7}}', key="k", attributes={{"a": "1"}}))
    sent = polybroker_recorder.assert_published(topic, key="k", attributes={{"a": "1"}}, count=1)
    assert sent.data == b'{{"id": 7}}' and sent.decoded(dict) == {{"id": 7}}
    polybroker_recorder.assert_nothing_published(polybroker_name("other"))
    with pytest.raises(AssertionError, match="expected a message"):
        polybroker_recorder.assert_published(topic, key="nope")


{mark_asyncio}
async def test_faults_fail_the_next_publish(polybroker_backend, polybroker_faults, polybroker_name):
    topic = polybroker_backend.publisher().topic(polybroker_name("t"))
    polybroker_faults.fail_publishes(1, Throttled)
    with pytest.raises(Throttled):
        await topic.publish(OutboundMessage(b"x"))
    await topic.publish(OutboundMessage(b"y"))
"""


def _write(pytester: pytest.Pytester, mode: str) -> None:
    pytester.makepyfile(
        test_polybroker_app=APP_TESTS.format(
            mark="",
            mark_asyncio="@pytest.mark.asyncio" if mode == "strict" else "",
        )
    )


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_fixtures_marker_recorder_and_faults_in_both_asyncio_modes(
    pytester: pytest.Pytester, mode: str
) -> None:
    _write(pytester, mode)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-o", f"asyncio_mode={mode}")
    result.assert_outcomes(passed=4)


def test_a_real_broker_url_skips_virtual_time_and_faults_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_real=textwrap.dedent(
            """
            import pytest

            @pytest.mark.polybroker_virtual_time
            async def test_virtual():
                raise AssertionError("must not run against a real broker")

            def test_faults(polybroker_faults):
                raise AssertionError("must not run against a real broker")

            def test_url(polybroker_url):
                assert polybroker_url == "kafka://localhost:1"
            """
        )
    )
    monkeypatch.setenv("POLYBROKER_TEST_URL", "kafka://localhost:1")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--strict-markers", "-o", "asyncio_mode=auto", "-rs"
    )
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["*polybroker: tests run against kafka://localhost:1*", "*virtual time works with inmem:// only*"]
    )
    result.stdout.fnmatch_lines(["*fault injection is for inmem:// only*"])


def test_the_option_wins_over_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_url(polybroker_url):\n    assert polybroker_url == 'nats://h:4222'\n")
    monkeypatch.setenv("POLYBROKER_TEST_URL", "kafka://localhost:1")
    result = pytester.runpytest("-p", "no:cacheprovider", "--polybroker-url", "nats://h:4222")
    result.assert_outcomes(passed=1)


def test_virtual_time_on_a_sync_test_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.polybroker_virtual_time\ndef test_sync():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*polybroker_virtual_time needs an async test*"])
    assert result.ret != 0


def test_a_module_not_using_the_plugin_sees_nothing_of_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain=textwrap.dedent(
            """
            import asyncio
            import sys
            import time

            import pytest

            SDKS = ("confluent_kafka", "nats", "google.cloud", "pulsar", "azure", "aio_pika", "pyspark")

            def test_plugin_loaded_without_backends_or_sdks(pytestconfig):
                assert pytestconfig.pluginmanager.has_plugin("polybroker")
                loaded = [m for m in sys.modules if m.startswith("broker.backends") or m.startswith(SDKS)]
                assert loaded == []

            @pytest.mark.asyncio
            async def test_real_time():
                from broker.driver.clock import clock
                assert not clock.virtual and clock.monotonic is time.monotonic
                loop = asyncio.get_running_loop()
                assert "time" not in vars(loop)
                started = time.monotonic()
                await asyncio.sleep(0.05)
                assert time.monotonic() - started >= 0.05
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=2)
