"""The bundle templates of `goondan init`: which files each writes, with the project's name in."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.templates import bundle_texts as texts

DEFAULT_TEMPLATE = "default"
MAX_PROJECT_NAME = 40
"""The swarm is named after the project and its name is part of socket paths: keep it short."""
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9-]+")


@dataclass(frozen=True, slots=True)
class BundleTemplate:
    name: str
    description: str
    files: Mapping[str, str]
    """Relative path -> text, with `__NAME__` (project) and `__MODEL__` placeholders."""
    model: str
    """The Model the commented real-LLM switch replaces."""
    other_models: tuple[str, ...] = ()
    """Further scripted Models a real LLM replaces too (the footer names them all)."""

    def render(self, project: str) -> dict[str, str]:
        return {
            path: text.replace("__REPLACE__", self._replace_line())
            .replace("__MODEL__", self.model)
            .replace("__NAME__", project)
            for path, text in self.files.items()
        }

    def _replace_line(self) -> str:
        if not self.other_models:
            return (
                "Replace the scripted Model above with one of these, keeping its name (__MODEL__)."
            )
        names = " and ".join((self.model, *self.other_models))
        return (
            f"Replace each scripted Model above ({names}) with one of\n"
            "# these: copy a block once per Model and set its `name` to that Model's."
        )


def _with_common(bundle: str, **extra: str) -> dict[str, str]:
    return {
        "goondan.yaml": bundle + "\n" + texts.REAL_MODEL,
        ".env.example": texts.ENV_EXAMPLE,
        ".gitignore": texts.GITIGNORE,
        **extra,
    }


TEMPLATES: dict[str, BundleTemplate] = {
    t.name: t
    for t in (
        BundleTemplate(
            "default",
            "one assistant with file-system and json-query tools from @goondan/base",
            _with_common(texts.DEFAULT),
            model="assistant-model",
        ),
        BundleTemplate(
            "multi-agent",
            "a coordinator that delegates to a worker with the built-in agents tool",
            _with_common(texts.MULTI_AGENT),
            model="coordinator-model",
            other_models=("worker-model",),
        ),
        BundleTemplate(
            "minimal",
            "one agent, no tools",
            _with_common(texts.MINIMAL),
            model="model",
        ),
    )
}


def project_name(text: str) -> str:
    """A valid resource name from a directory name: `My Bot 2` -> `my-bot-2`."""
    name = _NOT_IN_NAME.sub("-", text.strip().lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name).lstrip("0123456789-")
    return name[:MAX_PROJECT_NAME].rstrip("-") or "my-swarm"
