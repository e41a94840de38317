"""Kept eval runs in Studio (orchestrator/evals/runs.py, orchestrator/studio/evals.py): two runs
of one eval file through the real CLI, then a real Studio process read with httpx: the list with
what regressed, a run's cases, and a case's conversation and trace from the run's own state."""

from __future__ import annotations

import asyncio
import json
import os
import pty
from pathlib import Path

from tests.integration.harness import PYTHON, child_env, run_cli
from tests.integration.studio_harness import first_event, studio
from tests.integration.test_eval import _files
from tests.integration.test_studio import code_of

PASSING = """\
cases:
  - {name: greets, input: hi, expect: {contains: Hello}}
  - {name: leaves, input: bye, expect: {equals: "Goodbye!"}}
"""


async def test_kept_runs_show_in_studio_with_what_regressed_their_conversations_and_traces(
    tmp_path: Path,
) -> None:
    bundle, evals = _files(tmp_path, PASSING)
    state = ["--state-root", str(tmp_path / "state")]
    async with asyncio.timeout(120):
        code, _, err = await run_cli("eval", str(evals), "--bundle", str(bundle), *state)
        assert code == 0, err
        evals.write_text(PASSING.replace("contains: Hello", "contains: Howdy"))
        code, _, err = await run_cli("eval", str(evals), "--bundle", str(bundle), *state)
        assert code == 1, err
        assert "E_" not in err and "kept in" in err
        async with studio(*state) as s, s.client() as http:
            listed = (await http.get("/api/evals")).json()["runs"]
            assert len(listed) == 2
            newest, first = listed
            assert first["previous"] is None
            assert newest["previous"] == first["id"]
            assert newest["regressed"] == [{"case": "greets", "before": 1.0, "now": 0.0}]
            assert newest["improved"] == []
            assert newest["summary"]["passed"] == 1 and newest["summary"]["failed"] == 1
            assert newest["swarm"] == "evalswarm" and newest["name"] == "evals"

            run = (await http.get(f"/api/evals/{newest['id']}")).json()
            cases = {r["case"]: r for r in run["results"]}
            assert cases["greets"]["evaluator"] == "contains" and cases["leaves"]["passed"]
            key, trace = cases["greets"]["instanceKey"], cases["greets"]["traceId"]

            q = {"eval": newest["id"]}
            keys = {
                r["instanceKey"]
                for r in (await http.get("/api/instances", params=q)).json()["instances"]
            }
            assert keys == {c["instanceKey"] for c in cases.values()}
            async with http.stream("GET", "/api/stream/conversation",
                                   params={**q, "key": key, "agent": ""}) as stream:  # fmt: skip
                messages = await first_event(stream, "messages")
            assert [m["role"] for m in messages] == ["user", "assistant"]
            assert messages[0]["content"] == "hi" and "Hello" in messages[1]["content"]
            spans = (await http.get(f"/api/trace/{trace}", params=q)).json()["spans"]
            assert spans and {s["instanceKey"] for s in spans} == {key}
            # the first run's instances are not the newest's
            older = (await http.get("/api/instances", params={"eval": first["id"]})).json()
            assert keys.isdisjoint(r["instanceKey"] for r in older["instances"])


async def test_a_run_id_from_the_page_names_only_a_kept_run(tmp_path: Path) -> None:
    bundle, evals = _files(tmp_path, PASSING)
    root = tmp_path / "state"
    outside = tmp_path / "outside"
    (outside / "state" / "instances" / "evalswarm" / "k" / "a" / "messages").mkdir(parents=True)
    (outside / "report.json").write_text(json.dumps({"results": [], "swarm": "evalswarm"}))
    async with asyncio.timeout(90):
        code, _, err = await run_cli("eval", str(evals), "--bundle", str(bundle),
                                     "--state-root", str(root))  # fmt: skip
        assert code == 0, err
        planted = "20200101T000000Z-abcdef"  # a run-shaped link out of the state root
        (root / "evals" / planted).symlink_to(outside)
        async with studio("--state-root", str(root)) as s, s.client() as http:
            assert len((await http.get("/api/evals")).json()["runs"]) == 1
            for run in (planted, "..", "../../outside", "x" * 600, "20200101", "a%00b"):
                for path, params in (
                    # (a `..` segment in a path is resolved by the client before it is sent)
                    (f"/api/evals/{run}" if ".." not in run else "/api/evals/x..", {}),
                    ("/api/instances", {"eval": run}),
                    ("/api/trace/abc", {"eval": run}),
                    ("/api/stream/conversation", {"eval": run, "key": "k"}),
                ):
                    r = await http.get(path, params=params)
                    assert r.status_code == 404 and code_of(r) == "E_EVAL_RUN_NOT_FOUND", (
                        path,
                        run,
                    )


async def test_keep_runs_bounds_what_is_kept(tmp_path: Path) -> None:
    bundle, evals = _files(
        tmp_path, "cases:\n  - {name: greets, input: hi, expect: {contains: Hello}}\n"
    )
    root = tmp_path / "state"
    async with asyncio.timeout(120):
        for keep in ("2", "2", "2", "0"):
            code, _, err = await run_cli(
                "eval", str(evals), "--bundle", str(bundle),
                "--state-root", str(root), "--keep-runs", keep,
            )  # fmt: skip
            assert code == 0, err
            kept = sorted(p.name for p in (root / "evals").iterdir())
            assert len(kept) <= 2
        assert len(kept) == 0  # --keep-runs 0: none kept, this one included
        code, _, err = await run_cli(
            "eval", str(evals), "--bundle", str(bundle), "--keep-runs", "-1"
        )
        assert code == 2 and "--keep-runs" in err


async def test_a_terminal_sees_a_live_progress_bar_and_a_pipe_does_not(tmp_path: Path) -> None:
    bundle, evals = _files(tmp_path, PASSING)
    primary, secondary = pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator", "eval", str(evals), "--bundle", str(bundle),
            "--concurrency", "1",
            env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=secondary,
        )  # fmt: skip
        os.close(secondary)
        async with asyncio.timeout(90):
            out, _ = await proc.communicate()
        screen = b""
        while True:  # the pty holds what the run wrote; EIO once it is drained and closed
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(primary)
    assert proc.returncode == 0
    text = screen.decode()
    assert "\rgoondan eval [" + "#" * 15 + "." * 15 + "] 1/2 cases" in text
    assert f"goondan eval [{'#' * 30}] 2/2 cases" in text
    assert "cases" not in out.decode().splitlines()[0]  # the table on stdout, not the bar
    code, _, err = await run_cli("eval", str(evals), "--bundle", str(bundle))
    assert code == 0 and "[#" not in err  # piped (as in CI logs): no bar
