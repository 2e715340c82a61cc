"""The classic S-Nim text format, checked against a brute-force game-tree search.

The reference below knows nothing of Grundy values or tables: a position (multiset of heaps) is
winning iff some legal move leads to a losing position, memoised over sorted heap tuples.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from conftest import CLASSIC_SAMPLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.classic import (
    ClassicCase,
    parse_classic,
    read_classic,
    solve_classic,
)
from pipeline.convert import classic_frames
from pipeline.errors import InputError, RuleError

SAMPLE = CLASSIC_SAMPLE.encode()


def convert_tables(data: bytes) -> tuple[dict[str, list], dict[str, list]]:
    """`convert`'s two tables of classic text, as column lists."""
    rules, positions = classic_frames(data)
    return rules.to_dict(as_series=False), positions.to_dict(as_series=False)

# --------------------------------------------------------------------------- reference


@functools.cache
def _wins(moves: tuple[int, ...], state: tuple[int, ...]) -> bool:
    """Player to move wins `state` (sorted tuple of positive heaps) with subtraction set moves."""
    for idx, h in enumerate(state):
        if idx and state[idx - 1] == h:
            continue  # same heap size, same options
        rest = state[:idx] + state[idx + 1 :]
        for s in moves:
            if s > h:
                break
            nxt = tuple(sorted(rest + ((h - s,) if h > s else ())))
            if not _wins(moves, nxt):
                return True
    return False


def brute_wins(moves, heaps) -> bool:
    return _wins(tuple(sorted(set(moves))), tuple(sorted(h for h in heaps if h > 0)))


def brute_answer(cases) -> str:
    """Expected output for cases given as [(moves, [heaps, ...]), ...]."""
    return "".join(
        "".join("W" if brute_wins(moves, pos) else "L" for pos in positions) + "\n"
        for moves, positions in cases
    )


def render(cases, seps=(" ", "\n"), terminate=True) -> bytes:
    """Classic text for cases; separators cycle through seps (token, sep, token, sep, ...)."""
    tokens = []
    for moves, positions in cases:
        tokens += [len(moves), *moves, len(positions)]
        for pos in positions:
            tokens += [len(pos), *pos]
    if terminate:
        tokens.append(0)
    out = []
    for i, t in enumerate(tokens):
        out.append(str(t))
        out.append(seps[i % len(seps)])
    return "".join(out).encode()


