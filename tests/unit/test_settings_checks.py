"""``broker.driver.settings.check_at_least``: the lower-bound check the backends' settings share."""

from __future__ import annotations

import pytest

from broker.driver.settings import check_at_least
from broker.errors import ConfigError


def test_values_at_or_above_the_minimum_pass() -> None:
    check_at_least(1, batch_size=1, prefetch=10)
    check_at_least(0, "seconds", linger=0.0)
    check_at_least(0.05, "seconds", pull_expires=0.05)


def test_the_first_value_below_names_itself() -> None:
    with pytest.raises(ConfigError, match=r"^prefetch must be >= 1, got 0$"):
        check_at_least(1, batch_size=5, prefetch=0, replicas=-1)


def test_the_unit_follows_the_minimum() -> None:
    with pytest.raises(ConfigError, match=r"^linger must be >= 0 seconds, got -1$"):
        check_at_least(0, "seconds", linger=-1)
    with pytest.raises(ConfigError, match=r"^pull_expires must be >= 0\.05 seconds, got 0\.01$"):
        check_at_least(0.05, "seconds", pull_expires=0.01)
