"""`solve`'s quick path (`classic.quick`, one compiled call without numpy) and the executable's
bare `snim-batch solve` that uses it before the CLI's imports: the same answers as a textbook
SG table, None (so the general path) for every input it must not answer, and the same output,
errors and exit codes as the CLI's `solve`."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CLASSIC_SAMPLE, naive_sg

from pipeline import cli as cli_module
from pipeline.classic import solve_classic, solve_quick
from pipeline.errors import InputError, RuleError
from pipeline.limits import DEFAULT_RULE_OPS, DEFAULT_RUN_OPS, DEFAULT_TABLE_LEN

SCRIPT = Path(sys.executable).with_name("snim-batch")
needs_script = pytest.mark.skipif(not SCRIPT.exists(), reason="snim-batch script not installed")


def textbook(cases) -> str:
    """The answer as the C reference finds it: SG(0..max heap) per case, XOR per position."""
    lines = []
    for moves, positions in cases:
        top = max((h for pos in positions for h in pos), default=0)
        sg = naive_sg(sorted(set(moves)), top + 1)
        line = ""
        for pos in positions:
            x = 0
            for h in pos:
                x ^= sg[h]
            line += "W" if x else "L"
        lines.append(line + "\n")
    return "".join(lines)


def render(cases, end: str = "0\n") -> str:
    out = []
    for moves, positions in cases:
        out.append(f"{len(moves)} {' '.join(map(str, moves))}\n{len(positions)}\n")
        out += [" ".join(map(str, [len(pos), *pos])) + "\n" for pos in positions]
    return "".join(out) + end


def random_cases(rng: random.Random, n_cases: int, max_k: int, max_move: int,
                 max_heap: int) -> list:
    shared = [rng.randint(1, max_move) for _ in range(rng.randint(1, max_k))]
    cases = []
    for _ in range(n_cases):
        moves = (list(shared) if rng.random() < 0.3 else  # the same S again (one table)
                 [rng.randint(1, max_move) for _ in range(rng.randint(1, max_k))])
        rng.shuffle(moves)
        positions = [[rng.randint(0, max_heap) for _ in range(rng.randint(0, 4))]
                     for _ in range(rng.randint(0, 30))]
        cases.append((moves, positions))
    return cases


@pytest.mark.parametrize(("seed", "max_k", "max_move", "max_heap"), [
    (1, 4, 9, 40),  # small S: periods proven early, heaps far past them
    (2, 30, 300, 2000),  # heaps past max(S): the period proof on the way
    (3, 100, 10_000, 10_000),  # the classic problem's sizes
    (4, 400, 1000, 3000),  # more than 254 moves: 16-bit values
])
def test_quick_answers_as_the_textbook_table(seed, max_k, max_move, max_heap):
    rng = random.Random(seed)
    cases = random_cases(rng, 25, max_k, max_move, max_heap)
    expected = textbook(cases)
    text = render(cases)
    assert solve_quick(text) == expected.encode()
    assert solve_quick(b"\xef\xbb\xbf" + text.encode()) == expected.encode()  # a BOM
    assert solve_quick(text.replace("\n", "\r\n").replace(" ", "\t")) == expected.encode()
    assert solve_classic(text) == expected
    unterminated = render([*cases, ((1,), [[1]])], end="")  # no 0: ends on a line break
    assert solve_quick(unterminated) == (expected + "W\n").encode()


@pytest.mark.parametrize("big", ["heap", "l"])
def test_quick_answers_rows_that_do_not_fit_16_bits_from_the_bytes(big):
    """Rows are answered from the parser's 16-bit copy of them, or from the bytes again when
    a heap or an l does not fit: the same answers."""
    rng = random.Random(big)
    cases = random_cases(rng, 6, 20, 300, 3000)
    if big == "heap":
        cases.append(([1, 3, 70_000], [[65_535], [65_536], [70_001, 5], [200_000]]))
    else:
        cases.append(([2, 5], [[rng.randint(0, 50) for _ in range(70_000)], [3]]))
    cases += random_cases(rng, 6, 20, 300, 3000)
    assert solve_quick(render(cases)) == textbook(cases).encode()


def test_quick_answers_an_input_without_cases_and_cases_without_positions():
    assert solve_quick("0\n") == b""
    assert solve_quick("2 1 2\n0\n1 4\n0\n0\n") == b"\n\n"
    assert solve_quick(CLASSIC_SAMPLE) == b"LWW\nWWL\n"


@pytest.mark.parametrize("text", [
    "", " \n", "2 1 x\n", "2 1 2\n1\n1 -3\n0\n", "2 1 2\n1\n1 3\n0\n7\n", "2 1 2\n1\n1 3",
    "2 1 2\n1\n2 3\n", "1 0\n0\n", f"1 {2**32}\n0\n", "2 1 2\n1\n1 99999999999999999999\n0\n",
])
def test_quick_leaves_every_malformed_input_to_the_general_path(text):
    """None, so that `solve_classic` words the error as it always has."""
    assert solve_quick(text) is None
    with pytest.raises(InputError):
        solve_classic(text)


def test_quick_leaves_heaps_beyond_a_limit_to_the_general_path():
    many = " ".join(map(str, range(1, 401)))
    text = f"400 {many}\n1\n1 500\n0\n"
    assert solve_quick(text, max_rule_ops=6000) is None
    with pytest.raises(RuleError, match="within the 11 values that --max-rule-ops 6000 allows"):
        solve_classic(text, max_rule_ops=6000)
    assert solve_quick(text, cap=100) is None
    with pytest.raises(RuleError, match="within the 100 values that --cap 100 allows"):
        solve_classic(text, cap=100)


def test_the_general_path_answers_when_the_run_room_takes_rounds():
    """Tables the run's work limit does not let one round build go to the general path, whose
    rounds find the periods early: the same answer as the quick path without the limit."""
    heaps = [random.Random(6).randrange(0, 10**6) for _ in range(200)]
    cases = [((1, 2), [[h] for h in heaps]), ((2, 5, 7), [[h, h // 3] for h in heaps])]
    text = render(cases)
    expected = "".join("W" if h % 3 else "L" for h in heaps) + "\n"
    assert solve_quick(text, max_run_ops=10**8) is None  # 2 x 10**6 values do not fit
    answer = solve_classic(text, max_run_ops=10**8)
    assert answer.startswith(expected)
    assert solve_quick(text) == answer.encode()


def test_the_quick_defaults_are_the_commands():
    """A bare `snim-batch solve` is answered with `quick`'s defaults: they must be the CLI's."""
    cli = {name: p.default for name, p in inspect.signature(cli_module.solve).parameters.items()}
    quick = {name: p.default for name, p in inspect.signature(solve_quick).parameters.items()}
    assert (cli["cap"], cli["max_rule_ops"], cli["max_run_ops"]) == (
        quick["cap"], quick["max_rule_ops"], quick["max_run_ops"]) == (
        DEFAULT_TABLE_LEN, DEFAULT_RULE_OPS, DEFAULT_RUN_OPS)


MODULES_SEEN = r"""
import json, os, sys
real_exit = os._exit
def leave(code):
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
    real_exit(code)
