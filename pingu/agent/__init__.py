"""The agent: profiles, the tool loop (`runtime.AgentRuntime`) and the terminal commands.

Only the light request/result types are imported here; `pingu.tools.base` imports
`pingu.agent.events`, so this package must not import the runtime eagerly.
"""

from pingu.agent.turn import TurnRequest, TurnResult

__all__ = ["TurnRequest", "TurnResult"]
