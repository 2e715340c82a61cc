"""The classic S-Nim text format (POJ 2960 / HDU 1536): parse, solve, and convert; pure.

Input is whitespace-separated integers, a sequence of test cases

    k s1 .. sk          the subtraction set S (moves as given; duplicates allowed)
    m                   the number of positions
    l h1 .. hl          m times: a position of l heaps (l = 0 is the empty position)

ended by a test case whose k is 0; tokens after it are an error. The final 0 may be left out only
where that cannot hide a truncated input: the input must then end with a line break after its
last token, and that token must not be a 0 (read as m, l or a heap, it may be the terminator of
an input that lost a number); otherwise the error says what the last token was read as. An
input with no number at all (empty, or only whitespace) is an error too, as truncated as can be;
a lone 0 is a valid input without test cases. The
answer is one line per test case with one character per position: `W` when the player to move
wins, `L` otherwise.

Everything that touches every byte or token is compiled at install time (`_classic.pyx`): a
single-pass parser over `np.frombuffer(data, np.uint8)` (tokenizer and structural walk fused)
producing flat int64 arrays with Arrow-style offsets, and a canonicalise-and-deduplicate pass so
that identical S across test cases share one table (`grundy.TableBudget.build` up to that S's
largest heap). `solve` runs the parser without storing heaps, then answers the positions in a
second, parallel pass over the bytes. Python only loops over the distinct rule sets. An input
whose tables one round of the budget builds is answered whole in one compiled call instead
(`quick`: parse, tables, answers from a 16-bit copy of the rows, no numpy). Errors name
the first problem in input order. No printing, no exits, no polars.

The modules, each using only those before it:

* `tokens`: the token reader's verdicts (the reader is compiled with the parser);
* `faults`: the parser's error record, its error kinds and their messages;
* `parser`: the one-pass parser (compiled);
* `reading`: a whole input as flat arrays (`read_classic`; the `convert` command's tables
  are made of them) and test cases (`parse_classic`);
* `quick`: `solve_quick`, a whole answer in one compiled call, or None for `solving`;
* `solving`: `solve_classic`, with the rule deduplication and the parallel answer pass
  (compiled).
"""

from pipeline.built import require_built
from pipeline.io.lazy_exports import lazy_exports

require_built(__name__, "_classic")

_EXPORTS = {**{name: "reading" for name in (
    "ClassicCase", "ClassicInput", "parse_classic", "read_classic")},
    "solve_classic": "solving", "solve_quick": "quick"}
__all__ = [*_EXPORTS]
__getattr__ = lazy_exports(__name__, _EXPORTS)  # each module loads when first asked for, so
# that `quick` runs without numpy
