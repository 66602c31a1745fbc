"""Cost estimates and key hashing."""

from __future__ import annotations

import hashlib

import pytest

from pingu.config.model import Pricing
from pingu.llm import Usage, api_key_hash, estimate_cost


def test_known_model_cost_counts_cached_input_at_its_price() -> None:
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000)
    # gpt-4.1: 2.00 input, 0.50 cached, 8.00 output per 1M tokens
    assert estimate_cost("gpt-4.1", usage, {}) == pytest.approx(0.6 * 2.00 + 0.4 * 0.50 + 0.8)


def test_dated_model_names_use_their_base_price() -> None:
    usage = Usage(input_tokens=2_000_000, output_tokens=1_000_000)
    assert estimate_cost("gpt-4.1-2025-04-14", usage, {}) == estimate_cost("gpt-4.1", usage, {})
    assert estimate_cost("gpt-4o-mini-2024-07-18", usage, {}) == pytest.approx(0.3 + 0.6)


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "o3",
        "o4-mini",
    ],
)
def test_current_openai_models_are_priced(model: str) -> None:
    assert estimate_cost(model, Usage(input_tokens=1000, output_tokens=1000), {}) > 0


def test_config_overrides_win_and_add_models() -> None:
    overrides = {
        "gpt-4.1": Pricing(input=1.0, output=1.0),  # cached_input None: same as input
        "llama3.1:8b": Pricing(input=0.0, output=0.0),
    }
    usage = {"input_tokens": 1_000_000, "cached_input_tokens": 500_000, "output_tokens": 0}
    assert estimate_cost("gpt-4.1", usage, overrides) == pytest.approx(1.0)
    assert estimate_cost("llama3.1:8b", usage, overrides) == 0.0


def test_unknown_model_has_no_price() -> None:
    assert estimate_cost("my-local-model", Usage(input_tokens=10), {}) is None


def test_api_key_hash_is_sha256_hex() -> None:
    assert api_key_hash("sk-abc") == hashlib.sha256(b"sk-abc").hexdigest()
    assert "sk-abc" not in api_key_hash("sk-abc")
