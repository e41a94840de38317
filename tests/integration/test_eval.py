"""`goondan eval` through the real CLI: a real daemon started for the run, real agent
processes, the scripted model (docs/guides/evals.md)."""

from __future__ import annotations

import asyncio
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import xmlschema

from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli
from tests.unit.agent_process.fake_llm import FakeLLMServer, chat_completion

JUNIT_XSD = Path(__file__).parents[1] / "fixtures" / "junit" / "junit.xsd"
"""The JUnit schema CI readers accept (tests/unit/orchestrator/test_eval_junit.py: it bites)."""

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scripted}
spec:
  provider: scripted
  model: eval-script
  options:
    script:
      - {match: "(?i)json", reply: '{"ticket": 12, "status": "open"}'}
      - {match: "(?i)^bye", reply: "Goodbye!"}
      - {match: "^slow", reply: "slow reply", delayMs: 600}
      - reply: "Hello! You said: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: greeter}
spec:
  modelConfig: {modelRef: Model/scripted}
  prompt: {system: "Greet."}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: evalswarm}
spec:
  entryAgent: Agent/greeter
  agents: [{ref: Agent/greeter}]
"""

CASES = """\
cases:
  - {name: equals pass, input: "bye", expect: {equals: "Goodbye!"}}
  - {name: equals fail, input: "bye", expect: {equals: "Goodbye"}}
  - {name: contains pass, input: "hi", expect: {contains: "You said: hi"}}
  - {name: contains fail, input: "hi", expect: {contains: "Goodbye"}}
  - {name: regex pass, input: "ticket 42", expect: {regex: "said: ticket [0-9]+$"}}
  - {name: regex fail, input: "ticket x", expect: {regex: "ticket [0-9]+"}}
  - {name: jsonSchema pass, input: "json", expect: {jsonSchema: {type: object, required: [ticket]}}}
  - name: jsonSchema fail
    input: "json"
    expect: {jsonSchema: {type: object, properties: {ticket: {type: string}}}}
  - {name: maxTokens pass, input: "hi", expect: {maxTokens: 100000}}
  - {name: maxTokens fail, input: "hi", expect: {maxTokens: 1}}
  - {name: maxLatencyMs pass, input: "hi", expect: {maxLatencyMs: 30000}}
  - {name: maxLatencyMs fail, input: "hi", expect: {maxLatencyMs: 1}}
  - {name: multi-turn, inputs: ["hi", "json", "bye"], expect: {equals: "Goodbye!"}}
"""


def _files(tmp_path: Path, cases: str) -> tuple[Path, Path]:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)
    evals = tmp_path / "evals.yaml"
    evals.write_text(cases)
    return bundle, evals


async def test_each_evaluator_passes_and_fails_through_the_cli(tmp_path: Path) -> None:
    bundle, evals = _files(tmp_path, CASES)
    junit, report = tmp_path / "junit.xml", tmp_path / "report.json"
    async with asyncio.timeout(60):
        code, out, err = await run_cli(
            "eval", str(evals), "--bundle", str(bundle), "--concurrency", "8",
            "--junit", str(junit), "--json", str(report),
            "--state-root", str(tmp_path / "state"),
        )  # fmt: skip
    assert code == 1, err
    rows = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    assert len(rows) == 13
    for name, row in rows.items():
        assert row["passed"] is name.endswith(("pass", "multi-turn")), row
        if not row["passed"]:
            assert row["evaluator"] == name.removesuffix(" fail"), row
        assert row["traceId"]
    assert rows["multi-turn"]["tokens"] > rows["contains pass"]["tokens"] > 0
    assert len({r["instanceKey"] for r in rows.values()}) == 13  # a fresh instance per case
    assert "7 passed, 6 failed" in out
    xmlschema.XMLSchema(JUNIT_XSD).validate(junit)  # no costs: no (invalid) empty properties
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("13", "6")
    failures = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert sorted(c.get("name", "") for c in failures) == sorted(
        n for n in rows if n.endswith("fail")
    )
    # the run's daemon had its own state root: of the user's, only the kept run is written
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["evals"]


async def test_repeat_reports_the_pass_rate_and_compare_the_change(tmp_path: Path) -> None:
    bundle, evals = _files(
        tmp_path, "cases:\n  - {name: hi, input: hi, expect: {contains: Hello}}\n"
    )
    before = tmp_path / "before.json"
    before.write_text(json.dumps({"passRates": {"hi": 0.5}}))
    report = tmp_path / "report.json"
    async with asyncio.timeout(60):
        code, out, err = await run_cli(
            "eval", str(evals), "--bundle", str(bundle), "--repeat", "3",
            "--json", str(report), "--compare", str(before),
        )  # fmt: skip
    assert code == 0, err
    data = json.loads(report.read_text())
    assert data["passRates"] == {"hi": 1.0}
    assert sorted(r["repeat"] for r in data["results"]) == [0, 1, 2]
    assert "hi: pass rate 100%" in out
    assert "improved: hi" in out


async def test_a_bad_eval_file_exits_2_with_every_error_and_its_line(tmp_path: Path) -> None:
    bundle, evals = _files(
        tmp_path,
        """\
