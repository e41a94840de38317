"""`goondan send [--agent A] [--instance K] [--json] [--no-wait] [--no-stream]
[--idempotency-key K] TEXT` and `goondan send --attach ID`.

Sends one input to an agent of the running daemon (default: the Swarm's entry agent and
instanceKey) and prints the reply text, or with `--json` the response event. The daemon has
journaled the input before it answers (with `--no-wait`, the event id it prints is a promise:
the input is processed, even across a crash). A failed turn or a crashed agent prints its coded
error on stderr and exits 1. `--attach ID` prints the reply of an input sent before (waiting
while it runs), e.g. after a wait that timed out or a daemon that was restarted.

Streaming (ARCHITECTURE.md §4): on a terminal the reply is printed as the model writes it, and
tool calls are reported on stderr as they start and end; with `--json`, every delta is a JSON
line (`text.delta`, `tool.started`, `tool.finished`) before the response event's line.
`--no-stream` waits for the whole reply; a stdout that is not a terminal gets the reply only.

A script may send many times a second, so send starts without msgspec and pyzmq (~45 ms of a
~75 ms send): it finds the daemon with `orchestrator.control.locate` and talks to it through
`orchestrator.control.thin_call`, its request and reply plain dicts in the control Structs'
wire shape (protocol.control's SendText, Attach and ControlReply; a test decodes each request
built here with msgspec into its Struct).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from orchestrator.control import locate, thin_call
from orchestrator.control.locate import ClientError, Printer, Problem
from orchestrator.control.zmtp import ZmtpError
from orchestrator.exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.error_codes import ErrorCode
from protocol.stream_view import DeltaKind, GapWatch, PlainDelta, delta_line

if TYPE_CHECKING:
    from protocol.stream_view import Delta


class JsonLines:
    """`--json`: one line per delta, as it arrives."""

    def delta(self, delta: Delta) -> None:
        sys.stdout.write(json.dumps(delta_line(delta), ensure_ascii=False) + "\n")
        sys.stdout.flush()


class Terminal:
    """Text on stdout as it arrives, tool calls on stderr; at the end, whatever the deltas
    did not show of the reply (a slow terminal may have had some dropped)."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.step: int | None = None
        self.shown: list[str] = []
        """The text printed of the latest step that had text."""
        self.mid_line = False
        self.gaps = GapWatch()
        """After a delta lost on the way, text waits for the reply (`reply` prints the rest)."""

    def delta(self, delta: Delta) -> None:
        if not self.gaps.passes(delta):
            return
        if delta.kind is DeltaKind.TEXT:
            if delta.step != self.step:
                self.end_line(blank=self.step is not None)  # a new step: a new paragraph
                self.step, self.shown = delta.step, []
            self.out.write(delta.text)
            self.out.flush()
            self.shown.append(delta.text)
            self.mid_line = not delta.text.endswith("\n")
            return
        self.end_line()
        if delta.kind is DeltaKind.TOOL_STARTED:
            self.err.write(f"goondan: running {delta.tool}\n")
        else:
            self.err.write(f"goondan: {delta.tool} {delta.status}\n")
        self.err.flush()

    def reply(self, text: str) -> None:
        shown = "".join(self.shown)
        if not shown:
            self.end_line()
            self.out.write(text + "\n")
        elif text.startswith(shown):
            self.out.write(text[len(shown) :] + "\n")
        else:
            self.out.write("\n" + text + "\n")
        self.out.flush()

    def end_line(self, *, blank: bool = False) -> None:
        """Finish the line the text left open (and leave a blank one)."""
        if self.mid_line:
            self.out.write("\n")
            self.mid_line = False
        if blank:
            self.out.write("\n")
        self.out.flush()


class _Send:
    name = "send"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "text", nargs="*", metavar="TEXT",
            help="what to send; `-` (or nothing, when stdin is not a terminal) reads it from "
            "stdin, up to 1 MiB",
        )  # fmt: skip
        parser.add_argument("--agent", metavar="A", help="target agent (default: entry agent)")
        parser.add_argument("--instance", metavar="K", help="instanceKey (default: the swarm's)")
        parser.add_argument(
            "--json", action="store_true",
            help="one JSON line per delta (text.delta, tool.started, tool.finished), then the "
            "response event",
        )  # fmt: skip
        parser.add_argument("--no-wait", action="store_true", help="do not wait for a reply")
        parser.add_argument(
            "--no-stream", action="store_true",
            help="wait for the whole reply (a terminal otherwise shows it as it is written)",
        )  # fmt: skip
        parser.add_argument("--timeout", type=float, default=120.0, metavar="S")
        parser.add_argument(
            "--idempotency-key", metavar="K",
            help="a retry with the same key (within 24 h) is the same input: same id and reply",
        )  # fmt: skip
        parser.add_argument(
            "--attach", metavar="ID", help="print the reply of the input with event id ID"
        )

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        text = "" if args.attach else _text(args.text, sys.stdin)
        problem = _problem(args, text)
        if problem is not None:
            printer.error(Problem(ErrorCode.E_CONTROL_BAD_REQUEST, problem))
            return EXIT_USAGE
        output = _output(args)
        accepted: list[str] = [args.attach] if args.attach else []
        on_delta = output.delta if output is not None else None
        try:
            reply = _call(args, _request(args, text, stream=on_delta is not None), on_delta,
                          accepted.append)  # fmt: skip
        except ClientError as exc:
            printer.error(exc.error)
            return EXIT_RUNTIME
        except KeyboardInterrupt:
            if isinstance(output, Terminal):
                output.end_line()
            sys.stderr.write(_interrupted(args, accepted[0] if accepted else None) + "\n")
            return EXIT_INTERRUPTED
        return _print(args, reply, output, printer)


