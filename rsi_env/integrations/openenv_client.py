"""`RsiEnvClient`: OpenEnv's ``EnvClient`` typed with rsi-env's models, for a server that ``rsi-env serve`` runs.

A client is one session (a WebSocket): ``reset(instance=ID)`` or ``reset(env_id=..., env_kwargs=..., seed=...)``,
then ``step(RsiAction(...))`` or ``call(tool, **arguments)``, and ``state()``. Like every OpenEnv client it is async,
and ``.sync()`` gives the synchronous one::

    with RsiEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        first = env.reset(env_id="RSI/Batching-v0", seed=0)
        result = env.call("set_flag", flag="max_num_seqs", value=128)
        result = env.call("submit")
        result.reward, result.done, result.observation.passed

OpenEnv's own ``GenericEnvClient`` (dicts) and ``MCPToolClient`` (MCP tools) work against the same server.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from rsi_env.integrations.openenv_models import RsiAction, RsiObservation, RsiState

__all__ = ["RsiEnvClient"]


class RsiEnvClient(EnvClient[RsiAction, RsiObservation, RsiState]):
    """One session of an rsi-env OpenEnv server, with `RsiAction`, `RsiObservation` and `RsiState`."""

    def call(self, tool: str, **arguments: Any) -> Any:
        """Call one of the episode's tools (a step); what ``step`` returns (awaitable in async code)."""
        return self.step(RsiAction(tool_name=tool, arguments=arguments))

    def _step_payload(self, action: RsiAction | dict[str, Any]) -> dict[str, Any]:
        if isinstance(action, dict):
            return action
        return action.model_dump(exclude_none=True, exclude_defaults=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RsiObservation]:
        obs = RsiObservation.model_validate({**payload.get("observation", {}), "reward": payload.get("reward"),
                                             "done": payload.get("done", False)})
        return StepResult(observation=obs, reward=payload.get("reward"), done=bool(payload.get("done", False)),
                          metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> RsiState:
        return RsiState.model_validate(payload)