def test_reference_sanity():
    # S = {1, 2}: single heap h loses iff h % 3 == 0; S = {2}: SG(h) = (h // 2) % 2.
    for h in range(30):
        assert brute_wins([1, 2], [h]) == (h % 3 != 0)
        assert brute_wins([2], [h]) == ((h // 2) % 2 == 1)
    assert not brute_wins([1], [])
    assert not brute_wins([3], [1, 2, 1, 2])


# --------------------------------------------------------------------------- fixed inputs


def test_sample_exact_output():
    assert solve_classic(SAMPLE) == "LWW\nWWL\n"


def test_sample_matches_reference():
    cases = [
        ([2, 5], [[5, 12], [2, 4, 7], [2, 3, 7, 12]]),
        ([1, 2, 3, 4, 5], [[5, 12], [2, 4, 7], [2, 3, 7, 12]]),
    ]
    assert brute_answer(cases) == "LWW\nWWL\n"
    assert render(cases).split() == SAMPLE.split()
    assert solve_classic(render(cases)) == brute_answer(cases)


@pytest.mark.parametrize("text", [
    SAMPLE.rstrip(b"\n").rsplit(b"\n", 1)[0] + b"\n",  # no terminating 0, a final line break
    SAMPLE.rstrip(b"\n").rsplit(b"\n", 1)[0] + b"\n\n  \t",  # no 0, trailing whitespace
    SAMPLE.rstrip(b"\n").rsplit(b"\n", 1)[0] + b"\r",  # no 0, a final carriage return
    b" ".join(SAMPLE.split()),  # all on one line
    SAMPLE.replace(b"\n", b"\r\n"),  # CRLF
    SAMPLE.replace(b"\n", b"\n\n\n"),  # blank lines
    b"\n\t  " + SAMPLE.replace(b" ", b" \t ").replace(b"\n", b" \r\n\x0b\x0c"),
    SAMPLE.rstrip(b"\n"),  # no final newline
    b"\n".join(SAMPLE.split()),  # one token per line
])
def test_whitespace_variations(text):
    assert solve_classic(text) == "LWW\nWWL\n"


def test_later_case_with_smaller_or_different_moves():
    # A solver that keeps mex marks or a table from an earlier case gets these wrong.
    cases = [
        (list(range(1, 11)), [[11], [22], [9, 13], [20, 21, 1]]),
        ([10], [[11], [22], [9, 13], [20, 21, 1]]),
        ([3], [[6], [3], [7, 5], [1, 2]]),
        ([1, 2, 3], [[6], [3], [7, 5], [1, 2]]),
        ([5, 1, 3, 4, 2], [[6], [12], [18]]),
        ([2], [[6], [12], [18]]),
        ([3, 1, 2], [[6], [3], [7, 5], [1, 2]]),  # same S as case 4, other order: shared table
        ([1], [[6], [3], [7, 5], [1, 2]]),
    ]
    expected = brute_answer(cases)
    assert expected.splitlines()[4:6] == ["LLL", "WLW"]
    assert solve_classic(render(cases)) == expected


def test_many_test_cases_with_early_periods_all_get_their_tables():
    """800 test cases {k} with a heap of 10^18: more first rounds of tables than the default
    run-wide work holds at once, but every period comes early, so every case is answered.
    SG of {k} is floor(x / k) mod 2 (checked against the brute force for small k)."""
    assert all(brute_wins((k,), (x,)) == bool((x // k) % 2)
               for k in range(1, 6) for x in range(20))
    ks = range(1, 801)
    cases = [((k,), [(10**18,)]) for k in ks]
    assert solve_classic(render(cases)) == "".join(
        ("W" if (10**18 // k) % 2 else "L") + "\n" for k in ks)


def test_zero_heaps_and_empty_positions():
    cases = [
        ([1], [[], [0], [0, 0, 0], [0, 1], [1, 0, 1]]),
        ([2, 3], []),  # m = 0: an empty line
        ([4], [[0, 4], [], [4, 4, 0]]),
    ]
    assert brute_answer(cases) == "LLLWL\n\nWLL\n"
    assert solve_classic(render(cases)) == "LLLWL\n\nWLL\n"


def test_duplicate_and_unsorted_moves():
    cases = [([5, 2, 2, 5], [[5, 12], [2, 4, 7], [2, 3, 7, 12]])]
    assert solve_classic(render(cases)) == "LWW\n"


def test_a_lone_terminator_is_an_input_without_test_cases():
    assert solve_classic(b"0") == ""
    assert solve_classic(b"0\n") == ""
    assert solve_classic(b" \r\n0 \t\n") == ""
    assert parse_classic(b"0") == []
    assert convert_tables(b"0\n") == ({"rule_set_id": [], "kind": [], "moves": []},
                                          {"rule_set_id": [], "position_id": [], "heaps": []})


@pytest.mark.parametrize("text", [b"", b" ", b"\n", b"\r", b" \n\r\n", b"\t\x0b\x0c \r\n\n"])
def test_an_input_without_any_number_is_refused(text):
    """Nothing or only whitespace is no valid input (it is the most truncated input there
    is); solve, parse and convert say so."""
    for fn in (solve_classic, parse_classic, convert_tables):
        with pytest.raises(InputError, match=r"^classic input: is empty \(no number at all\): "
                                             r"expected test cases ending with a line holding 0"):
            fn(text)


def test_huge_heaps_use_the_period():
    # SG under {1, 2} is h % 3 and under {3} is (h // 3) % 2: checked by brute force above/below.
    for h in range(40):
        assert brute_wins([3], [h]) == ((h // 3) % 2 == 1)
    big = [10**18, 10**18 + 2, 2**63 - 1, 3 * 10**17]
    cases = [([1, 2], [[h] for h in big]), ([3], [[h] for h in big])]
    expected = "".join("W" if h % 3 else "L" for h in big) + "\n"
    expected += "".join("W" if (h // 3) % 2 else "L" for h in big) + "\n"
    assert solve_classic(render(cases)) == expected


def test_cap_exceeded_names_case_and_heap():
    cases = [([1], [[3]]), ([2, 5], [[1, 2], [0, 100]])]
    text = render(cases)
    with pytest.raises((RuleError, InputError), match=r"test case 2.*position 2.*100"):
        solve_classic(text, cap=3)
    assert solve_classic(text) == brute_answer(cases)


def test_many_positions_cross_answer_blocks():
    # solve answers positions in blocks of 4096 rows, each re-read from its own byte offset: the
    # cases here (some empty, one spanning several blocks, signs and leading zeros on heaps)
    # start and end inside blocks and across their edges.
    rng = np.random.default_rng(7)
    sizes = [0, 4095, 1, 0, 0, 9000, 3, 4097, 0, 2500, 1]
    cases = []
    for m in sizes:
        moves = sorted({int(v) for v in rng.integers(1, 6, size=int(rng.integers(1, 4)))})
        positions = [[int(v) for v in rng.integers(0, 13, size=int(rng.integers(0, 4)))]
                     for _ in range(m)]
        cases.append((moves, positions))
    text = render(cases, seps=(" ", "\n", "  ", "\t"))
    assert solve_classic(text) == brute_answer(cases)
    signed = re.sub(rb"(?<=[ \t])(\d)(?=\n)", rb"+0\1", text)  # a heap written "+07"
    assert signed != text
    assert solve_classic(signed) == brute_answer(cases)


def test_cap_exceeded_reports_the_first_heap_in_input_order_across_blocks():
    # {2, 5} has period 7 after 0 preperiod values, found only after 10 values: with cap=3
    # no heap >= 3 can be answered. Rows 4200 and 9000 (blocks 1 and 2) hold such heaps.
    positions = [[1]] * 12000
    positions[9000] = [0, 50]
    positions[4200] = [2, 1, 7]
    cases = [([1], [[3]] * 10), ([2, 5], positions)]
    with pytest.raises(RuleError, match=r"test case 2, position 4201, heap 3 \(size 7\)"):
        solve_classic(render(cases), cap=3)
    assert solve_classic(render(cases)) == brute_answer(cases)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("text, pattern", [
    (b"2 2 5\n3\n2 5 12\n3 2 4", r"test case 1, position 2 of 3: expected 3 heap sizes.*ended"),
    (b"2 2 5\n3\n2 5 12\n", r"test case 1: expected 'l'.*position 2 of 3.*ended"),
    (b"2 2 5\n", r"test case 1: expected m .*ended"),
    (b"2 2", r"test case 1: expected 2 moves.*ended after 1"),
    (b"1 1 1 1 1\n3 1", r"test case 2: expected 3 moves.*ended after 1"),
    (b"1 1 1 1 1\n2 1 2 1 3 4", r"test case 2, position 1 of 1: expected 3 heap sizes"),
    (b"2 2 x5\n", r"token 3 \('x5'.*not a non-negative integer"),
    (b"2 2 5\n3\n2 5 1.5", r"token 7 \('1\.5'.*not a non-negative integer"),
    (b"2 2 5 3 2 5 12 abc", r"token 8 \('abc'"),
    (b"2 2 5 3 2 5 -", r"token 7 \('-'"),
    (b"1 1 1 1 99999999999999999999", r"token 5 .*64-bit"),
    (b"2 0 5\n1\n1 1\n0", r"test case 1: move 0 .*not positive"),
    (b"1 1 1 1 1\n2 4 -3\n1\n1 1\n0", r"test case 2: move -3 .*not positive"),
    (b"-2 1 2", r"test case 1: k = -2 .*negative"),
    (b"1 1 -1", r"test case 1: m = -1 .*negative"),
    (b"1 1 1 -1", r"test case 1, position 1 of 1: l = -1 .*negative"),
    (b"1 1 2 1 3 2 4 -5", r"test case 1, position 2 of 2: heap size -5 .*negative"),
    (b"1 1 1 1 1 0 7", r"after the terminating 0"),
    (b"1 5000000000 0", r"test case 1: move 5000000000 .*larger"),
])
def test_errors_are_informative(text, pattern):
    for fn in (solve_classic, parse_classic, convert_tables):
        with pytest.raises(InputError, match=pattern):
            fn(text)


UNTERMINATED = r"input ends without the terminating 0; its last token, "
NO_LINE_BREAK = r", and no line break follows it, so it may be cut short: truncated\?"
ZERO_READ = r", and that 0 may be the terminator, read as data because a number before it was lost"


@pytest.mark.parametrize("text, pattern", [
    # the last number cut short ("12" -> "1"): the input still parses, but no line break follows
    (b"2 2 5\n3\n2 5 12\n3 2 4 7\n4 2 3 7 1",
     UNTERMINATED + r"1 \(token 16, at byte offset 31\), was read as heap 4 of position 3 of 3 "
     r"in test case 1" + NO_LINE_BREAK),
    (b"2 2 5\n3\n2 5 12\n3 2 4 7\n4 2 3 7 12\n5 1 2 3 4 5\n3\n2 5 12\n3 2 4 7\n4 2 3 7 12",
     r"its last token, 12 \(token 35, .*heap 4 of position 3 of 3 in test case 2" + NO_LINE_BREAK),
    # a lost number lets the terminator be read as a heap, an l or an m
    (b"2 2 5\n3\n2 5 12\n3 2 4 7\n4 2 3 7\n0\n",
     UNTERMINATED + r"0 \(token 16, at byte offset 31\), was read as heap 4 of position 3 of 3 "
     r"in test case 1" + ZERO_READ),
    (b"2 2 5\n3\n2 5 12\n3 2 4 7\n0\n",
     r"its last token, 0 \(token 12, .*was read as l, the number of heaps, of position 3 of 3 "
     r"in test case 1" + ZERO_READ),
    (b"1 1\n1\n1 3\n2 2 5\n0\n",
     r"its last token, 0 \(token 9, .*was read as m, the number of positions, of test case 2"
     + ZERO_READ),
    (b"1 1\n1\n1 3\n2 2 5\n00\r\n", r"its last token, 00 .*read as m, .*test case 2" + ZERO_READ),
    (b"1 1 2 1 2 1 0",
     r"its last token, 0 \(token 7, .*heap 1 of position 2 of 2 in test case 1" + ZERO_READ),
])
def test_missing_terminator_where_the_input_may_be_truncated(text, pattern):
    """Without its final 0 an input is accepted only when a line break follows its last token
    and that token is not a 0: otherwise it may have lost its end, and the error says what the
    last token was read as; `convert` parses the same way."""
    for fn in (solve_classic, parse_classic, convert_tables):
        with pytest.raises(InputError, match=pattern):
            fn(text)


@pytest.mark.parametrize("text, expected", [
    (b"2 2 5\n3\n2 5 12\n3 2 4 7\n4 2 3 7 12\n", "LWW\n"),
    (b"2 2 5\n3\n2 5 12\n3 2 4 7\n4 2 3 7 12 \t\r\n \n", "LWW\n"),
    (b"2 2 5\n2\n2 5 12\n1 10\n", "LW\n"),  # S = {2, 5}: SG(10) = 3 (period 7)
    (b"2 2 5\n1\n0\n0", "L\n"),  # an empty position, then the terminator
    (b"2 2 5\n0\n0", "\n"),  # no positions, then the terminator
    (b"2 2 5\n1\n1 0\n0\n", "L\n"),  # a heap of 0 with the terminator after it
])
def test_missing_terminator_accepted_where_it_cannot_hide_a_cut(text, expected):
    assert solve_classic(text) == expected


def test_first_error_in_input_order_wins():
    with pytest.raises(InputError, match=r"move 0"):
        solve_classic(b"2 0 5 1 1 x")
    with pytest.raises(InputError, match=r"'x'"):
        solve_classic(b"2 x 0 1 1 1")


# --------------------------------------------------------------------------- parse / convert


def test_parse_classic_sample():
    cases = parse_classic(SAMPLE)
    assert len(cases) == 2
    assert all(isinstance(c, ClassicCase) for c in cases)
    assert cases[0].moves == (2, 5)
    assert cases[1].moves == (1, 2, 3, 4, 5)
    for c in cases:
        assert c.n_positions == 3
        assert [p.tolist() for p in c.positions] == [[5, 12], [2, 4, 7], [2, 3, 7, 12]]
        assert c.offsets.tolist() == [0, 2, 5, 9]
        assert c.heaps.dtype == np.int64
    assert parse_classic(b"3 5 2 2 1 0 0")[0].moves == (5, 2, 2)  # as given


def test_read_classic_flat_layout():
    ci = read_classic(SAMPLE)
    assert ci.n_cases == 2 and ci.n_positions == 6
    assert ci.moves.tolist() == [2, 5, 1, 2, 3, 4, 5]
    assert ci.moves_offsets.tolist() == [0, 2, 7]
    assert ci.case_offsets.tolist() == [0, 3, 6]
    assert ci.offsets.tolist() == [0, 2, 5, 9, 11, 14, 18]


def test_convert_tables_sample():
    rules, positions = convert_tables(SAMPLE)
    assert rules == {
        "rule_set_id": [1, 2],
        "kind": ["subtraction", "subtraction"],
        "moves": [[2, 5], [1, 2, 3, 4, 5]],
    }
    assert positions == {
        "rule_set_id": [1, 1, 1, 2, 2, 2],
        "position_id": [0, 1, 2, 0, 1, 2],
        "heaps": [[5, 12], [2, 4, 7], [2, 3, 7, 12]] * 2,
    }


def _tables_to_cases(rules, positions):
    by_id = {rid: (moves, []) for rid, moves in zip(rules["rule_set_id"], rules["moves"])}
    for rid, pid, heaps in zip(positions["rule_set_id"], positions["position_id"],
                               positions["heaps"]):
        assert pid == len(by_id[rid][1])
        by_id[rid][1].append(heaps)
    return [by_id[rid] for rid in rules["rule_set_id"]]


def test_convert_tables_round_trip():
    for text in (SAMPLE, render([([3], []), ([1, 1], [[], [0, 2]])])):
        rules, positions = convert_tables(text)
        rebuilt = render(_tables_to_cases(rules, positions))
        assert solve_classic(rebuilt) == solve_classic(text)
        assert convert_tables(rebuilt) == (rules, positions)
    rules, positions = convert_tables(render([([3], []), ([1, 1], [[], [0, 2]])]))
    assert rules["moves"] == [[3], [1, 1]]
    assert positions == {"rule_set_id": [2, 2], "position_id": [0, 1], "heaps": [[], [0, 2]]}


# --------------------------------------------------------------------------- property tests

moves_st = st.lists(st.integers(1, 7), min_size=1, max_size=4)
position_st = st.lists(st.integers(0, 14), max_size=4)
case_st = st.tuples(moves_st, st.lists(position_st, max_size=4))
cases_st = st.lists(case_st, min_size=1, max_size=5)
seps_st = st.lists(st.sampled_from([" ", "\n", "\t", "\r\n", "  ", "\n\n", " \n "]),
                   min_size=1, max_size=5)


def unterminated_ok(tokens: list[int], tail: bytes) -> bool:
    """An input without its final 0 is accepted when a line break ends it and its last token
    is not 0 (the documented rule)."""
    return (b"\n" in tail or b"\r" in tail) and tokens[-1] != 0


def case_tokens(cases) -> list[int]:
    return render(cases, seps=(" ",), terminate=False).split()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases=cases_st, seps=seps_st, terminate=st.booleans())
def test_random_inputs_match_brute_force(cases, seps, terminate):
    text = render(cases, seps=seps, terminate=terminate)
    tokens = [int(t) for t in text.split()]
    tail = text[len(text.rstrip()):]
    if not terminate and not unterminated_ok(tokens, tail):
        with pytest.raises(InputError, match="input ends without the terminating 0"):
            solve_classic(text)
        return
    assert solve_classic(text) == brute_answer(cases)
    parsed = parse_classic(text)
    assert [(list(c.moves), [p.tolist() for p in c.positions]) for c in parsed] == \
        [(m, p) for m, p in cases]


@settings(max_examples=100, deadline=None)
@given(cases=cases_st, data=st.data())
def test_truncated_inputs(cases, data):
    """An input cut after any token: at a case boundary it is the whole cases before the cut,
    if the unterminated rule accepts it; anywhere else an error that says the input ended."""
    tokens, boundaries = [], []
    for moves, positions in cases:
        boundaries.append(len(tokens))
        tokens += [len(moves), *moves, len(positions)]
        for pos in positions:
            tokens += [len(pos), *pos]
    boundaries.append(len(tokens))
    cut = data.draw(st.integers(0, len(tokens)))
    tail = data.draw(st.sampled_from([b"", b" ", b"\n", b" \r\n"]))
    text = " ".join(map(str, tokens[:cut])).encode() + tail
    if cut == 0:
        with pytest.raises(InputError, match=r"is empty \(no number at all\)"):
            solve_classic(text)
    elif cut in boundaries and unterminated_ok(tokens[:cut], tail):
        assert solve_classic(text) == brute_answer(cases[:boundaries.index(cut)])
    elif cut in boundaries:
        with pytest.raises(InputError, match=r"input ends without the terminating 0"):
            solve_classic(text)
    else:
        with pytest.raises(InputError, match=r"test case \d+.*input ended"):
            solve_classic(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases=cases_st, seps=seps_st, data=st.data())
def test_a_byte_cut_never_gives_a_wrong_answer(cases, seps, data):
    """A complete input cut at any byte (a number may lose digits) is either an error or the
    answers of the cases before the cut, all of them or, when the cut leaves whole lines that
    end a test case, those."""
    text = render(cases, seps=seps)
    full = brute_answer(cases).splitlines(keepends=True)
    cut = text[:data.draw(st.integers(0, len(text) - 1))]
    try:
        answer = solve_classic(cut)
    except InputError:
        return
    lines = answer.splitlines(keepends=True)
    assert answer == "".join(full[:len(lines)])
    if len(lines) < len(full):
        tail = cut[len(cut.rstrip()):]
        assert cut.strip() == b"" or b"\n" in tail or b"\r" in tail


@settings(max_examples=50, deadline=None)
@given(cases=cases_st, data=st.data())
def test_a_bad_token_anywhere_is_reported(cases, data):
    tokens = render(cases).split()
    at = data.draw(st.integers(0, len(tokens) - 1))
    bad = data.draw(st.sampled_from([b"x", b"1x", b"2.0", b"--1", b"+", b"0x10"]))
    text = b" ".join(tokens[:at] + [bad] + tokens[at + 1 :])
    with pytest.raises(InputError, match=rf"token {at + 1} \({re.escape(repr(bad.decode()))}"):
        solve_classic(text)


def test_a_utf8_byte_order_mark_is_skipped_and_offsets_still_count_it():
    """Editors on Windows start a text file with EF BB BF: not a token. Offsets in messages
    stay the file's own (the mark's three bytes included)."""
    bom = b"\xef\xbb\xbf"
    assert solve_classic(bom + SAMPLE) == "LWW\nWWL\n"
    assert [c.moves for c in parse_classic(bom + SAMPLE)] == [
        c.moves for c in parse_classic(SAMPLE)]
    with pytest.raises(InputError, match=r"token 2 \('x', at byte offset 5\) is not a "
                                         r"non-negative integer \(in test case 1\)"):
        solve_classic(bom + b"1 x\n")
    with pytest.raises(InputError, match=r"its last token, 5 \(token 5, at byte offset 11\)"):
        solve_classic(bom + b"1 2\n1\n1 5")
    with pytest.raises(InputError, match=r"token 1 \('\\ufeff1'"):
        solve_classic(bom + bom + b"1 2\n1\n1 5\n0\n")  # a second mark is text, refused
    for text, offset in (("\ufeff1 2\n1\n1 x\n0\n", 11), ("1 2 1 é 0", 6), ("é1 2 1 x 0", 0)):
        with pytest.raises(InputError, match=rf"at byte offset {offset}\)"):
            parse_classic(text)  # text is read as its UTF-8 bytes: offsets count those
