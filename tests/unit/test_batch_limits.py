"""``broker.driver.batch_limits``: the batch-argument checks the batched consumers of backends share."""

from __future__ import annotations

import pytest

from broker.driver.batch_limits import check_batch_limits
from broker.errors import ConfigError


def test_valid_limits_pass() -> None:
    check_batch_limits(1)
    check_batch_limits(100, 0)
    check_batch_limits(5, 2.5)
    check_batch_limits(5, None)


@pytest.mark.parametrize("size", [0, -1])
def test_a_batch_size_below_one_is_refused(size: int) -> None:
    with pytest.raises(ConfigError, match=f"batch_size must be >= 1, got {size}"):
        check_batch_limits(size, 1.0)


def test_a_negative_batch_timeout_is_refused_as_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"batch_timeout must be >= 0 seconds, got -0\.5"):
        check_batch_limits(10, -0.5)


def test_the_timeout_is_not_checked_when_not_given() -> None:
    check_batch_limits(10)
