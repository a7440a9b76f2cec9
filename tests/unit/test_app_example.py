"""examples/order_service.py (the order service as a broker.App): its demo runs, and its tests pass.

Both run in this process: the example is loaded as the module ``app`` that its test module
imports, and the test module's tests are collected here as they are.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


example = _load("order_service", EXAMPLES / "order_service.py")
orders_tests = _load("test_order_service", EXAMPLES / "test_order_service.py")

fresh_stock = orders_tests.fresh_stock
test_an_order_in_stock_is_shipped_and_acked = orders_tests.test_an_order_in_stock_is_shipped_and_acked
test_an_order_out_of_stock_is_retried_with_backoff_then_dead_lettered = (
    orders_tests.test_an_order_out_of_stock_is_retried_with_backoff_then_dead_lettered
)
test_an_invalid_order_is_dead_lettered_at_once_and_never_handled = (
    orders_tests.test_an_invalid_order_is_dead_lettered_at_once_and_never_handled
)


async def test_the_order_service_demo_ships_one_order_and_dead_letters_two(
    capsys: pytest.CaptureFixture[str],
) -> None:
    await example.demo()
    out = capsys.readouterr().out
    assert "shipped: ['book']; books left: 8" in out
    assert "dead-lettered: ['failed 4 attempts (max_attempts=4)', 'non-retryable DecodeError']" in out
