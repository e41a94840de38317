"""The files `goondan init` writes, as text. `__NAME__` becomes the project's name.

Every template runs offline with `provider: scripted` and carries a commented Model for
OpenAI and Anthropic (between `# >>> provider` and `# <<< provider` lines, so a test can
uncomment each and validate it).
"""

from __future__ import annotations

REAL_MODEL = """\
# --- Using a real LLM ---------------------------------------------------------------------
# __REPLACE__
# Copy .env.example to .env and fill in the key (or export it in your shell).
#
# >>> openai
# apiVersion: goondan.ai/v1
# kind: Model
# metadata:
#   name: __MODEL__
# spec:
#   provider: openai
#   model: gpt-4o-mini               # any model your account offers
#   # endpoint: http://127.0.0.1:8000/v1   # any OpenAI-compatible server
#   apiKey:
#     valueFrom: {env: OPENAI_API_KEY}
# <<< openai
#
# >>> anthropic
# apiVersion: goondan.ai/v1
# kind: Model
# metadata:
#   name: __MODEL__
# spec:
#   provider: anthropic
#   model: claude-3-5-haiku-latest   # any model your account offers
#   apiKey:
#     valueFrom: {env: ANTHROPIC_API_KEY}
# <<< anthropic
"""

DEFAULT = """\
# __NAME__: a goondan bundle (template: default). It runs offline: the Model is a script,
# not an LLM (see the end of this file to switch to OpenAI or Anthropic).
#   goondan validate
#   goondan run --input "hello"
#   goondan run --input "note buy milk"   # the agent appends to notes.txt in its workspace
#   goondan run --input "list files"
#   goondan run                           # as a daemon; then `goondan send "hello"`
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: __NAME__
spec:
  version: "0.1.0"
  description: "One assistant with file tools (offline, scripted model)"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: assistant-model
spec:
  provider: scripted
  model: offline-script
  options:
    # The first rule that fits answers the step: `afterTool` rules fit right after that tool
    # ran, the others after new input whose text matches `match` (a regex).
    script:
      - afterTool: file-system__write
        reply: "Saved your note to notes.txt in my workspace."
      - afterTool: file-system__list
        reply: "My workspace holds: {last_tool_result}"
      - match: "(?i)^\\\\s*note\\\\s+"
        toolCalls:
          - name: file-system__write
            args: {path: notes.txt, content: "{input}\\n", append: true}
      - match: "(?i)\\\\b(list|files)\\\\b"
        toolCalls:
          - name: file-system__list
            args: {path: "."}
      - reply: "Hello! I run offline. Try 'note <text>' or 'list files'. You said: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: assistant
  labels:
    role: entry
spec:
  modelConfig:
    modelRef: Model/assistant-model
  prompt:
    system: |
      You are a helpful assistant. You can read, write, edit, list and search the files of
      your workspace, and query JSON data. Keep answers short.
  tools:
    - ref: {kind: Tool, name: file-system, package: "@goondan/base"}
    - ref: {kind: Tool, name: json-query, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: __NAME__
spec:
  entryAgent: Agent/assistant
  agents:
    - ref: Agent/assistant
  policy:
    maxStepsPerTurn: 8
"""

MULTI_AGENT = """\
# __NAME__: a goondan bundle (template: multi-agent). The coordinator hands every task to
# the worker with the built-in `agents` tool (agents__request, through the orchestrator);
# each agent is its own process. It runs offline: both Models are scripts. For a real LLM,
# replace both (coordinator-model and worker-model) as the end of this file shows.
#   goondan validate
#   goondan run --input "summarise the plan"
#   goondan run                           # as a daemon; then `goondan status` shows both
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: __NAME__
spec:
  version: "0.1.0"
  description: "A coordinator that delegates to a worker (offline, scripted models)"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: coordinator-model
spec:
  provider: scripted
  model: offline-coordinator
  options:
    script:
      # after the worker answered: report it (the tool result, as JSON)
      - afterTool: agents__request
        reply: "The worker answered: {last_tool_result}"
      # any new task: hand it to the worker and wait for its answer
      - toolCalls:
          - name: agents__request
            args: {target: worker, input: "{input}"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: worker-model
spec:
  provider: scripted
  model: offline-worker
  options:
    script:
      - reply: "done: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: coordinator
  labels:
    role: entry
spec:
  modelConfig:
    modelRef: Model/coordinator-model
  prompt:
    system: |
      You coordinate. Split the user's request into tasks, give each to the worker with
      agents__request (target: worker), then answer the user from the worker's results.
  tools:
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: worker
spec:
  modelConfig:
    modelRef: Model/worker-model
  prompt:
    system: |
      You are a worker. Do the task you are given and answer with the result only.
  tools:
    - ref: {kind: Tool, name: file-system, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: __NAME__
spec:
  entryAgent: Agent/coordinator
  agents:
    - ref: Agent/coordinator
    - ref: Agent/worker
  policy:
    maxStepsPerTurn: 8
"""

MINIMAL = """\
# __NAME__: the smallest goondan bundle (template: minimal): one agent, no tools. It runs
# offline: the Model is a script (see the end of this file for a real LLM).
#   goondan run --input "hello"
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: model
spec:
  provider: scripted
  model: offline-echo
  options:
    defaultReply: "You said: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: agent
spec:
  modelConfig:
    modelRef: Model/model
  prompt:
    system: You are a helpful assistant.
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: __NAME__
spec:
  entryAgent: Agent/agent
  agents:
    - ref: Agent/agent
"""

ENV_EXAMPLE = """\
# Copy to .env (goondan reads .env next to goondan.yaml; variables exported in the shell win).
# Only needed once a Model uses a real provider (see the end of goondan.yaml).
OPENAI_API_KEY=
ANTHROPIC_API_KEY=
"""

GITIGNORE = """\
# Secrets: API keys live here, never in git.
.env
.env.local
__pycache__/
*.pyc
"""