os._exit = leave
sys.argv = ["snim-batch", "solve"]
from pipeline.executable import entry
entry()
"""


def test_a_bare_solve_imports_neither_typer_nor_numpy(tmp_path):
    proc = subprocess.run([sys.executable, "-c", MODULES_SEEN], input=CLASSIC_SAMPLE,
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "LWW\nWWL\n"), proc.stderr
    modules = {name.split(".")[0] for name in json.loads(proc.stderr.splitlines()[-1])}
    assert not modules & {"typer", "click", "pydantic", "numpy", "polars", "pyarrow"}
    assert "pipeline.classic._classic" in json.loads(proc.stderr.splitlines()[-1])


@needs_script
@pytest.mark.parametrize("text", [
    CLASSIC_SAMPLE, "", "2 1 x\n", "2 1 2\n1\n1 3", "0\n", "2 1 2\n1\n1 3\n0\n1\n",
    "\xef\xbb\xbf2 1 2\n1\n1 -3\n0\n",
])
@pytest.mark.parametrize("env", [{}, {"SNIM_BATCH_LOG_FORMAT": "json"},
                                 {"SNIM_BATCH_LOG_FORMAT": "yaml"}])
@pytest.mark.parametrize("stdin", ["pipe", "file"])
def test_a_bare_solve_says_what_the_commands_solve_says(tmp_path, text, env, stdin):
    """`solve` alone (the quick path, stdin given back to the CLI when it declines) against
    `solve --cap N` with the default N (always the CLI): the same stdout, stderr and exit
    code, for answers and errors, from a pipe and from a file (mapped)."""
    path = tmp_path / "in.txt"
    path.write_text(text)
    results = []
    for args in (["solve"], ["solve", "--cap", str(DEFAULT_TABLE_LEN)]):
        with path.open("rb") as fh:
            proc = subprocess.run(
                [SCRIPT, *args], stdin=fh if stdin == "file" else None,
                input=None if stdin == "file" else text.encode(), capture_output=True,
                cwd=tmp_path, timeout=120, env={**os.environ, **env})
        results.append((proc.returncode, proc.stdout, re.sub(rb'"ts": "[^"]*"', b"", proc.stderr)))
    assert results[0] == results[1]
    assert b"Traceback" not in results[0][2]


# every temporary directory Python would try, read only, as in an image run with a
# read-only root file system; the command runs from one of them (--rbind: a plain bind of a
# directory with mounts below it, locked in the namespace, is refused)
NO_TEMPORARY_DIRECTORY = (
    'for d in /tmp /var/tmp /usr/tmp; do [ -d "$d" ] || continue; '
    'mount --rbind "$d" "$d" && mount -o remount,bind,ro "$d" || exit 97; done; '
    'cd /tmp && exec "$@"')


@needs_script
@pytest.mark.parametrize(("text", "expected"), [
    ("2 1 x\n", (1, b"", b"snim-batch: error: classic input: token 3 ('x', at byte offset 4) "
                         b"is not a non-negative integer (in test case 1)\n")),
    # S = {2, 5}: SG has period 7 from 0 (0 0 1 1 0 2 1), and 2^63 - 1 is 0 mod 7
    (f"2 2 5\n1\n1 {2**63 - 1}\n0\n", (0, b"L\n", b"")),
], ids=["bad-token", "heap-2^63-1"])
def test_a_piped_solve_the_quick_path_declines_needs_no_temporary_directory(text, expected):
    """Input the quick path leaves to the CLI, piped, with no writable temporary directory
    (TMPDIR and the like unset): the answer or error, as the CLI's own `solve` (which reads
    stdin itself) gives it too. Before, the piped bytes went to a temporary file, and there
    was none: a traceback, exit 1."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not permitted here")
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    for args in (["solve"], ["solve", "--cap", str(DEFAULT_TABLE_LEN)]):
        proc = subprocess.run(["unshare", "-rm", "sh", "-c", NO_TEMPORARY_DIRECTORY, "sh",
                               str(SCRIPT), *args], input=text.encode(), capture_output=True,
                              env=env, timeout=120)
        assert proc.returncode != 97, proc.stderr
        assert (proc.returncode, proc.stdout, proc.stderr) == expected, args


