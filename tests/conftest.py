"""Shared test setup. Fixture modules register themselves in `pytest_plugins`."""

pytest_plugins: list[str] = [
    "tests.fakes.responses_api",
    "tests.fakes.telegram_api",
    "tests.fakes.daemon",
]
