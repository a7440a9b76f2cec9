"""The README's quick start is an application that runs: its block, executed as a module, bills an order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def quick_start() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quick start") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "the quick start has no python block"
    return found.group(1)


def test_the_quick_start_is_at_most_eight_lines_of_application() -> None:
    code = [
        line
        for line in quick_start().splitlines()
        if line.strip() and not line.startswith(("import ", "from ", "if __name__", "    asyncio.run"))
    ]
    assert len(code) <= 8, code


async def test_the_quick_start_app_decodes_and_acks_an_order(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POLYBROKER_URL", "inmem://readme")
    namespace: dict[str, object] = {"__name__": "readme_quick_start"}
    exec(compile(quick_start(), "README.md", "exec"), namespace)
    app, order_type = namespace["app"], namespace["Order"]
    async with app.testing() as test:  # type: ignore[attr-defined]
        await test.publish("orders", order_type(id=7, total=12.5))  # type: ignore[operator]
        await test.until(lambda: test.settled() == ["acked"])
    assert "billing order 7 for 12.5" in capsys.readouterr().out
