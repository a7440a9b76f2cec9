"""The Security page's matrix is the one the tests generate, and it leaves no cell out."""

from __future__ import annotations

from tests.security import matrix


def test_every_backend_and_feature_has_a_cell() -> None:
    cells = {(c.backend, c.feature): c for c in matrix.collect()}
    missing = [(b, f) for b in matrix.BACKENDS for f in matrix.FEATURES if (b, f) not in cells]
    assert not missing, f"no test and no reason for: {missing}"
    for cell in cells.values():
        assert cell.note, f"{cell.backend} x {cell.feature} says neither how nor why"
        if cell.status in ("tested", "configuration"):
            assert cell.tests, f"{cell.backend} x {cell.feature} is {cell.status} by no test"


def test_the_security_page_carries_the_generated_matrix() -> None:
    page = matrix.PAGE.read_text()
    expected = matrix.page_with_matrix(page, matrix.render())
    assert page == expected, (
        "docs/security.md and the security tests differ: run "
        "`.venv/bin/python -m tests.security.matrix --write`"
    )
