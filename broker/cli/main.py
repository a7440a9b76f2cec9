"""Placeholder replaced below."""


def main() -> None:
    """Entry point."""
