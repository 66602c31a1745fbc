"""Which agent answers, with which tools, model and bounds.

`[agent.<name>]` profiles come from the config. A profile named `orchestrator` is the
top-level agent; without one the top-level agent is a built-in default with every
tool (`delegate` only when there are profiles to delegate to).
"""

from __future__ import annotations

from pingu.config.model import BUILTIN_TOOL_NAMES, AgentProfile, Config

ORCHESTRATOR = "orchestrator"
DEFAULT_AGENT = "default"
DELEGATE_TOOL = "delegate"

DEFAULT_SYSTEM_PROMPT = (
    "You are Pingu, a helpful assistant running on the user's own server. "
    "Answer concisely. Use your tools when they help; say what you did."
)


class UnknownAgentError(LookupError):
    """No profile of that name; the message lists the ones there are."""


def default_agent_name(config: Config) -> str:
    if ORCHESTRATOR in config.agents:
        return ORCHESTRATOR
    return DEFAULT_AGENT


def resolve_agent(config: Config, name: str | None = None) -> AgentProfile:
    """The profile for `name` (None: the top-level agent), its tool list made explicit."""
    name = name or default_agent_name(config)
    profile = config.agents.get(name)
    if profile is None:
        if name != DEFAULT_AGENT:
            raise UnknownAgentError(f"unknown agent {name!r}; {describe_profiles(config)}")
        profile = AgentProfile(
            name=DEFAULT_AGENT, system_prompt=DEFAULT_SYSTEM_PROMPT, limits=config.limits
        )
    return AgentProfile(
        name=profile.name,
        system_prompt=profile.system_prompt or DEFAULT_SYSTEM_PROMPT,
        tools=tool_names(config, profile),
        llm=profile.llm,
        limits=profile.limits,
    )


def tool_names(config: Config, profile: AgentProfile) -> tuple[str, ...]:
    """The tools a profile may use: its list, or every built-in tool when it lists none.
    `delegate` is left out when there is nobody to delegate to."""
    names = profile.tools or BUILTIN_TOOL_NAMES
    if not delegation_targets(config, profile.name):
        names = tuple(n for n in names if n != DELEGATE_TOOL)
    return tuple(names)


def delegation_targets(config: Config, from_agent: str) -> list[str]:
    return sorted(name for name in config.agents if name != from_agent)


def describe_profiles(config: Config) -> str:
    if not config.agents:
        return "no agent profiles are configured"
    return "available agents: " + ", ".join(sorted(config.agents))
