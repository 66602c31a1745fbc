"""Pingu: a self-hosted LLM agent daemon."""

__version__ = "0.1.0"
