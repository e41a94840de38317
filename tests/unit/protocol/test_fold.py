"""`fold` is `apply_event` of each event in turn, in linear time (protocol/conversation.py).

The events are drawn over a few ids so that appends of an id already there, replaces and removes
of missing ids, replaces that change an id (to a fresh one or to another's, which makes
duplicates), removes of duplicated ids and truncates all happen, from starting lists that may
hold duplicates themselves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.conversation import (
    AppendEvent,
    Message,
    MessageEvent,
    RemoveEvent,
    ReplaceEvent,
    Role,
    TruncateEvent,
    apply_event,
    fold,
)

IDS = st.sampled_from(["a", "b", "c", "d"])
messages = st.builds(
    lambda mid, content: Message(id=mid, role=Role.USER, content=content),
    IDS, st.text(alphabet="xyz", max_size=2),
)  # fmt: skip
replaces = st.builds(ReplaceEvent, message_id=IDS, message=messages)
events: st.SearchStrategy[MessageEvent] = st.one_of(
    st.builds(AppendEvent, message=messages),
    replaces,
    replaces,  # twice as often: an id changed, then that id or the old one used, is the rare case
    st.builds(RemoveEvent, message_id=IDS),
    st.builds(TruncateEvent),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(messages, max_size=6), st.lists(events, max_size=40))
def test_fold_is_apply_event_in_turn(start: list[Message], changes: list[MessageEvent]) -> None:
    one_by_one = list(start)
    for event in changes:
        apply_event(one_by_one, event)
    folded = list(start)
    fold(folded, changes)
    assert folded == one_by_one
