"""RL and text views of the `RSI/*` environments, one wrapper per module, each changing one thing.

- `FlatObservation` — the ``Dict`` observation as one float vector, with the action mask beside it
  (RLlib's action-masking layout) or without it (a plain ``Box`` for Stable-Baselines3);
- `DiscreteFlagMoves` — ``Discrete``: one notch up or down a flag's ladder, bench, submit; invalid moves masked;
- `DirectSetting` — ``MultiDiscrete``: every flag's ladder index at once (one measurement), plus a submit switch;
- `TextActions` — strings such as ``set max_num_seqs 512`` for LLM agents, parse errors as text;
- `ToolCalls` — OpenAI-style tool calls (``set_flag``, ``edit_file``, …; `tool_schemas`), errors as the result;
- `TrainingSeeds` — unseeded resets draw their workload seed from a set of training seeds;
- `ImprovementReward` — only the gain in the best score, scaled (a search's reward at a fixed budget);
- `make_view` — the stacks the baselines use, by name (``env_creator`` for RLlib's env runners).

They need only Gymnasium and NumPy; ``import rsi_env`` does not import them.
"""

from __future__ import annotations

from rsi_env.wrappers.direct_setting import DirectSetting
from rsi_env.wrappers.discrete_flag_moves import DiscreteFlagMoves
from rsi_env.wrappers.flat_observation import FlatObservation
from rsi_env.wrappers.improvement_reward import ImprovementReward
from rsi_env.wrappers.masked import MaskedActions
from rsi_env.wrappers.text_actions import TEXT_SYNTAX, TextActionError, TextActions, parse_text_action
from rsi_env.wrappers.tool_calls import TOOL_NAMES, ToolCallError, ToolCalls, parse_tool_call, tool_schemas
from rsi_env.wrappers.training_seeds import TrainingSeeds
from rsi_env.wrappers.views import env_creator, make_view

__all__ = ["TOOL_NAMES", "DirectSetting", "DiscreteFlagMoves", "FlatObservation", "ImprovementReward", "MaskedActions",
           "TEXT_SYNTAX", "TextActionError", "TextActions", "ToolCallError", "ToolCalls", "TrainingSeeds", "env_creator",
           "make_view", "parse_text_action", "parse_tool_call", "tool_schemas"]
