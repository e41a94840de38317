"""The JSON type aliases every package shares (`bundles.sdk` re-exports them for handler authors).

They live here, at the bottom of the layers, because wire Structs use them too: one definition,
so a `JsonObject` in a tool handler, an extension's state and a frame's `args` is the same type.
"""

from __future__ import annotations

from typing import Any

JsonValue = Any
"""Whatever `json.loads` can return."""
JsonObject = dict[str, Any]
"""A JSON object: string keys, JSON values."""
