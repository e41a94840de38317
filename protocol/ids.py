"""Process identities `<kind>:<name>:<instanceKey>:<generation>` and addresses without generation.

The instanceKey may itself contain `:` (e.g. `telegram:12345`): the kind and name are the first
two fields and the generation the last, so parsing is unambiguous because resource names
never contain `:`.
"""

from __future__ import annotations

import re
from enum import StrEnum

import msgspec

from protocol.errors import ProtocolError

ORCHESTRATOR = "orchestrator"
"""The address of the orchestrator itself in `from`/`to`."""

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# ZeroMQ routing ids are at most 255 bytes; leave room for kind, name and generation.
MAX_INSTANCE_KEY_BYTES = 128
_INSTANCE_KEY_RE = re.compile(r"^[^\x00-\x1f\x7f]+$")


class ProcessKind(StrEnum):
    AGENT = "agent"
    CONNECTOR = "connector"


def check_instance_key(instance_key: str) -> str:
    """Return the key if it can travel as a routing id, else raise ProtocolError saying why."""
    if not instance_key:
        raise ProtocolError("instanceKey must not be empty")
    if len(instance_key.encode()) > MAX_INSTANCE_KEY_BYTES:
        raise ProtocolError(
            f"instanceKey is {len(instance_key.encode())} bytes; the limit is "
            f"{MAX_INSTANCE_KEY_BYTES}: use a shorter key"
        )
    if not _INSTANCE_KEY_RE.match(instance_key):
        raise ProtocolError("instanceKey must not contain control characters")
    return instance_key


class Address(msgspec.Struct, frozen=True, kw_only=True):
    """Who a message is for, independent of which generation currently serves it."""

    kind: ProcessKind
    name: str
    instance_key: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}:{self.instance_key}"

    def with_generation(self, generation: int) -> ProcessId:
        return ProcessId(
            kind=self.kind, name=self.name, instance_key=self.instance_key, generation=generation
        )


class ProcessId(msgspec.Struct, frozen=True, kw_only=True):
    """The routing identity of one child process: one generation of one address."""

    kind: ProcessKind
    name: str
    instance_key: str
    generation: int

    @property
    def address(self) -> Address:
        return Address(kind=self.kind, name=self.name, instance_key=self.instance_key)

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}:{self.instance_key}:{self.generation}"

    def encode(self) -> bytes:
        return str(self).encode()


NONCE_SEPARATOR = "#"
NONCE_HEX = 32


def routing_id(process: ProcessId, nonce: str) -> bytes:
    """The ZeroMQ routing identity of one spawned process: its id and the spawn's nonce (a
    secret the child gets privately), so no other process can connect as it."""
    return f"{process}{NONCE_SEPARATOR}{nonce}".encode() if nonce else process.encode()


def parse_routing_id(ident: bytes) -> ProcessId:
    """The process id of a routing identity (its nonce, if any, is left out: the router
    compares the whole identity with the one it spawned); raise ProtocolError."""
    text = ident.decode(errors="replace")
    head, sep, tail = text.rpartition(NONCE_SEPARATOR)
    if sep and len(tail) == NONCE_HEX and all(c in "0123456789abcdef" for c in tail):
        text = head
    return parse_process_id(text)


def _split(text: str, with_generation: bool) -> tuple[ProcessKind, str, str, int]:
    head = text.split(":", 2)
    if len(head) != 3:
        raise ProtocolError(f"not a process address: {text!r} (want <kind>:<name>:<instanceKey>)")
    kind_text, name, rest = head
    try:
        kind = ProcessKind(kind_text)
    except ValueError:
        raise ProtocolError(f"unknown process kind {kind_text!r} in {text!r}") from None
    if not _NAME_RE.match(name):
        raise ProtocolError(f"invalid name {name!r} in {text!r}")
    generation = 0
    if with_generation:
        key, sep, gen_text = rest.rpartition(":")
        if not sep or not gen_text.isdigit():
            raise ProtocolError(f"process id {text!r} has no generation number at its end")
        rest, generation = key, int(gen_text)
    check_instance_key(rest)
    return kind, name, rest, generation


def parse_process_id(text: str | bytes) -> ProcessId:
    """Parse `<kind>:<name>:<instanceKey>:<generation>`; raise ProtocolError on anything else."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise ProtocolError("process id is not UTF-8") from None
    kind, name, key, generation = _split(text, with_generation=True)
    return ProcessId(kind=kind, name=name, instance_key=key, generation=generation)


CONTROL = "control"
"""The `replyTo.target` of an event a control client (`goondan send`) waits for."""


def parse_address(text: str) -> Address:
    """Parse `<kind>:<name>:<instanceKey>`; raise ProtocolError on anything else."""
    kind, name, key, _ = _split(text, with_generation=False)
    return Address(kind=kind, name=name, instance_key=key)


def agent_address(name: str, instance_key: str) -> Address:
    return Address(kind=ProcessKind.AGENT, name=name, instance_key=instance_key)
