"""Which agent answers and with which tools, from real config text."""

from __future__ import annotations

import pytest

from pingu.agent.profiles import (
    DEFAULT_AGENT,
    UnknownAgentError,
    default_agent_name,
    resolve_agent,
)
from pingu.config.loader import load_config_text
from pingu.config.model import BUILTIN_TOOL_NAMES


def config_from(text: str):
    return load_config_text(text, file=None, env={})


def test_without_profiles_the_default_agent_has_every_tool_but_delegate() -> None:
    config = config_from("")
    assert default_agent_name(config) == DEFAULT_AGENT
    profile = resolve_agent(config)
    assert profile.name == DEFAULT_AGENT
    assert profile.system_prompt  # a built-in prompt, not empty
    assert set(profile.tools) == set(BUILTIN_TOOL_NAMES) - {"delegate"}
    assert profile.limits == config.limits


def test_with_profiles_but_no_orchestrator_the_default_agent_can_delegate() -> None:
    config = config_from('[agent.coder]\nsystem_prompt = "You write code."\ntools = ["shell"]\n')
    profile = resolve_agent(config)
    assert profile.name == DEFAULT_AGENT
    assert "delegate" in profile.tools
    coder = resolve_agent(config, "coder")
    assert coder.tools == ("shell",)
    assert coder.system_prompt == "You write code."


def test_an_orchestrator_profile_is_the_top_level_agent_with_its_own_limits() -> None:
    config = config_from(
        "[limits]\nmax_model_calls = 5\n"
        '[agent.orchestrator]\nsystem_prompt = "Plan."\nmax_tool_calls = 3\n'
        '[agent.coder]\nsystem_prompt = "Code."\n'
    )
    assert default_agent_name(config) == "orchestrator"
    profile = resolve_agent(config)
    assert profile.name == "orchestrator"
    assert "delegate" in profile.tools  # empty tools list means all of them
    assert profile.limits.max_tool_calls == 3
    assert profile.limits.max_model_calls == 5  # inherited from [limits]


def test_unknown_agent_names_the_profiles_there_are() -> None:
    config = config_from(
        '[agent.coder]\nsystem_prompt = "x"\n[agent.writer]\nsystem_prompt = "y"\n'
    )
    with pytest.raises(UnknownAgentError, match="available agents: coder, writer"):
        resolve_agent(config, "nope")
