"""The model client (OpenAI Responses API, streaming, retries, error mapping) and pricing."""

from pingu.llm.client import LLMError, ModelClient, ModelResponse, StreamText, Usage
from pingu.llm.pricing import api_key_hash, estimate_cost

__all__ = [
    "LLMError",
    "ModelClient",
    "ModelResponse",
    "StreamText",
    "Usage",
    "api_key_hash",
    "estimate_cost",
]
