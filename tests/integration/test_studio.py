"""`goondan studio` over HTTP (a real Studio process, httpx as the client): who may read, who may
act, and what bad input gets (coded errors naming the fix)."""

from __future__ import annotations

import asyncio
import os
import pwd
from pathlib import Path

import httpx

from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, run_cli
from tests.integration.studio_harness import first_event, studio
from tests.integration.test_approvals import approval_events, ask, ran
from tests.integration.test_approvals import start as start_approvals


def code_of(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


async def test_read_only_by_default_and_actions_need_the_page_origin_and_json(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        assert (await daemon.send("hi", "alpha")).ok
        async with studio() as s, s.client() as http:
            info = await http.get("/api/info")
            assert info.status_code == 200 and info.json()["allowActions"] is False
            refused = await http.post("/api/processes/restart", json={"agent": "alpha"})
            assert refused.status_code == 403 and code_of(refused) == "E_STUDIO_READ_ONLY"
            rebinding = await http.get("/api/info", headers={"Host": "attacker.example:8791"})
            assert rebinding.status_code == 403 and code_of(rebinding) == "E_STUDIO_FORBIDDEN"
        async with studio("--allow-actions") as s, s.client() as http:
            origin = {"Origin": s.base}
            for headers, body in (
                ({}, {"agent": "alpha"}),  # no Origin: not from the page
                ({"Origin": "http://evil.example"}, {"agent": "alpha"}),
            ):
                r = await http.post("/api/processes/restart", json=body, headers=headers)
                assert r.status_code == 403 and code_of(r) == "E_STUDIO_FORBIDDEN"
            form = await http.post(
                "/api/processes/restart",
                content=b"agent=alpha",
                headers={**origin, "Content-Type": "text/plain"},
            )
            assert form.status_code == 403
            for body in ({"agent": 5}, [1], {"agent": "x" * 600}):
                r = await http.post("/api/processes/restart", json=body, headers=origin)
                assert r.status_code == 400 and code_of(r) == "E_STUDIO_BAD_REQUEST"
            bad_json = await http.post(
                "/api/processes/restart",
                content=b"{",
                headers={**origin, "Content-Type": "application/json"},
            )
            assert bad_json.status_code == 400
            both = await http.post("/api/calls/x", json={"result": 1, "error": {}}, headers=origin)
            assert both.status_code == 400 and "exactly one" in both.json()["error"]["message"]
            for path, body in (("/api/calls/x/maybe", {}), ("/api/calls/x/deny", {"message": 5}),
                               ("/api/calls/x/deny", {"message": "m" * 600})):  # fmt: skip
                r = await http.post(path, json=body, headers=origin)
                assert r.status_code == 400 and code_of(r) == "E_STUDIO_BAD_REQUEST"
            gone = await http.post("/api/calls/no-such-call/approve", json={}, headers=origin)
            assert gone.status_code == 409 and code_of(gone) == "E_CALL_NOT_FOUND"
            unknown = await http.post(
                "/api/processes/stop",
                headers=origin,
                json={"agent": "alpha", "instanceKey": "nope"},
            )
            assert unknown.status_code == 409 and code_of(unknown) == "E_INSTANCE_NOT_FOUND"
            ok = await http.post(
                "/api/processes/stop",
                headers=origin,
                json={"agent": "alpha", "instanceKey": "probe"},
            )
            assert ok.status_code == 200 and ok.json()["result"]["stopped"] == ["agent:alpha:probe"]
            missing = await http.get("/api/trace/0123456789abcdef")
            assert missing.status_code == 404 and code_of(missing) == "E_EVENT_NOT_FOUND"
            logs = await http.get("/api/logs", params={"since": "yesterday-ish"})
            assert logs.status_code == 400 and "--since" in logs.json()["error"]["message"]


async def test_beyond_loopback_the_token_guards_every_page(tmp_path: Path) -> None:
    async with asyncio.timeout(60):
        async with studio("--listen", "0.0.0.0:0", "--swarm", "none") as s:
            # --listen is given twice: the harness's loopback one, then this one wins
            assert "?token=" in s.url
            token = s.url.split("?token=")[1]
            async with httpx.AsyncClient(base_url=s.base.replace("0.0.0.0", "127.0.0.1")) as http:
                denied = await http.get("/api/info")
                assert denied.status_code == 403 and "token" in denied.json()["error"]["message"]
                wrong = await http.get("/api/info", headers={"Authorization": "Bearer nope"})
                assert wrong.status_code == 403
                bearer = await http.get("/api/info", headers={"Authorization": f"Bearer {token}"})
                assert bearer.status_code == 200
                opened = await http.get("/", params={"token": token})
                assert opened.status_code == 303 and opened.headers["location"] == "/"
                assert "HttpOnly" in opened.headers["set-cookie"]
                http.cookies.set("goondan_studio", token)
                assert (await http.get("/api/info")).status_code == 200
        short = tmp_path / "token"
        short.write_text("short\n")
        short.chmod(0o600)
        code, _, err = await run_cli("studio", "--token-file", str(short), "--swarm", "x")
        assert code == 2 and "at least 16" in err
        given = tmp_path / "given"
        given.write_text("a-token-of-my-own-0123456789\n")
        for mode in (0o644, 0o640):  # every local user, or the file's group, would hold it
            given.chmod(mode)
            code, _, err = await run_cli("studio", "--token-file", str(given), "--swarm", "x")
            assert code == 2 and f"chmod 600 {given}" in err, err
        given.chmod(0o600)
        async with studio("--token-file", str(given), "--swarm", "none") as s, s.client() as http:
            assert s.token == "a-token-of-my-own-0123456789"
            assert (await http.get("/api/info")).status_code == 200
        code, _, err = await run_cli("studio", "--listen", "nowhere", "--swarm", "x")
        assert code == 2 and "HOST:PORT" in err


async def test_without_a_daemon_the_files_are_shown_and_actions_say_why_not(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        assert (await daemon.send("hi", "alpha", key="k1")).ok
        await run_cli("stop")
        await daemon.wait()
        async with (
            studio("--allow-actions", "--swarm", "probe") as s,
            s.client() as http,
        ):
            snap = (await http.get("/api/processes")).json()
            assert snap == {"daemon": None, "processes": []}
            rows = (await http.get("/api/instances")).json()["instances"]
            assert {(r["instanceKey"], r["agent"]) for r in rows} == {("k1", "alpha")}
            r = await http.post(
                "/api/processes/restart", json={"agent": "alpha"}, headers={"Origin": s.base}
            )
            assert r.status_code == 503 and code_of(r) == "E_DAEMON_NOT_RUNNING"
            calls = (await http.get("/api/calls")).json()
            assert calls == {"calls": [], "daemon": False}


async def test_on_loopback_a_local_user_without_the_token_reads_and_decides_nothing(
    start_daemon: StartDaemon,
) -> None:
    """F5: any local user (`runuser -u nobody curl ...`) reached a loopback Studio without a
    token: it read conversations and, with --allow-actions, approved calls."""
    async with asyncio.timeout(90):
        daemon = await start_approvals(start_daemon)
        request = await ask(daemon, "pay big")
        async with studio("--allow-actions") as s:
            assert "?token=" in s.url and len(s.token) >= 43  # token_urlsafe(32)
            async with httpx.AsyncClient(base_url=s.base) as anyone:
                origin = {"Origin": s.base}
                for path in ("/", "/api/info", "/api/calls", "/api/instances", "/api/logs",
                             "/api/stream/conversation?key=approvals&agent=teller"):  # fmt: skip
                    r = await anyone.get(path)
                    assert r.status_code == 403 and code_of(r) == "E_STUDIO_FORBIDDEN", path
                for headers in (origin, {**origin, "Authorization": "Bearer " + "x" * 43}):
                    r = await anyone.post(f"/api/calls/{request['id']}/approve", json={},
                                          headers=headers)  # fmt: skip
                    assert r.status_code == 403 and code_of(r) == "E_STUDIO_FORBIDDEN"
                anyone.cookies.set("goondan_studio", "y" * 43)
                r = await anyone.get("/api/calls")
                assert r.status_code == 403 and code_of(r) == "E_STUDIO_FORBIDDEN"
            assert ran() == []
            async with s.client(timeout=30) as http:
                params = {"key": "approvals", "agent": "teller"}
                async with http.stream("GET", "/api/stream/conversation", params=params) as r:
                    assert r.status_code == 200
                    said = [(m["role"], m.get("content")) for m in await first_event(r, "messages")]
                assert ("user", "pay big") in said, said
                calls = (await http.get("/api/calls")).json()["calls"]
                assert [c["id"] for c in calls] == [request["id"]]
                approved = await http.post(f"/api/calls/{request['id']}/approve", json={},
                                           headers={"Origin": s.base})  # fmt: skip
                assert approved.status_code == 200, approved.text
        assert ran() == ["transfer 500 bob"]
        [event] = approval_events()
        decided = event["data"]
        starter = pwd.getpwuid(os.getuid()).pw_name
        assert (decided["decision"], decided["by"], decided["via"]) == (
            "approved",
            starter,
            "studio",
        )


async def test_no_token_serves_anyone_on_this_machine_and_says_so_loudly() -> None:
    async with asyncio.timeout(60):
        async with (
            studio("--no-token", "--swarm", "none") as s,
            httpx.AsyncClient(base_url=s.base) as anyone,
        ):
            assert "?token=" not in s.url
            assert (await anyone.get("/api/info")).status_code == 200
        assert s.proc.stderr is not None
        err = (await s.proc.stderr.read()).decode()
        assert "studio_no_token" in err and "anyone on this machine" in err
        for refused in (("--no-token", "--listen", "0.0.0.0:0"),
                        ("--no-token", "--token-file", "/dev/null")):  # fmt: skip
            code, _, err = await run_cli("studio", "--swarm", "x", *refused)
            assert code == 2 and "--no-token" in err, err


async def test_with_two_daemons_studio_asks_which_and_shows_live_instances(
    start_daemon: StartDaemon,
) -> None:
    """Not "no daemon runs": it names both and asks for --swarm; the chosen swarm's instances
    carry their processes' status from the daemon, not `stopped` from the files."""
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        await start_daemon(REPO / "tests" / "fixtures" / "agents", swarm="agents")
        assert (await daemon.send("hi", "alpha")).ok
        code, _, err = await run_cli("studio", "--listen", "127.0.0.1:0")
        assert code == 2, err
        assert "E_CONTROL_BAD_REQUEST" in err and "agents, probe" in err and "--swarm" in err
        async with studio("--swarm", "probe") as s, s.client() as http:
            rows = (await http.get("/api/instances")).json()["instances"]
    alpha = next(r for r in rows if r["agent"] == "alpha")
    assert alpha["status"] == "idle", rows