cases:
  - name: a
    input: hi
    expect: {contans: Hello}
  - name: b
    expect: {equals: x}
""",
    )
    async with asyncio.timeout(30):
        code, out, err = await run_cli("eval", str(evals), "--bundle", str(bundle))
    assert code == 2
    assert f"{evals}:line 4: E_EVAL_INVALID" in err
    assert f"{evals}:line 5: E_EVAL_INVALID" in err
    assert out == ""


CLIENT_TOOL = """\
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: client}
spec:
  exports:
    - name: confirm
      parameters: {type: object, properties: {question: {type: string}}}
      deferred: {method: ui.confirm}
"""


def _with_client_tool(bundle: Path) -> None:
    """The greeter gets a client-side tool (ui.confirm) the script calls on "confirm ..."."""
    text = (bundle / "goondan.yaml").read_text()
    text = text.replace(
        '      - {match: "(?i)json"',
        "      - {afterTool: client__confirm, reply: 'confirmed: {last_tool_result}'}\n"
        '      - {match: "^confirm",\n'
        '         toolCalls: [{name: client__confirm, args: {question: "{input}"}}]}\n'
        '      - {match: "(?i)json"',
    ).replace(
        "modelConfig: {modelRef: Model/scripted}",
        "modelConfig: {modelRef: Model/scripted}\n  tools: [Tool/client]",
    )
    (bundle / "goondan.yaml").write_text(text + CLIENT_TOOL)


async def test_client_side_answers_tool_calls_and_steps(tmp_path: Path) -> None:
    bundle, evals = _files(
        tmp_path,
        """\
cases:
  - name: answered
    input: "confirm delete"
    expect: {regex: 'confirmed: .*"confirmed": ?false'}
    answers: {"ui.confirm": {"confirmed": false}}
  - name: no answer
    input: "confirm delete"
    expect: {contains: confirmed}
  - name: toolCalled pass
    input: "confirm it"
    expect: {toolCalled: {name: client__confirm, args: {question: "confirm it"}}, maxSteps: 2}
    answers: {"ui.confirm": {"confirmed": true}}
  - name: toolCalled fail
    input: "confirm it"
    expect: {toolCalled: {name: client__confirm, args: {question: "other"}}}
    answers: {"ui.confirm": {"confirmed": true}}
  - name: toolNotCalled pass
    input: "hi"
    expect: {toolNotCalled: {name: client__confirm}}
  - name: toolNotCalled fail
    input: "confirm it"
    expect: {toolNotCalled: {name: client__confirm}}
    answers: {"ui.confirm": {"confirmed": true}}
  - name: maxSteps fail
    input: "confirm it"
    expect: {maxSteps: 1}
    answers: {"ui.confirm": {"confirmed": true}}
