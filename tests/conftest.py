"""Shared test setup. Fixture modules register themselves in `pytest_plugins`."""

pytest_plugins: list[str] = []
