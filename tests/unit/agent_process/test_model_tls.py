"""Model clients share one TLS trust store, built once (in the fork server, by `warm`).

Each SDK client used to build its own SSLContext and load the CA bundle: ~10 MiB of private
memory in every agent process. Counting `load_verify_locations` shows how many stores are
built, whatever the trust source (SSL_CERT_FILE, SSL_CERT_DIR or the system bundle).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from agent_process.models import ModelError, create_model, tls, warm
from tests.unit.agent_process import builders as b


def model(provider: str, name: str = "m") -> Any:
    return b.resource(
        "Model",
        name,
        {
            "provider": provider,
            "model": f"{provider}-test",
            "endpoint": "http://127.0.0.1:9/v1",
            "apiKey": {"value": "sk-test"},
        },
    )


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    calls: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        calls.append(args)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    tls.tls_context.cache_clear()
    yield calls
    tls.tls_context.cache_clear()


def test_warm_builds_the_trust_store_once_and_clients_reuse_it(loads: list[object]) -> None:
    warm([model("openai"), model("anthropic", "a")])
    built = len(loads)
    assert built == 1
    clients = [
        create_model(model(provider), api_key="sk-test")
        for provider in ("openai", "openai", "anthropic")
    ]
    assert len(clients) == 3
    assert len(loads) == built  # no client loaded the CA bundle again


def test_warm_skips_a_bad_model_the_child_reports_it() -> None:
    bad = b.resource(
        "Model",
        "bad",
        {
            "provider": "scripted",
            "model": "s",
            "options": {"script": [{"match": "(", "reply": "x"}]},
        },
    )
    warm([bad])  # no exception: the agent that uses it fails its start with E_MODEL_SCRIPT
    with pytest.raises(ModelError, match="valid regex"):
        create_model(bad, api_key=None)