def _request(args: argparse.Namespace, text: str, *, stream: bool) -> dict[str, Any]:
    """protocol.control's SendText (or Attach) as msgspec encodes it."""
    timeout_ms = int(args.timeout * 1000)
    if args.attach:
        return {"type": "attach", "requestId": locate.new_request_id(), "eventId": args.attach,
                "timeoutMs": timeout_ms}  # fmt: skip
    return {
        "type": "send", "requestId": locate.new_request_id(), "text": text, "agent": args.agent,
        "instanceKey": args.instance, "wait": not args.no_wait, "timeoutMs": timeout_ms,
        "idempotencyKey": args.idempotency_key, "stream": stream, "announce": not args.no_wait,
    }  # fmt: skip


def _call(
    args: argparse.Namespace,
    request: dict[str, Any],
    on_delta: Callable[[Delta], None] | None,
    on_accepted: Callable[[str], None],
) -> dict[str, Any]:
    """The daemon's final reply to `request` (ClientError when there is none)."""
    info = locate.find_daemon(args)
    endpoint = locate.control_endpoint(info)
    timeout = args.timeout + 5

    def delta(data: dict[str, Any]) -> None:  # a send that asked for none gets none
        try:
            shown = PlainDelta.from_wire(data)
        except ValueError as exc:
            raise ClientError(ErrorCode.E_PROTOCOL_DECODE, f"malformed delta: {exc}") from None
        if on_delta is not None:
            on_delta(shown)

    try:
        return thin_call.call(endpoint, locate.read_token(endpoint), request, timeout, delta,
                              on_accepted)  # fmt: skip
    except ZmtpError as exc:
        raise locate.call_failed(exc, info, timeout) from None


MAX_STDIN = 1 << 20
"""Bytes of an input read from stdin (a control frame holds 4 MiB)."""


def _text(words: list[str], stdin: TextIO) -> str:
    """TEXT, or stdin for `-` or no TEXT with stdin not a terminal (`echo hi | goondan send`),
    less its final line end."""
    if words == ["-"] or (not words and not stdin.isatty()):
        # the last line's end is the file's, not the message's (`echo hi |`), as `$(...)` drops it
        text = stdin.buffer.read(MAX_STDIN + 1).decode(errors="replace")
        return text.removesuffix("\n").removesuffix("\r")
    return " ".join(words)


def _problem(args: argparse.Namespace, text: str) -> str | None:
    if args.attach:
        return "give TEXT to send, or --attach ID, not both" if args.text else None
    if len(text.encode()) > MAX_STDIN:
        return f"the input is over {MAX_STDIN // 1024} KiB; send a shorter text"
    if not text.strip():
        return "nothing to send: give TEXT (or pipe it in) that is not empty, or --attach ID"
    return None


def _interrupted(args: argparse.Namespace, event_id: str | None) -> str:
    """Ctrl-C on a waiting send: only this client stops waiting (the input is journaled and
    its turn runs on), so the one line says how to get the reply later."""
    if event_id is None:
        return ("goondan send: interrupted before the daemon confirmed the input; if it took "
                "it, its turn goes on (goondan status, goondan instance show)")  # fmt: skip
    import shlex  # only after a Ctrl-C: every send would pay for its import

    where = "".join(f" --{flag.replace('_', '-')} {shlex.quote(value)}"
                    for flag in ("state_root", "swarm")
                    if (value := getattr(args, flag, None)))  # fmt: skip
    return (
        f"goondan send: interrupted; the turn goes on: goondan send --attach {event_id}"
        f"{where} prints its reply"
    )


def _output(args: argparse.Namespace) -> JsonLines | Terminal | None:
    """How the deltas are shown; None: the send does not ask for them."""
    if args.no_stream or args.no_wait or args.attach:
        return None
    if args.json:
        return JsonLines()
    return Terminal(sys.stdout, sys.stderr) if sys.stdout.isatty() else None


def _shown(result: Any) -> Any:
    """The response event as `--json` prints it: its text under `reply` first (on the wire an
    event's text is its `input`, whichever way it goes; `input` stays for scripts that read
    it)."""
    if isinstance(result, dict) and result.get("type") == "agent.response":
        return {"reply": result.get("input", ""), **result}
    return result


def _print(
    args: argparse.Namespace,
    reply: dict[str, Any],
    output: JsonLines | Terminal | None,
    printer: Printer,
) -> int:
    result: Any = reply.get("result")
    if args.json and result is not None:
        print(json.dumps(_shown(result), ensure_ascii=False))
    if not reply["ok"]:
        if isinstance(output, Terminal):
            output.end_line()
        printer.error(_error_of(reply))
        return EXIT_RUNTIME
    if not args.json:
        if isinstance(result, dict) and result.get("finished"):
            print(f"event {result['eventId']} finished (it had no reply)")
        elif isinstance(output, Terminal):
            output.reply(result.get("input", "") if isinstance(result, dict) else str(result))
        else:
            print(result.get("input", "") if isinstance(result, dict) else result)
    return EXIT_OK


def _error_of(reply: dict[str, Any]) -> Problem:
    """A refusal's coded error (ControlReply.error: code, message, suggestion)."""
    error = reply.get("error")
    if not isinstance(error, dict):
        return Problem(ErrorCode.E_CONTROL_BAD_REQUEST, "failed")
    suggestion = error.get("suggestion")
    return Problem(str(error.get("code", ErrorCode.E_CONTROL_BAD_REQUEST)),
                   str(error.get("message", "failed")),
                   suggestion if isinstance(suggestion, str) else None)  # fmt: skip


COMMAND = _Send()