""",
    )
    _with_client_tool(bundle)
    report = tmp_path / "report.json"
    async with asyncio.timeout(60):
        code, _, err = await run_cli(
            "eval", str(evals), "--bundle", str(bundle), "--json", str(report)
        )
    assert code == 1, err
    rows = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    assert rows["answered"]["passed"] is True, rows["answered"]["why"]
    assert rows["no answer"]["evaluator"] == "turn"
    assert "ui.confirm" in rows["no answer"]["why"]
    for name in ("toolCalled", "toolNotCalled"):
        assert rows[f"{name} pass"]["passed"] is True, rows[f"{name} pass"]["why"]
        assert rows[f"{name} fail"]["evaluator"] == name
    assert rows["maxSteps fail"]["evaluator"] == "maxSteps"


async def test_concurrency_8_runs_8_cases_in_separate_agent_processes_at_once(
    tmp_path: Path,
) -> None:
    cases = "".join(
        f"  - {{name: c{n}, input: slow {n}, expect: {{equals: slow reply}}}}\n" for n in range(8)
    )
    bundle, evals = _files(tmp_path, "cases:\n" + cases)
    report = tmp_path / "report.json"
    async with asyncio.timeout(60):
        code, _, err = await run_cli(
            "eval", str(evals), "--bundle", str(bundle), "--concurrency", "8",
            "--json", str(report),
        )  # fmt: skip
    assert code == 0, err
    rows = json.loads(report.read_text())["results"]
    pids = [pid for row in rows for pid in row["pids"]]
    assert len(pids) == 8 and len(set(pids)) == 8, rows
    # all 8 were in flight at one moment: the last sent before the first answered (one after
    # another, each would have been sent after the one before it had its answer)
    ends = [row["startedAt"] + row["latencyMs"] / 1000 for row in rows]
    assert max(row["startedAt"] for row in rows) < min(ends), rows


OPENAI_BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: gpt}
spec:
  provider: openai
  model: gpt-test
  endpoint: __LLM__/v1
  apiKey: {value: sk-test}
  options: {maxRetries: 0, timeoutSeconds: 5}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: greeter}
spec:
  modelConfig: {modelRef: Model/gpt}
  prompt: {system: "Say yes."}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: evalswarm}
spec:
  entryAgent: Agent/greeter
  agents: [{ref: Agent/greeter}]
"""


async def test_repeat_shows_a_flaky_case_pass_rate(tmp_path: Path) -> None:
    bundle, evals = _files(
        tmp_path, "cases:\n  - {name: says yes, input: hi, expect: {contains: 'yes'}}\n"
    )
    report = tmp_path / "report.json"
    async with FakeLLMServer() as server:
        # a model that answers differently to the same input: 3 of 5 runs pass
        server.replies = [
            (200, chat_completion(text)) for text in ("yes", "no", "yes", "no", "yes")
        ]
        url = f"http://127.0.0.1:{server.port}"
        (bundle / "goondan.yaml").write_text(OPENAI_BUNDLE.replace("__LLM__", url))
        async with asyncio.timeout(60):
            code, out, err = await run_cli(
                "eval", str(evals), "--bundle", str(bundle), "--repeat", "5",
                "--concurrency", "2", "--json", str(report),
            )  # fmt: skip
        assert len(server.requests) == 5, (out, err)
    assert code == 1, err
    data = json.loads(report.read_text())
    assert data["passRates"] == {"says yes": 0.6}
    assert "says yes: pass rate 60%" in out
    assert {r["tokens"] for r in data["results"]} == {18}


JUDGE_MODEL = """\
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: judge}
spec:
  provider: openai
  model: gpt-judge
  endpoint: __LLM__/v1
  apiKey: {value: sk-test}
  options: {maxRetries: 0, timeoutSeconds: 5}
"""

JUDGED = """\
cases:
  - name: judged pass
    input: hi
    expect: {judge: {rubric: "Greets the user", model: Model/judge}}
  - name: judged fail
    input: hi
    expect: {judge: {rubric: "Refuses", model: Model/judge}}
  - name: judge garbage
    input: hi
    expect: {judge: {rubric: "Greets", model: Model/judge}}
  - name: judge unknown model
    input: hi
    expect: {judge: {rubric: "Greets", model: Model/nosuch}}
  - name: judge not asked
    input: hi
    expect: {contains: Goodbye, judge: {rubric: "Greets", model: Model/judge}}
"""


