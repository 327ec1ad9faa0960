"""What a broker learns of the leaders of partitions it does not lead, from its peers'
standing answers: the newest epoch wins, and nothing it gave goes back."""

from __future__ import annotations

import json

from raftka.broker.cluster.leaders import LeadReport, leadership_view, parse_answer


def everything_exists(name: str) -> bool:
    return True


def test_the_report_with_the_newest_epoch_wins_whatever_the_order_of_the_answers() -> None:
    stale = {"t-0": LeadReport(1, 4, (1, 2))}
    newer = {"t-0": LeadReport(2, 5, (2, 3))}
    for answers in ([stale, newer], [newer, stale]):
        hints, isr = leadership_view(answers, {}, everything_exists)
        assert hints == {"t-0": (2, 5)}
        assert isr == {"t-0": (2, 3)}


def test_a_leader_that_stopped_leading_leaves_its_epoch_with_leader_minus_one() -> None:
    """Its broker answered without the partition: no leader is known, but the epoch stays,
    so a client holding a newer leader from another broker keeps it."""
    hints, isr = leadership_view([{}], {"t-0": (1, 4)}, everything_exists)
    assert hints == {"t-0": (-1, 4)}
    assert isr == {}


def test_a_deleted_partition_is_forgotten() -> None:
    hints, _ = leadership_view([{}], {"gone-0": (1, 4)}, lambda name: name != "gone-0")
    assert hints == {}


def test_an_older_peers_answer_without_in_sync_replicas_is_read() -> None:
    current = json.dumps({"t-0": [2, 7, [2, 3]]}).encode()
    older = json.dumps({"t-1": [2, 3]}).encode()
    assert parse_answer(current) == {"t-0": LeadReport(2, 7, (2, 3))}
    assert parse_answer(older) == {"t-1": LeadReport(2, 3, None)}
    hints, isr = leadership_view([parse_answer(older)], {}, everything_exists)
    assert hints == {"t-1": (2, 3)} and isr == {}
