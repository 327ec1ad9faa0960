"""What the tests of the hand-written codecs (Produce, Fetch) share: unknown tagged fields
written by hand (kio writes none), and the check of a frame mutated at random."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from raftka.protocol.api import FrameError, decode_request, read_prefix


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tagged(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged field set of (tag, value) pairs."""
    return uvarint(len(fields)) + b"".join(
        uvarint(tag) + uvarint(len(value)) + value for tag, value in fields
    )


def unknown_tags(first_tag: int, max_size: int) -> st.SearchStrategy[list[tuple[int, bytes]]]:
    """Tagged fields from `first_tag` on, tags ascending as Kafka writes them."""
    return st.lists(
        st.tuples(st.integers(first_tag, 300), st.binary(max_size=max_size)), max_size=3
    ).map(lambda fields: sorted(dict(fields).items()))


def kio_decode(frame: bytes) -> tuple[Any, Any]:
    return decode_request(frame, read_prefix(frame))


def mutate(frame: bytes, data: st.DataObject) -> bytes:
    """`frame` with one to four bytes after its api key and version replaced by bytes that
    make lengths, counts and varints go wrong, and up to three bytes added at its end."""
    mutated = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(6, len(frame) - 1))
        mutated[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE]))
    return bytes(mutated) + data.draw(st.binary(max_size=3))


def assert_refused_or_decoded_as_kio(
    frame: bytes,
    decode_as_kio: Callable[[bytes], tuple[Any, Any]],
    kafka_accepts: Callable[[str, tuple[Any, Any]], bool] | None = None,
) -> None:
    """The hand-written decoder (`decode_as_kio`: its result as kio's entities) refuses
    `frame` with FrameError where kio refuses it, and decodes it as kio does otherwise.
    `kafka_accepts(kio's refusal, what the decoder gave)`: True where that refusal is kio's
    own and Kafka decodes the frame as the decoder did (each use is tested on its own)."""
    try:
        expected: Any = kio_decode(frame)
    except FrameError as exc:
        if kafka_accepts is not None:
            with contextlib.suppress(FrameError):
                if kafka_accepts(str(exc), decode_as_kio(frame)):
                    return
        if "Unknown tagged field" in str(exc):
            # A tagged field kio does not know, which it refuses where Kafka skips it
            # (KIP-482), as the decoders do (each codec's test of unknown tagged fields
            # checks how): nothing of kio's to compare with, but the decoder must still
            # decode the frame or refuse it with FrameError alone.
            with contextlib.suppress(FrameError):
                decode_as_kio(frame)
            return
        expected = FrameError
    try:
        decoded: Any = decode_as_kio(frame)
    except FrameError:
        decoded = FrameError
    assert decoded == expected
