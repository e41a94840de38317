"""`goondan init [DIR] [--template default|multi-agent|minimal] [--name N] [--force]`.

Writes a bundle that validates and runs offline (scripted model) into DIR (default `.`,
created if missing): goondan.yaml with a commented switch to OpenAI/Anthropic, .env.example
and .gitignore (plus the template's own tool files). Files that already exist are not touched
unless `--force`: exit 2 naming them. The swarm is named after DIR (or `--name` / `--swarm`).
Exit 0 written, 1 the files could not be written, 2 usage.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bundles.loader import inspect_bundle
from bundles.naming import name_problem
from orchestrator.control.client import layout_of
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from orchestrator.templates.bundles import DEFAULT_TEMPLATE, TEMPLATES, project_name
from protocol.endpoints import StateLayout


def existing(directory: Path, files: dict[str, str]) -> list[Path]:
    return [directory / rel for rel in files if (directory / rel).exists()]


def write_files(directory: Path, files: dict[str, str]) -> list[Path]:
    written = []
    for rel, text in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _next_steps(directory: Path) -> str:
    here = directory.resolve() == Path.cwd().resolve()
    where = "" if here else f"cd {shlex.quote(str(directory))} && "
    return (
        f"next: {where}goondan run --input 'hello'   (offline, scripted model)\n"
        "      to use OpenAI or Anthropic, see the end of goondan.yaml and .env.example"
    )


def _collision(layout: StateLayout, project: str) -> str | None:
    """A swarm of that name already has state here: a second bundle would share it."""
    for where in (layout.swarm_instances_dir(project), layout.logs_dir(project)):
        if where.exists():
            return (
                f"a swarm named {project!r} already has state in {where} (another bundle "
                "would share its conversations and logs); choose another --name, or --force"
            )
    return None


class _Init:
    name = "init"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("directory", nargs="?", default=".", metavar="DIR")
        parser.add_argument(
            "--template",
            choices=sorted(TEMPLATES),
            default=DEFAULT_TEMPLATE,
            help="; ".join(f"{t.name}: {t.description}" for t in TEMPLATES.values()),
        )
        parser.add_argument("--name", metavar="N", help="swarm/package name (default: from DIR)")
        parser.add_argument("--force", action="store_true", help="overwrite existing files")

    def run(self, args: argparse.Namespace) -> int:
        directory = Path(args.directory)
        given = args.name or getattr(args, "swarm", None)  # `--swarm S` names it too
        project = given or project_name(directory.resolve().name)
        problem = name_problem(project)
        if problem is None and not args.force:
            problem = _collision(layout_of(args), project)
        if problem is not None:
            print(f"goondan init: --name: {problem}", file=sys.stderr)
            return EXIT_USAGE
        if not given and project != directory.resolve().name:
            print(f"the swarm is named {project!r} (from the directory "
                  f"{directory.resolve().name!r}; --name N chooses another)")  # fmt: skip
        template = TEMPLATES[args.template]
        files = template.render(project)
        clash = existing(directory, files)
        if clash and not args.force:
            names = ", ".join(str(p) for p in clash)
            print(
                f"goondan init: would overwrite {names}; nothing was written "
                "(pass --force to overwrite, or choose another DIR)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        try:
            written = write_files(directory, files)
        except OSError as exc:
            print(f"goondan init: cannot write into {directory}: {exc}", file=sys.stderr)
            return EXIT_RUNTIME
        for path in written:
            print(f"wrote {path}")
        report = inspect_bundle(directory)
        for diag in report.errors:  # only if a template is broken: say so loudly
            print(f"goondan init: template {template.name}: {diag}", file=sys.stderr)
        if not report.valid:
            return EXIT_RUNTIME
        print(f"bundle {project} ({template.name}) is valid")
        print(_next_steps(directory))
        return EXIT_OK


COMMAND = _Init()
