"""batches.read_ahead: the same items, errors and early exits as the plain iterator."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from pipeline.batches import read_ahead


class Boom(Exception):
    pass


def test_items_arrive_in_order_and_all_of_them():
    assert list(read_ahead(iter(range(1000)))) == list(range(1000))


def test_an_empty_iterator_ends_at_once():
    assert list(read_ahead(iter([]))) == []


def test_an_error_is_raised_after_the_items_before_it():
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise Boom("third")

    got = []
    with pytest.raises(Boom, match="third"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == [1, 2]


def test_items_are_made_by_another_thread_at_most_two_ahead():
    made: list[tuple[int, str]] = []

    def items() -> Iterator[int]:
        for i in range(6):
            made.append((i, threading.current_thread().name))
            yield i

    seen = []
    for item in read_ahead(items(), name="reader"):
        seen.append(item)
        if item == 1:
            ahead = len(made)
    assert seen == list(range(6))
    assert {name for _, name in made} == {"reader"}
    assert ahead <= 4  # item 1 taken, one waiting in the hand-off, one being made


def test_leaving_early_stops_the_thread_and_closes_the_source():
    closed = threading.Event()
    made = []

    def items() -> Iterator[int]:
        try:
            for i in range(10_000):
                made.append(i)
                yield i
        finally:
            closed.set()

    for item in read_ahead(items()):
        if item == 3:
            break
    assert closed.wait(5)
    assert len(made) <= 6
    assert not [t for t in threading.enumerate() if t.name == "read_ahead"]
