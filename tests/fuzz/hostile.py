"""Hypothesis strategies for hostile tool arguments, shaped by each export's JSON schema.

Values are path traversal strings (relative, absolute, through a planted symlink, encoded),
huge strings, NULs, lone surrogates and other unicode, and values of the wrong JSON type. Half
the examples keep the schema's keys (so many get past validation into the handler), half are
random objects. bash commands come from a pool that cannot write (no redirection or other
shell metacharacters): bash is a shell by design, what is fuzzed is how its arguments are
checked, not whether `echo > /x` works.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

TRAVERSAL = [
    "../outside/secret.txt", "../outside/pwn.txt", "../../../../../../etc/passwd", "/etc/passwd",
    "/tmp/pwn.txt", "..", "../", "./../outside", "a/../../outside/x", "link/pwn.txt",
    "link/secret.txt", "link", "abslink/pwn.txt", "~/.bashrc", "%2e%2e/outside/x",
    "..\\outside\\x", "outside\x00.txt", "x\x00/../../outside", "\x00", "", ".", "/",
    "file:///etc/passwd", "\\\\server\\share", "CON", "a" * 300, "a/" * 2000,
]  # fmt: skip
HUGE = ["A" * 200_000, "../" * 20_000, "\u00e9\u6f22\U0001f600" * 30_000, "\x00" * 10_000]
ODD = ["\ud800", "\udfff x", "\u202e.txt", "\ufeff", "a\nb\r\n", "$(id)", "`id`", "'\"", "%s%n"]
URLS = [
    "http://127.0.0.1:1/", "http://localhost/", "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:80/", "http://0.0.0.0/", "http://10.0.0.1/", "http://2130706433/",
    "file:///etc/passwd", "gopher://127.0.0.1/", "ftp://x/", "http://", "https://:0/", "http:/x",
    "http://a b/", "http://\x00/", "//127.0.0.1/", "http://user:pw@127.0.0.1/",
]  # fmt: skip
COMMANDS = ["true", "pwd", "ls -la", "cat ../outside/secret.txt", "false", "echo \u6f22"]
SAFE_SHELL = st.text(
    alphabet=st.characters(blacklist_characters="<>|&;$`(){}*?~!\\/\n\r'\"", codec="utf-8"),
    max_size=40,
)

json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)  # fmt: skip
hostile_text = st.one_of(
    st.sampled_from(TRAVERSAL), st.sampled_from(HUGE), st.sampled_from(ODD), st.text(max_size=60)
)
hostile_value: st.SearchStrategy[Any] = st.one_of(
    hostile_text,
    json_scalar,
    st.lists(st.one_of(hostile_text, json_scalar), max_size=4),
    st.dictionaries(st.text(max_size=8), st.one_of(hostile_text, json_scalar), max_size=4),
)


def _value_for(tool: str, key: str) -> st.SearchStrategy[Any]:
    if tool == "bash" and key in {"command", "path", "shell"}:
        return st.one_of(st.sampled_from(COMMANDS), SAFE_SHELL, json_scalar, st.sampled_from(ODD))
    if tool == "bash" and key == "args":
        return st.lists(SAFE_SHELL, max_size=3)
    if key == "url":
        return st.one_of(st.sampled_from(URLS), hostile_value)
    if tool == "http-fetch" and key == "timeoutMs":
        return st.one_of(st.integers(1, 300), hostile_value)  # never wait 30 s on a dead host
    return hostile_value


def args_for(tool: str, schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = list(schema.get("properties", {}))
    required = [k for k in schema.get("required", []) if k in props]
    shaped = st.fixed_dictionaries(
        {k: _value_for(tool, k) for k in required},
        optional={k: _value_for(tool, k) for k in props if k not in required},
    )
    keys = st.one_of(st.sampled_from(props or ["x"]), st.text(max_size=10))
    loose = st.dictionaries(keys, hostile_value, max_size=5)
    if tool in {"bash", "http-fetch"}:
        return shaped  # loose keys could be a command or URL no longer drawn from the safe pools
    return st.one_of(shaped, loose)
