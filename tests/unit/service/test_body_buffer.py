"""The lane's buffers for bodies with binary tensor data (service/http/body_buffer.py)."""

from __future__ import annotations

import numpy as np

from inferpool.service.http.body_buffer import ALIGNMENT, SIZE_STEP, SMALLEST, BodyBuffers, LaneBody


def test_the_data_offset_lands_on_an_aligned_address_and_the_buffer_is_writable():
    buffers = BodyBuffers()
    for offset in (1, 2, 3, 63, 64, 65, 300):
        body = buffers.take(600_000, offset)
        assert len(body) == 600_000
        assert not body.readonly
        body[offset : offset + 4] = b"\x00\x00\x80\x3f"
        data = np.frombuffer(body, dtype=np.float32, count=1, offset=offset)
        assert data.ctypes.data % ALIGNMENT == 0
        assert data[0] == 1.0


def test_a_buffer_given_back_is_taken_again_once_nothing_views_it():
    buffers = BodyBuffers()
    first = buffers.take(100_000, 7)
    address = np.frombuffer(first, dtype=np.uint8).ctypes.data
    buffers.give_back(first)
    del first
    again = buffers.take(100_000, 7)
    assert np.frombuffer(again, dtype=np.uint8).ctypes.data == address
    assert buffers.kept == 0


def test_a_buffer_still_viewed_is_never_handed_out_again():
    buffers = BodyBuffers()
    body = buffers.take(100_000, 8)
    held = np.frombuffer(body, dtype=np.float32, count=10, offset=8)  # an engine call that outlived its request
    held[:] = 5.0
    buffers.give_back(body)
    del body
    other = buffers.take(100_000, 8)
    other[:] = b"\x00" * len(other)
    assert (held == 5.0).all()
    assert buffers.kept == 0  # the viewed one left the free list


def test_the_free_list_keeps_at_most_its_bytes():
    buffers = BodyBuffers(keep_bytes=2 * SIZE_STEP)
    taken = [buffers.take(SIZE_STEP - 100, 0) for _ in range(3)]
    for body in taken:
        buffers.give_back(body)
    assert buffers.kept == 2 * SIZE_STEP


def test_a_lane_body_fills_from_the_parser_then_directly_and_leaves_what_follows():
    buffers = BodyBuffers()
    body = LaneBody.of(buffers, SMALLEST + 10, 5)
    assert body.waiting()
    body.fill(b"a" * 1000)  # the parser's piece, with the head
    read = b"b" * (SMALLEST - 990) + b"POST /next"  # the rest of the body, then the next request
    assert body.fill_directly(read) == SMALLEST - 990
    assert not body.waiting()
    assert bytes(body.data) == b"a" * 1000 + b"b" * (SMALLEST - 990)
    body.give_back(buffers)
    assert body.data == bytearray()
    assert buffers.kept > 0


def test_a_body_without_binary_data_grows_a_bytearray_and_takes_no_buffer():
    buffers = BodyBuffers()
    body = LaneBody.of(buffers, SMALLEST * 2, None)
    body.fill(b"{")
    body.fill(b"}")
    assert body.data == bytearray(b"{}")
    assert not body.waiting()
    body.give_back(buffers)
    assert buffers.kept == 0
