"""Counting what this agent's turns do, for the daemon's Prometheus metrics.

The meter sees every runtime event the bus records (`telemetry.EventBus.emit`) and keeps
counter deltas: turns by outcome and their durations, steps, tool calls with duration and error
code, turn error codes, tokens. `take()` hands them over and starts again; the child sends them
on the idle `status` frame that ends a turn (`protocol.messages.TurnMetrics`). Counting is a
few dict and list operations per event, and the report rides on a frame that is sent anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_process.telemetry import RuntimeEvent
from protocol.messages import ToolSample, TurnMetrics

_TURN_ENDS = frozenset({"turn.completed", "turn.failed"})
_TOOL_ENDS = frozenset({"tool.completed", "tool.failed"})


@dataclass(slots=True)
class Meter:
    model: str
    """The Model's `spec.model`: token usage is counted by model."""
    _turns: dict[str, int] = field(default_factory=dict)
    _turn_ms: list[float] = field(default_factory=list)
    _steps: int = 0
    _tools: list[ToolSample] = field(default_factory=list)
    _errors: dict[str, int] = field(default_factory=dict)
    _input: int = 0
    _output: int = 0

    def observe(self, event: RuntimeEvent) -> None:
        kind = event.type
        if kind == "step.completed":
            self._steps += 1
            usage = event.usage
            if usage:
                self._input += usage.get("inputTokens", 0)
                self._output += usage.get("outputTokens", 0)
        elif kind in _TOOL_ENDS:
            code = event.error.code if event.error is not None else ""
            self._tools.append(ToolSample(event.tool_name or "", event.duration_ms or 0.0, code))
        elif kind in _TURN_ENDS:
            outcome = event.status or "failed"
            self._turns[outcome] = self._turns.get(outcome, 0) + 1
            self._turn_ms.append(event.duration_ms or 0.0)
            if event.error is not None:
                self._errors[event.error.code] = self._errors.get(event.error.code, 0) + 1

    def take(self) -> TurnMetrics | None:
        """The deltas since the last `take` (None when nothing happened), and a fresh start."""
        if not self._turns and not self._steps and not self._tools:
            return None
        report = TurnMetrics(
            model=self.model, turns=self._turns, turn_ms=self._turn_ms, steps=self._steps,
            tools=self._tools, errors=self._errors, input_tokens=self._input,
            output_tokens=self._output,
        )  # fmt: skip
        self._turns, self._turn_ms, self._tools, self._errors = {}, [], [], {}
        self._steps = self._input = self._output = 0
        return report
