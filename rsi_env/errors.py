"""Every error a user of rsi-env can meet, in one tree.

::

    RsiEnvError                      base of everything raised on purpose
    ├── InvalidConfigError           an engine flag vLLM would refuse (names the flag, value, what is allowed)
    ├── ModelSpecError               a config.json that cannot be read as a supported architecture
    ├── HardwareSpecError            an unknown or malformed hardware entry
    ├── WorkloadError                a workload file that is malformed (names the field and the fix)
    ├── CatalogError                 an id that is not in a catalog (lists the ids that are)
    ├── CalibrationError             calibration data that is missing or does not fit
    ├── StoreError                   an experience store that cannot be opened, read or written (names the file)
    ├── ActionError                  an action outside the env's action space (names the field and what is allowed)
    ├── UnsafeFileError              a file the env will not read: a link, not a regular file, larger than its cap
    ├── YamlError                    YAML the env will not load: invalid, anchors or aliases, too deep, too large
    ├── EditError                    an edit the workspace refuses (outside it, not editable, ambiguous, too large)
    ├── TextActionError              text that is not an action of the text-action syntax
    ├── ToolCallError                a tool call that names no tool, or whose arguments the tool does not take
    ├── PolicyError                  a scheduling policy that could not be run or whose answer is unusable
    ├── EndpointError                an agent's chat endpoint that cannot be reached or answers no chat completion
    ├── DayZeroError                 a DayZero workspace's loader or block that could not be run or gave nothing usable
    └── SuiteError                   a benchmark suite, instance or run that cannot be loaded, found or resumed

A measurement that fails the way an engine fails (out of memory, a refused config) is *not* an
exception: it is returned as ``Telemetry.error`` so that an episode survives it.
"""

from __future__ import annotations

__all__ = [
    "ActionError",
    "DayZeroError",
    "EndpointError",
    "EditError",
    "PolicyError",
    "TextActionError",
    "ToolCallError",
    "CalibrationError",
    "CatalogError",
    "HardwareSpecError",
    "InvalidConfigError",
    "ModelSpecError",
    "RsiEnvError",
    "StoreError",
    "SuiteError",
    "UnsafeFileError",
    "WorkloadError",
    "YamlError",
]


class RsiEnvError(Exception):
    """Base class of every error rsi-env raises on purpose."""


class InvalidConfigError(RsiEnvError, ValueError):
    """An engine configuration vLLM would refuse.

    ``field`` is the flag's name (vLLM's own), ``value`` the value given, ``allowed`` what would be
    accepted, in words.
    """

    def __init__(self, field: str, value: object, allowed: str, reason: str | None = None) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        msg = f"{field}={value!r} is not allowed: {reason or 'expected ' + allowed}"
        if reason:
            msg += f" (allowed: {allowed})"
        super().__init__(msg)


class ModelSpecError(RsiEnvError, ValueError):
    """A model config.json that is missing fields or describes an unsupported architecture."""


class HardwareSpecError(RsiEnvError, ValueError):
    """A hardware description that is malformed."""


class WorkloadError(RsiEnvError, ValueError):
    """A workload file that is malformed; the message names the field and what is allowed."""


class CatalogError(RsiEnvError, KeyError):
    """An id that is not in one of the shipped catalogs."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class CalibrationError(RsiEnvError, ValueError):
    """Calibration coefficients or measurements that are missing or inconsistent."""


class StoreError(RsiEnvError):
    """An experience store that cannot be opened, migrated, read or written (names the file and the fix)."""


class ActionError(RsiEnvError, ValueError):
    """An action outside the env's action space; the env refuses it (the step counts, pays 0) and never coerces it."""


class UnsafeFileError(RsiEnvError):
    """A file the env will not read or write through: a link, a FIFO, a directory, a socket, a device, too large, missing.

    The agent can put any of these where the env expects its own files; the message says what was found.
    """


class YamlError(RsiEnvError, ValueError):
    """YAML the env will not load: invalid, or using anchors or aliases, nested too deep, or too large."""


class EditError(RsiEnvError):
    """An edit the workspace refuses (outside, not editable, not text, too large, ambiguous, not a regular file)."""


class PolicyError(RsiEnvError):
    """A scheduling policy that could not be run or whose answer is not usable; the message says why."""


class TextActionError(RsiEnvError):
    """Text that is not an action in `rsi_env.wrappers.text_actions.TEXT_SYNTAX`; the message says what is wrong."""


class ToolCallError(RsiEnvError):
    """A tool call `rsi_env.wrappers.tool_calls` cannot carry out; the message names the tool and the argument."""


class EndpointError(RsiEnvError):
    """A chat endpoint (`rsi_env.suite.chat`) that could not be reached or did not answer a chat completion;
    ``status`` is the HTTP status where it answered with one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class DayZeroError(RsiEnvError):
    """The workspace's loader or block could not be run, or gave something unusable (the message says why)."""


class SuiteError(RsiEnvError):
    """A benchmark suite or instance that cannot be loaded or found, or a run that cannot be resumed."""