async def test_judge_scores_through_a_model_of_the_bundle(tmp_path: Path) -> None:
    bundle, evals = _files(tmp_path, JUDGED)
    report = tmp_path / "report.json"
    async with FakeLLMServer() as server:
        server.replies = [
            (200, chat_completion('{"pass": true, "reason": "it greets"}')),
            (200, chat_completion('{"pass": false, "reason": "it does not refuse"}')),
            (200, chat_completion("Sure! It passes.")),
        ]
        url = f"http://127.0.0.1:{server.port}"
        with (bundle / "goondan.yaml").open("a") as f:
            f.write(JUDGE_MODEL.replace("__LLM__", url))
        async with asyncio.timeout(60):
            code, out, err = await run_cli(
                "eval", str(evals), "--bundle", str(bundle), "--concurrency", "1",
                "--json", str(report),
            )  # fmt: skip
        asked = [r.body for r in server.requests]
    assert code == 1, err
    rows = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    assert rows["judged pass"]["passed"] is True, rows["judged pass"]
    assert rows["judged pass"]["judgeReason"] == "it greets"
    assert (rows["judged fail"]["evaluator"], rows["judged fail"]["why"]) == (
        "judge", "it does not refuse",
    )  # fmt: skip
    for name in ("judge garbage", "judge unknown model"):
        assert rows[name]["passed"] is False
        assert rows[name]["evaluator"] == "judge"
        assert rows[name]["why"].startswith("E_EVAL_JUDGE"), rows[name]
    assert "Model/nosuch" in rows["judge unknown model"]["why"]
    assert rows["judge not asked"]["evaluator"] == "contains"  # no tokens spent on it
    assert len(asked) == 3, (out, err)
    assert all(body["response_format"] == {"type": "json_object"} for body in asked)
    assert all(body["model"] == "gpt-judge" for body in asked)
    assert "Hello! You said: hi" in asked[0]["messages"][-1]["content"]
    assert "Greets the user" in asked[0]["messages"][-1]["content"]


async def test_attach_runs_the_cases_in_the_running_daemon(
    tmp_path: Path, start_daemon: StartDaemon
) -> None:
    bundle, evals = _files(
        tmp_path,
        """\
cases:
  - {name: greets, input: hi, expect: {contains: "You said: hi"}}
  - {name: fails, input: bye, expect: {equals: nope}}
  - name: answered
    input: "confirm delete"
    expect: {regex: 'confirmed: .*"confirmed": ?false'}
    answers: {"ui.confirm": {"confirmed": false}}
""",
    )
    _with_client_tool(bundle)
    report = tmp_path / "report.json"
    async with asyncio.timeout(60):
        code, _, err = await run_cli("eval", str(evals), "--bundle", str(bundle), "--attach")
        assert code == 1
        assert "E_DAEMON_NOT_RUNNING" in err
        daemon = await start_daemon(bundle, swarm="evalswarm")
        code, _, err = await run_cli(
            "eval", str(evals), "--bundle", str(bundle), "--attach", "--json", str(report)
        )
    assert code == 1, err
    rows = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    assert rows["greets"]["passed"] is True, rows["greets"]
    assert rows["fails"]["evaluator"] == "equals"
    assert rows["answered"]["passed"] is True, rows["answered"]  # answered over the socket
    for row in rows.values():  # run by the daemon that was already there, kept in its state
        key = row["instanceKey"]
        assert row["pids"] and daemon.pid not in row["pids"], row
        assert (Path(os.environ["GOONDAN_STATE_ROOT"]) / "instances" / "evalswarm" / key).is_dir()


PRICED = """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: scripted}
spec:
  modelConfig: {modelRef: Model/scripted}
  prompt: {system: "Greet."}
"""


