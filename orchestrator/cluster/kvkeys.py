"""The keys a JetStream KV bucket holds (and the subjects a stream holds), from one
server-side snapshot.

nats-py's `KeyValue.keys()` reads a watcher and stops at the first message the server marks as
the last one pending. While the bucket is being written (leases renew every third of their TTL)
that mark comes early: against a 3-server cluster with one writer it returned a short list in
about half of 500 calls, and now and then no key at all. Every reader of the `nodes`, `leases`
and `calls` buckets (the ownership plan, `cluster status`, the restore of a dead node's deferred
calls) needs all of them, so they read the bucket's stream info with a subjects filter instead:
the server counts every subject that has a message, in pages it numbers itself.

A key whose last message is a delete or purge marker is listed too; its `get` raises
`KeyNotFoundError`, which every caller already skips (a key can also vanish between the two).
"""

from __future__ import annotations

import msgspec
import nats.js.errors
from nats.aio.client import Client

JS_API = "$JS.API"


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _State(msgspec.Struct):
    subjects: dict[str, int] | None = None


class _StreamInfoPage(msgspec.Struct):
    state: _State | None = None
    total: int = 0
    error: _ApiError | None = None


async def bucket_keys(nc: Client, bucket: str, api_timeout: float, prefix: str = "") -> list[str]:
    """Every key of `bucket` that starts with `prefix` (empty, or whole tokens ending in a dot)
    and has a message, sorted; [] when there is none. The filter runs on the server, which
    nats-server 2.9 does for stream info (it ignores a consumer's key filter).

    Raises `nats.js.errors.NotFoundError` when the bucket does not exist, another
    `nats.js.errors.APIError` for any other refusal, `nats.errors.TimeoutError` as a request does.
    """
    subject_prefix = f"$KV.{bucket}."
    subjects = await stream_subjects(nc, f"KV_{bucket}", f"{subject_prefix}{prefix}>", api_timeout)
    return [subject[len(subject_prefix) :] for subject in subjects]


async def stream_subjects(
    nc: Client, stream: str, subjects_filter: str, api_timeout: float
) -> list[str]:
    """Every subject of `stream` matching `subjects_filter` that has a message, sorted."""
    subjects: list[str] = []
    while True:
        query = {"subjects_filter": subjects_filter, "offset": len(subjects)}
        body = msgspec.json.encode(query)
        reply = await nc.request(f"{JS_API}.STREAM.INFO.{stream}", body, timeout=api_timeout)
        page = msgspec.json.decode(reply.data, type=_StreamInfoPage)
        if page.error is not None:
            error = page.error
            if error.code == 404:
                raise nats.js.errors.NotFoundError(
                    code=error.code, err_code=error.err_code, description=error.description
                )
            raise nats.js.errors.APIError(
                code=error.code, err_code=error.err_code, description=error.description
            )
        found = (page.state.subjects if page.state is not None else None) or {}
        subjects.extend(found)
        if not found or len(subjects) >= page.total:
            return sorted(subjects)
