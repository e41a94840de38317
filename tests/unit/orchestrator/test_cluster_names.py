"""Cluster naming, partitions and rendezvous ownership (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.names import SwarmNames, owner_of, partition_of, plan, token, untoken
from orchestrator.cluster.options import PASSWORD_ENV, ClusterConfigError, options, redact_url
from orchestrator.cluster.permissions import authorization
from orchestrator.commands.cluster import nats_config
from protocol.ids import agent_address

VALID = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@given(st.text(max_size=60))
def test_token_round_trips_and_is_a_valid_nats_name(name: str) -> None:
    encoded = token(name)
    assert encoded and set(encoded) <= VALID
    assert untoken(encoded) == name


def test_tokens_of_distinct_names_differ() -> None:
    names = ["a.b", "a_2Eb", "a b", "a*b", "a>b", "", "_", "é"]
    assert len({token(n) for n in names}) == len(names)


def test_partition_is_stable_and_in_range() -> None:
    assert partition_of("worker", "user-1", 64) == partition_of("worker", "user-1", 64)
    spread = {partition_of("worker", f"u{i}", 16) for i in range(400)}
    assert spread == set(range(16))


def test_rendezvous_moves_about_one_in_n_when_a_node_joins() -> None:
    before = plan(256, ["n1", "n2", "n3"])
    after = plan(256, ["n1", "n2", "n3", "n4"])
    moved = [p for p in range(256) if before[p] != after[p]]
    assert all(after[p] == "n4" for p in moved)  # only to the new node, never between old ones
    assert 40 <= len(moved) <= 90  # about a quarter
    assert owner_of(3, []) is None


def test_ingress_subject_names_its_instance() -> None:
    names = SwarmNames("my swarm")
    target = agent_address("worker", "user.1 > x")
    subject = names.ingress_subject(7, target)
    assert subject.startswith(names.prefix + ".in.7.")
    assert names.target_of_ingress(subject) == target
    with pytest.raises(ValueError, match="not an ingress subject"):
        names.target_of_ingress(names.prefix + ".h.x.y")


@pytest.mark.parametrize(
    ("cluster", "node", "fix"),
    [
        ("", "n1", "nats://HOST:PORT"),
        ("http://h:4222", "n1", "nats://HOST:PORT"),
        ("nats://h", "n1", "add :4222"),
        ("nats://h:4222", None, "--node"),
        ("nats://h:4222", "bad name!", "letters"),
        ("nats://h:4222", "n1", "creds"),
    ],
)
def test_bad_options_say_what_to_change(cluster: str, node: str | None, fix: str) -> None:
    creds = "/nonexistent/x.creds" if fix == "creds" else None
    with pytest.raises(ClusterConfigError) as caught:
        options(cluster, node, creds, ClusterPolicy())
    assert caught.value.code == "E_CLUSTER_CONFIG"
    assert fix in str(caught.value)


def test_passwords_never_reach_the_redacted_urls() -> None:
    opts = options("nats://u:secret@h1:4222, tls://h2:4223", "n1", None, ClusterPolicy())
    assert opts.servers == ("nats://u:secret@h1:4222", "tls://h2:4223")
    assert opts.tls
    assert "secret" not in " ".join(opts.redacted())
    assert redact_url("nats://h:1") == "nats://h:1"
    with pytest.raises(ClusterConfigError) as caught:
        options("nats://u:secret@h1", "n1", None, ClusterPolicy())
    assert "secret" not in str(caught.value)


def test_a_node_without_nats_credentials_is_refused_unless_insecure(tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError) as caught:
        options("nats://h:4222,tls://h2:4223", "n1", None, ClusterPolicy())
    assert caught.value.code == "E_CLUSTER_INSECURE"
    assert "--insecure-nats" in caught.value.suggestion
    assert "--nats-creds" in caught.value.suggestion
    assert not options("nats://h:4222", "n1", None, ClusterPolicy(), insecure=True).has_credentials
    # a user (and password, %-escaped in the URL), a token, or a creds file
    assert options("nats://n1:p%40ss@h:4222", "n1", None, ClusterPolicy()).login == ("n1", "p@ss")
    assert options("nats://tok@h:4222", "n1", None, ClusterPolicy()).login == ("tok", None)
    creds = tmp_path / "n1.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\n")
    assert options("nats://h:4222", "n1", str(creds), ClusterPolicy()).has_credentials


def test_a_node_request_subject_names_its_sender() -> None:
    names = SwarmNames("s")
    subject = names.node_subject("to.x", "answer", "n_2")
    assert subject == f"{names.prefix}.node.to_2Ex.answer.n_5F2"
    assert names.sender_of(subject) == "n_2"
    for forged in (f"{names.prefix}.node.n1.answer.bad_zz", f"{names.prefix}.node.n1.answer._2E"):
        with pytest.raises(ValueError):
            names.sender_of(forged)


def test_nats_user_takes_its_password_from_the_environment_only_with_both() -> None:
    opts = options("nats://h:4222", "n1", None, ClusterPolicy(), user="n1", password="pw")
    assert opts.login == ("n1", "pw") and "pw" not in repr(opts)
    for user, password in (("n1", None), (None, "pw")):
        with pytest.raises(ClusterConfigError) as caught:
            options("nats://h:4222", "n1", None, ClusterPolicy(), user=user, password=password)
        assert caught.value.code == "E_CLUSTER_CONFIG"
        assert PASSWORD_ENV in str(caught.value) and "pw" not in str(caught.value)


def test_the_nats_config_names_each_node_in_its_nats_token() -> None:
    users = authorization({"n_1": "secret"}, ("ops", "root-pw"))
    assert '"$KV.*.n_5F1"' in users and '"goondan.*.node.*.*.n_5F1"' in users
    assert '"_INBOX.n_5F1.>"' in users and '"$KV.*.n_1"' not in users
    assert '{user: "ops", password: "root-pw"}' in users


def test_nats_config_refuses_names_a_node_cannot_have(capsys: pytest.CaptureFixture[str]) -> None:
    for users, admin in ((["n1", "bad name"], None), (["n1", "n1"], None), (["n1"], "n1")):
        assert nats_config(users, admin, None) == 2
        assert "E_CLUSTER_CONFIG" in capsys.readouterr().err
    assert nats_config(["n1"], None, None) == 0
    printed = capsys.readouterr()
    assert '{user: "n1"' in printed.out and f"# n1: {PASSWORD_ENV}=" in printed.err
