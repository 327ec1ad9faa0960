"""A consumer group's subscriptions and target assignment (KIP-848): the topics its members
subscribe to (by name or by regular expression), their ids and partition counts as of the
group epoch, and the target the server-side assignor computes from them.

Pure functions of the group's state and the `TopicImage` they are given: no clock, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Protocol

import re2

from raftka.broker.groups.assignors import Assignor, MemberSubscription
from raftka.broker.groups.consumer_state import (
    ConsumerConfig,
    ConsumerMember,
    ConsumerProtocolGroup,
)

# How often regular-expression subscriptions are matched against the topics again.
REGEX_REFRESH_MS = 10_000


class TopicImage(Protocol):
    """The cluster's topics as the coordinator sees them."""

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of an existing topic; None if there is none."""

    def names(self) -> Iterable[str]:
        """Every topic's name (for regex subscriptions)."""

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id; None if there is none."""


class Regex(Protocol):
    """What the coordinator uses of a compiled RE2 expression."""

    def fullmatch(self, text: str) -> object: ...


def compile_regex(pattern: str) -> Regex:
    """A subscription's regular expression compiled with RE2 (Kafka's syntax, matching in
    time linear in the name); raises `re2.error` if it is invalid."""
    options = re2.Options()
    options.log_errors = False  # the heartbeat answers INVALID_REGULAR_EXPRESSION instead
    compiled: Regex = re2.compile(pattern, options)
    return compiled


def subscribed_names(state: ConsumerProtocolGroup, member: ConsumerMember) -> set[str]:
    """The topic names one member subscribes to: its names and its regex's last matches."""
    names = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex is not None:
        names |= state.regex_matches.get(member.subscribed_topic_regex, frozenset())
    return names


def group_topic_names(topics: TopicImage, state: ConsumerProtocolGroup, now_ms: float) -> set[str]:
    """The topic names the members subscribe to, cached until the membership or a
    subscription changes; regular expressions are matched again at most every
    `REGEX_REFRESH_MS`, so a heartbeat costs one lookup per subscribed topic."""
    if state.subscribed_names is None:
        state.subscribed_regexes = frozenset(
            m.subscribed_topic_regex
            for m in state.members.values()
            if m.subscribed_topic_regex is not None
        )
    regexes = state.subscribed_regexes
    stale = regexes and now_ms - state.regex_resolved_ms >= REGEX_REFRESH_MS
    if state.subscribed_names is None or stale:
        # Kafka matches with RE2/J against the whole name; RE2 is the same syntax and
        # matches in linear time, whatever the client sends. Internal topics are never
        # matched.
        candidates = [n for n in topics.names() if not n.startswith("__")] if regexes else []
        state.regex_matches = {}
        for regex in regexes:
            compiled = compile_regex(regex)
            state.regex_matches[regex] = frozenset(n for n in candidates if compiled.fullmatch(n))
        state.regex_resolved_ms = now_ms
        names: set[str] = set()
        for member in state.members.values():
            names |= subscribed_names(state, member)
        state.subscribed_names = names
    return state.subscribed_names


def subscription_metadata(
    topics: TopicImage, state: ConsumerProtocolGroup, now_ms: float
) -> dict[str, tuple[uuid.UUID, int]]:
    """Topic name -> (id, partition count) of every existing topic the group subscribes to."""
    metadata: dict[str, tuple[uuid.UUID, int]] = {}
    for name in group_topic_names(topics, state, now_ms):
        found = topics.lookup(name)
        if found is not None:
            metadata[name] = found
    return metadata


def choose_assignor(config: ConsumerConfig, state: ConsumerProtocolGroup) -> Assignor:
    # Kafka picks the assignor most members ask for, else the first configured one.
    asked: dict[str, int] = {}
    for member in state.members.values():
        if member.server_assignor is not None:
            asked[member.server_assignor] = asked.get(member.server_assignor, 0) + 1
    name = max(sorted(asked), key=lambda n: asked[n]) if asked else config.default_assignor()
    return config.assignors[name]


def compute_target(config: ConsumerConfig, state: ConsumerProtocolGroup) -> None:
    """The group's target assignment as of its group epoch, into `state.target` (and the
    assignment epoch catches up with the group epoch)."""
    assignor = choose_assignor(config, state)
    partitions = {topic_id: count for topic_id, count in state.subscription_metadata.values()}
    subscriptions = {}
    for member_id, member in state.members.items():
        ids = frozenset(
            state.subscription_metadata[name][0]
            for name in subscribed_names(state, member)
            if name in state.subscription_metadata
        )
        previous = {t: frozenset(p) for t, p in state.target.get(member_id, {}).items()}
        subscriptions[member_id] = MemberSubscription(ids, previous)
    state.target = assignor.assign(subscriptions, partitions)
    state.assignment_epoch = state.group_epoch
    state.assignor_name = assignor.name
