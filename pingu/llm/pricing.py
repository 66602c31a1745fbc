"""What a model call cost, estimated from its token usage.

Prices are USD per million tokens (input, cached input, output), OpenAI's list prices for
standard processing. `[pricing.<model>]` in the config overrides or adds models. Reasoning
tokens are billed as output tokens and are already counted in `output_tokens`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from pingu.config.model import Pricing

# model -> (input, cached input, output), USD per 1M tokens
BUILTIN_PRICES: Mapping[str, Pricing] = {
    name: Pricing(input=inp, cached_input=cached, output=out)
    for name, (inp, cached, out) in {
        "gpt-5": (1.25, 0.125, 10.00),
        "gpt-5-mini": (0.25, 0.025, 2.00),
        "gpt-5-nano": (0.05, 0.005, 0.40),
        "gpt-5-chat-latest": (1.25, 0.125, 10.00),
        "gpt-5-codex": (1.25, 0.125, 10.00),
        "gpt-5.1": (1.25, 0.125, 10.00),
        "gpt-4.1": (2.00, 0.50, 8.00),
        "gpt-4.1-mini": (0.40, 0.10, 1.60),
        "gpt-4.1-nano": (0.10, 0.025, 0.40),
        "gpt-4o": (2.50, 1.25, 10.00),
        "gpt-4o-mini": (0.15, 0.075, 0.60),
        "chatgpt-4o-latest": (5.00, 5.00, 15.00),
        "o1": (15.00, 7.50, 60.00),
        "o1-mini": (1.10, 0.55, 4.40),
        "o3": (2.00, 0.50, 8.00),
        "o3-mini": (1.10, 0.55, 4.40),
        "o3-pro": (20.00, 20.00, 80.00),
        "o4-mini": (1.10, 0.275, 4.40),
        "codex-mini-latest": (1.50, 0.375, 6.00),
    }.items()
}

# a release date suffix: gpt-4.1-2025-04-14, o3-2025-04-16
_DATED = re.compile(r"^(?P<base>.+?)-\d{4}-\d{2}-\d{2}$")


def _lookup(model: str, table: Mapping[str, Pricing]) -> Pricing | None:
    if model in table:
        return table[model]
    match = _DATED.match(model)
    if match and match["base"] in table:
        return table[match["base"]]
    return None


def price_for(model: str, overrides: Mapping[str, Pricing] | None = None) -> Pricing | None:
    """The price of `model` (config overrides first, then the built-in table), or None."""
    model = model.strip()
    if "/" in model:  # "openai/gpt-4.1" as some gateways name it
        model = model.rsplit("/", 1)[1]
    for table in (overrides or {}, BUILTIN_PRICES):
        price = _lookup(model, table)
        if price is not None:
            return price
    return None


def _count(usage: Any, name: str) -> int:
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, 0)
    return int(value or 0)


def estimate_cost(
    model: str, usage: Any, overrides: Mapping[str, Pricing] | None = None
) -> float | None:
    """USD for one call, or None when the model's price is unknown.

    `usage` is a `pingu.llm.Usage` or a mapping with the same keys (input_tokens,
    cached_input_tokens, output_tokens)."""
    price = price_for(model, overrides)
    if price is None:
        return None
    input_tokens = _count(usage, "input_tokens")
    cached = min(_count(usage, "cached_input_tokens"), input_tokens)
    output_tokens = _count(usage, "output_tokens")
    cached_price = price.input if price.cached_input is None else price.cached_input
    total = (
        (input_tokens - cached) * price.input + cached * cached_price + output_tokens * price.output
    )
    return total / 1_000_000


def api_key_hash(key: str) -> str:
    """SHA-256 hex of an API key: lets usage be grouped by key without storing it."""
    return hashlib.sha256(key.encode()).hexdigest()
