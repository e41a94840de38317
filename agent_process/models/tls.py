"""One TLS trust store per process tree, shared by every model client.

An SDK client left to itself builds a fresh `ssl.SSLContext` and loads the whole CA bundle
into OpenSSL: megabytes of private memory in every agent process (an idle `openai` agent used
far more USS than a scripted one). The fork server builds the context
once (`warm`), so forked children reuse its certificate store copy-on-write; a cold child
builds it on first use, once.
"""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The trust the SDKs use by default: their transport's (httpx2) default context."""
    return httpx2.create_ssl_context()
