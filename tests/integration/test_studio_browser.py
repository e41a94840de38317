"""Studio in a real headless Chromium against a real daemon and a real `goondan studio`: the
process table follows a send and a restart from the page, a conversation follows a new
message, a trace shows both agents of an `agents__request`, and answering a pending call (and
approving or denying a Tool export's `approval:` call, through the control request of `goondan
calls approve|deny`) from the page resumes its turn. Each view's screenshot is saved under
tests/artifacts/studio/."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
from pathlib import Path

from protocol.control import SendText
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, run_cli
from tests.integration.studio_harness import browser_page, chromium_path, screenshot, studio
from tests.integration.test_approvals import approval_events, ran
from tests.integration.test_approvals import start as start_approvals

AGENTS = REPO / "tests" / "fixtures" / "agents"
DEFERRED = REPO / "tests" / "fixtures" / "deferred"


async def test_process_table_follows_a_send_and_restart_bumps_the_generation(
    start_daemon: StartDaemon,
) -> None:
    chromium_path()
    async with asyncio.timeout(120):
        await start_daemon()
        assert (await run_cli("send", "--agent", "alpha", "hi"))[0] == 0
        async with studio("--allow-actions") as s, browser_page() as page:
            await page.goto(s.url + "#/processes")
            await page.wait_for_selector('tr[data-id="agent:alpha:probe"]')
            code, _, err = await run_cli("send", "--agent", "beta", "hello")
            assert code == 0, err
            beta = page.locator('tr[data-id="agent:beta:probe"]')
            await beta.wait_for()
            assert await beta.locator(".gen").inner_text() == "1"
            await beta.locator("button.restart").click()
            # The new generation shows `spawning` until its process reports ready; the page
            # must then follow it to `idle` on its own.
            await page.wait_for_function(
                """() => document.querySelector('tr[data-id="agent:beta:probe"] .gen')
                         ?.textContent === '2'"""
            )
            await page.wait_for_function(
                """() => document.querySelector('tr[data-id="agent:beta:probe"] .status')
                         ?.textContent.includes('idle')"""
            )
            # what the action did, in words (not the control reply's JSON)
            said = await page.locator("#action-result").inner_text()
            assert said == "restarted agent:beta:probe:1 → agent:beta:probe:2", said
            await screenshot(page, "processes")


async def test_conversation_view_follows_a_new_message(start_daemon: StartDaemon) -> None:
    chromium_path()
    async with asyncio.timeout(120):
        daemon = await start_daemon()
        assert (await daemon.send("pid", "alpha", key="k1")).ok
        async with studio() as s, browser_page() as page:
            await page.goto(s.url + "#/conversation")  # opens the instance that spoke last
            await page.wait_for_function("location.hash.includes('key=k1')")
            # The new hash re-renders the view, whose instance list fills in after a fetch.
            await page.wait_for_function(
                "document.querySelector('#conv-key')?.value === 'k1\\u0000alpha'"
            )
            icon = await page.locator('link[rel="icon"]').get_attribute("href")
            served = await page.request.get(s.base + str(icon))
            assert served.ok and served.headers["content-type"].startswith("image/svg+xml")
            messages = page.locator("#conversation .msg")
            await page.wait_for_function("document.querySelectorAll('#conversation .msg')"
                                         ".length === 4")  # fmt: skip
            assert (await daemon.send("a new message", "alpha", key="k1")).ok
            await page.wait_for_function("document.querySelectorAll('#conversation .msg')"
                                         ".length === 6")  # fmt: skip
            assert "a new message" in await messages.nth(4).inner_text()
            assert await page.locator("#conversation a.trace").count() == 2
            await screenshot(page, "conversation")


async def test_trace_view_shows_both_agents_of_a_request(start_daemon: StartDaemon) -> None:
    chromium_path()
    async with asyncio.timeout(120):
        daemon = await start_daemon(AGENTS, swarm="agents")
        reply = await daemon.send("sync summarise", "caller")
        assert reply.ok, reply.error
        code, out, _ = await run_cli("instance", "show", "agents", "--agent", "caller", "--json")
        assert code == 0
        trace_id = json.loads(out.splitlines()[0])["traceId"]
        async with studio() as s, browser_page() as page:
            await page.goto(f"{s.url}#/trace/{trace_id}")
            await page.locator('.span.turn[data-agent="caller"]').wait_for()
            await page.locator('.span.turn[data-agent="worker"]').wait_for()
            assert await page.locator('.span.tool[data-agent="caller"]').count() == 1
            assert await page.locator(".span.model").count() >= 3
            await screenshot(page, "trace")
            await page.goto(s.url + "#/graph")
            edge = page.locator('g.edge[data-source="agent:caller"][data-target="agent:worker"]')
            await edge.wait_for()
            # its label sits beside its line, on a halo: not drawn over it
            assert await edge.locator("text.edge-label").get_attribute("paint-order") == "stroke"
            await screenshot(page, "graph")
            await page.goto(s.url + "#/charts")
            await page.locator("#errors").wait_for()
            assert await page.locator(".chart rect").count() >= 1
            inside = await page.evaluate(
                """() => [...document.querySelectorAll('.chart-svg')].every((svg) => {
                     const box = svg.getBoundingClientRect();
                     return [...svg.querySelectorAll('text.axis')].every((t) => {
                       const r = t.getBoundingClientRect();
                       return r.left >= box.left - 0.5 && r.right <= box.right + 0.5; });
                   })"""
            )
            assert inside  # "now" and "-60m" fully inside their chart
            await screenshot(page, "charts")
            await page.goto(f"{s.url}#/logs?trace={trace_id[:8]}")
            await page.wait_for_function("document.querySelectorAll('#logs .line').length > 3")
            await screenshot(page, "logs")


async def test_answering_and_approving_pending_calls_from_the_page_resume_their_turns(
    start_daemon: StartDaemon,
) -> None:
    chromium_path()
    async with asyncio.timeout(120):
        daemon = await start_daemon(DEFERRED, swarm="deferred")
        for text, key in (("calendar", "c1"), ("approve deploy", "c2")):
            req = SendText(request_id=key, text=text, agent="alpha", instance_key=key, wait=False)
            assert (await daemon.request(req)).ok
        async with studio("--allow-actions") as s, browser_page() as page:
            await page.goto(s.url + "#/calls")
            await page.locator("#calls tbody tr").nth(1).wait_for()
            await screenshot(page, "calls")
            row = page.locator("#calls tr", has_text="calendar.read")
            await row.locator("textarea.result").fill('{"events": ["standup"]}')
            mark = daemon.mark()
            await row.locator("button.resolve").click()
            await daemon.wait_for("transition", since=mark, target="idle")
            await (
                page.locator("#calls tr", has_text="goondan.approve")
                .locator("button.approve")
                .click()
            )
            await daemon.wait_for("transition", since=mark + 1, target="idle")
            await page.locator("#calls", has_text="No call waits").wait_for()
        for key, expected in (("c1", "standup"), ("c2", "approved")):
            code, out, _ = await run_cli("instance", "show", key, "--json")
            last = json.loads(out.splitlines()[-1])
            assert code == 0 and last["role"] == "assistant" and expected in last["content"]


async def test_approving_and_denying_a_tools_approval_from_the_page(
    start_daemon: StartDaemon,
) -> None:
    chromium_path()
    async with asyncio.timeout(120):
        daemon = await start_approvals(start_daemon)
        for text, key in (("pay big", "p1"), ("wipe", "w1")):  # approval: {when} / required
            req = SendText(request_id=key, text=text, agent="teller", instance_key=key, wait=False)
            assert (await daemon.request(req)).ok
        async with studio("--allow-actions") as s, browser_page() as page:
            await page.goto(s.url + "#/calls")
            await page.locator("#calls tbody tr").nth(1).wait_for()
            await screenshot(page, "approvals")
            mark = daemon.mark()
            await (
                page.locator("#calls tr", has_text="payments__transfer")
                .locator("button.approve")
                .click()
            )
            await daemon.wait_for("transition", since=mark, process="agent:teller:p1:1",
                                  target="idle")  # fmt: skip
            wipe = page.locator("#calls tr", has_text="payments__wipe")
            await wipe.locator("input.why").fill("not today")
            await wipe.locator("button.deny").click()
            await daemon.wait_for("transition", since=mark, process="agent:teller:w1:1",
                                  target="idle")  # fmt: skip
            await page.locator("#calls", has_text="No call waits").wait_for()
        assert ran("p1") == ["transfer 500 bob"] and ran("w1") == []
        decided = {key: approval_events(key)[0]["data"] for key in ("p1", "w1")}
        starter = pwd.getpwuid(os.getuid()).pw_name  # who started Studio, not the page
        assert {k: (d["decision"], d["by"], d["via"]) for k, d in decided.items()} == {
            "p1": ("approved", starter, "studio"), "w1": ("denied", starter, "studio"),
        }  # fmt: skip
        assert decided["w1"]["message"] == "not today"
        for key, expected in (("p1", '"sent":500'), ("w1", "E_TOOL_PERMISSION_DENIED")):
            code, out, _ = await run_cli("instance", "show", key, "--json")
            last = json.loads(out.splitlines()[-1])
            assert code == 0 and last["role"] == "assistant" and expected in last["content"]


async def test_evals_view_lists_kept_runs_and_opens_a_cases_conversation(tmp_path: Path) -> None:
    from tests.integration.test_eval import _files

    chromium_path()
    cases = "cases:\n  - {name: greets, input: hi, expect: {contains: Hello}}\n"
    bundle, evals = _files(tmp_path, cases)
    async with asyncio.timeout(120):
        assert (await run_cli("eval", str(evals), "--bundle", str(bundle)))[0] == 0
        evals.write_text(cases.replace("Hello", "Howdy"))
        assert (await run_cli("eval", str(evals), "--bundle", str(bundle)))[0] == 1
        async with studio() as s, browser_page() as page:
            await page.goto(s.url + "#/evals")
            rows = page.locator("#evals tbody tr")
            await rows.first.wait_for()
            assert await rows.count() == 2
            assert await rows.nth(0).locator(".against").inner_text() == "1 regressed"
            assert await rows.nth(1).locator(".against").inner_text() == "first run"
            await rows.nth(0).locator("a").click()
            await page.wait_for_selector("#eval-cases tr.failed")
            assert "regressed: greets (100% → 0%)" in await page.locator("#eval-diff").inner_text()
            await screenshot(page, "evals")
            await page.locator("#eval-cases a.conversation").click()
            await page.wait_for_function(
                "document.querySelectorAll('#conversation .msg').length === 2"
            )
            assert "hi" in await page.locator("#conversation .msg").first.inner_text()
            await page.locator("#conversation a.trace").click()
            await page.wait_for_selector("#trace .span.turn")