async def test_cost_per_case_from_the_models_pricing(tmp_path: Path) -> None:
    bundle, evals = _files(
        tmp_path,
        """\
cases:
  - {name: priced, input: hi, expect: {contains: "yes"}}
  - {name: unpriced, agent: scripted, input: hi, expect: {contains: "Hello"}}
""",
    )
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    async with FakeLLMServer() as server:
        server.replies = [(200, chat_completion("yes"))]  # 11 tokens in, 7 out
        url = f"http://127.0.0.1:{server.port}"
        text = OPENAI_BUNDLE.replace("__LLM__", url).replace(
            "options: {maxRetries: 0, timeoutSeconds: 5}",
            "options: {maxRetries: 0, timeoutSeconds: 5}\n"
            "  pricing: {inputPerMTok: 1000, outputPerMTok: 2000}",
        )
        both = "agents: [{ref: Agent/greeter}, {ref: Agent/scripted}]"
        text = text.replace("agents: [{ref: Agent/greeter}]", both)
        scripted_model = "---\n" + BUNDLE.split("---")[0]
        (bundle / "goondan.yaml").write_text(text + PRICED + scripted_model)
        async with asyncio.timeout(60):
            code, out, err = await run_cli(
                "eval", str(evals), "--bundle", str(bundle), "--json", str(report),
                "--junit", str(junit),
            )  # fmt: skip
    assert code == 0, (out, err)
    rows = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    # 11 x $1000/M + 7 x $2000/M
    assert rows["priced"]["costUsd"] == 0.025, rows["priced"]
    assert rows["unpriced"]["costUsd"] is None  # no pricing: unknown, not free
    assert "0.025000" in out
    xmlschema.XMLSchema(JUNIT_XSD).validate(junit)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"costUsd:priced": "0.02500000"}  # no total: one case has no price


async def test_the_judges_tokens_count_in_the_cases_cost(tmp_path: Path) -> None:
    bundle, evals = _files(
        tmp_path,
        """\
cases:
  - {name: judged, input: hi, expect: {judge: {rubric: Greets, model: Model/judge}}}
  - {name: not a verdict, input: hi, expect: {judge: {rubric: Greets, model: Model/judge}}}
  - {name: unpriced judge, input: hi, expect: {judge: {rubric: Greets, model: Model/free}}}
""",
    )
    report = tmp_path / "report.json"
    async with FakeLLMServer() as server:
        server.replies = [  # 11 tokens in, 7 out each
            (200, chat_completion('{"pass": true, "reason": "it greets"}')),
            (200, chat_completion("Sure! It passes.")),
            (200, chat_completion('{"pass": true, "reason": "it greets"}')),
        ]
        judges = JUDGE_MODEL.replace("__LLM__", f"http://127.0.0.1:{server.port}")
        priced = (
            "options: {maxRetries: 0, timeoutSeconds: 5}\n"
            "  pricing: {inputPerMTok: 1000, outputPerMTok: 2000}"
        )
        judges = judges.replace("options: {maxRetries: 0, timeoutSeconds: 5}", priced)
        judges += JUDGE_MODEL.replace("__LLM__", f"http://127.0.0.1:{server.port}").replace(
            "name: judge", "name: free"
        )
        free_agent = "  model: eval-script\n  pricing: {inputPerMTok: 0, outputPerMTok: 0}\n"
        text = BUNDLE.replace("  model: eval-script\n", free_agent) + judges
        (bundle / "goondan.yaml").write_text(text)
        async with asyncio.timeout(60):
            code, out, err = await run_cli(
                "eval", str(evals), "--bundle", str(bundle), "--concurrency", "1",
                "--json", str(report),
            )  # fmt: skip
        assert len(server.requests) == 3, (out, err)
    assert code == 1, err
    rows = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    # the instance's scripted calls are free; the judge's 11 x $1000/M + 7 x $2000/M
    for name in ("judged", "not a verdict"):  # an answer that is no verdict still cost tokens
        assert (rows[name]["costUsd"], rows[name]["judgeCostUsd"]) == (0.025, 0.025), rows[name]
    assert rows["not a verdict"]["evaluator"] == "judge"
    unpriced = rows["unpriced judge"]
    assert (unpriced["passed"], unpriced["costUsd"], unpriced["judgeCostUsd"]) == (True, None, None)
    assert out.count("0.025000") == 2, out