@needs_script
@pytest.mark.parametrize("options", [[], ["--cap", str(DEFAULT_TABLE_LEN)]])
def test_a_solve_with_stdin_closed_reads_it_as_empty(tmp_path, options):
    """`snim-batch solve <&-`: the empty input's error, as from /dev/null, exit 1. Before, a
    traceback (the quick path) or an internal error (the command's own)."""
    proc = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", str(SCRIPT), "solve", *options],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", "snim-batch: error: classic input: is empty (no number at all): expected test "
               "cases ending with a line holding 0 (a lone 0 is an input without test cases)\n")


@needs_script
@pytest.mark.parametrize("options", [[], ["--cap", str(DEFAULT_TABLE_LEN)]])
def test_a_solve_that_cannot_write_its_answer_says_so(tmp_path, options):
    """The quick path (no options) and the command's own: one line, exit 1, no traceback."""
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([SCRIPT, "solve", *options], input=CLASSIC_SAMPLE.encode(),
                              stdout=full,
                              stderr=subprocess.PIPE, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.decode() == ("snim-batch: error: stdout: cannot print the answer "
                                    "(No space left on device)\n")  # as every command says it


@needs_script
@pytest.mark.parametrize("options", [[], ["--cap", str(DEFAULT_TABLE_LEN)]])
def test_a_solve_without_stdout_says_so_as_every_command_does(tmp_path, options):
    """`>&-`: no stdout at all; the quick path and the command's own say it in the same
    words as a full one, exit 1."""
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", str(SCRIPT), "solve", *options],
                          input=CLASSIC_SAMPLE, capture_output=False, stderr=subprocess.PIPE,
                          text=True, cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (
        1, "snim-batch: error: stdout: cannot print the answer (it is closed)\n")


@pytest.mark.parametrize("shape", ["large", "mixed", "small", "wide", "high"])
@pytest.mark.parametrize("start", [0, 1, 64, 200])
def test_the_tabulation_by_blocks_is_the_textbooks(shape, start):
    """Tables of S whose moves are all at least 64 (bitsets, a block at once), some below
    (bitsets and marks, a position at once), none (marks only), or more than 254 moves
    (16-bit values), or values past 32 (the bitsets give way to the marks), also grown from a
    prefix: the textbook's values, and a proven period holds to the end."""
    from pipeline import kernels

    rng = random.Random(f"{shape}-{start}")
    for _ in range(12):
        if shape == "large":
            moves = rng.sample(range(64, 700), rng.randint(1, 40))
        elif shape == "mixed":
            moves = rng.sample(range(1, 64), rng.randint(1, 3)) + rng.sample(
                range(64, 700), rng.randint(1, 40))
        elif shape == "small":
            moves = rng.sample(range(1, 64), rng.randint(1, 8))
        elif shape == "wide":
            moves = rng.sample(range(64, 2000), 300)
        else:  # SG(x) = (x // 64) mod 61 up to the period 64 * 61: values up to 60
            moves = [64 * j + rng.randint(0, 3) for j in range(1, 61)]
        moves = sorted(set(moves))
        n = 4000
        expected = naive_sg(moves, n)
        dtype = np.uint16 if len(moves) >= 255 else np.uint8
        vals = np.zeros(n, dtype)
        end, pre, per = kernels.tabulate_subtraction(np.array(moves, np.int64), vals, 0, n)
        assert vals[:end].tolist() == expected[:end], moves
        if shape == "high":
            assert max(expected[:end]) > 32
        if per:
            assert all(expected[h] == expected[pre + (h - pre) % per] for h in range(pre, n))
        else:
            assert end == n
        if start and end > start:  # grown from a prefix without a repeat: the same table
            grown = np.zeros(n, dtype)
            grown[:start] = expected[:start]
            assert kernels.tabulate_subtraction(np.array(moves, np.int64), grown, start,
                                                n) == (end, pre, per)
            assert grown[:end].tolist() == expected[:end]


@needs_script
@pytest.mark.parametrize("options", [[], ["--cap", str(DEFAULT_TABLE_LEN)]])
def test_a_solve_stopped_while_it_reads_says_so_and_prints_no_answer(tmp_path, options):
    """SIGTERM while `solve` waits for the rest of its input (a pipe left open), on the quick
    path and the command's own: exit 143, the one stop line, nothing on stdout."""
    import signal
    import time

    proc = subprocess.Popen([SCRIPT, "solve", *options], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdin is not None
    proc.stdin.write(CLASSIC_SAMPLE.encode()[:20])  # the input is not over: it waits
    proc.stdin.flush()
    status = Path(f"/proc/{proc.pid}/status")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # its stop handlers are set (SigCgt has SIGTERM)
        caught = next(line.split()[1] for line in status.read_text().splitlines()
                      if line.startswith("SigCgt:"))
        if int(caught, 16) >> (signal.SIGTERM - 1) & 1:
            break
        time.sleep(0.01)
    time.sleep(0.3 if options else 0.1)  # into the read of stdin
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err.decode()) == (
        143, b"", "snim-batch: stopped by SIGTERM; nothing was written\n")
