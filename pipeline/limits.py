"""Numeric limits shared by the configuration and the tables (no imports, so that reading a
config never loads the kernels): the largest heap and table, the default work limits, and the
bounds of `generate`'s options."""

MAX_HEAP = 2**63 - 1
MAX_TABLE_LEN = 2**32 - 1
DEFAULT_TABLE_LEN = 2**26
DEFAULT_TOTAL_VALUES = 2**30
DEFAULT_RULE_OPS = 2_000_000_000
DEFAULT_RUN_OPS = 10_000_000_000
DEFAULT_PROBE_OPS = 200_000_000
PROOF_OPS = 200  # the period proof's share of one SG value's work, in operations (`grundy`)

# `generate`'s options, so that a typo cannot ask for years of work; its memory does not grow
# with them (positions are drawn and written a chunk at a time) but for --shuffle, which
# permutes all rows in memory (a few hundred bytes a row), and the rules, drawn whole.
MAX_POSITIONS = 10**10
MAX_HEAPS = 1_000_000  # heaps per position, as many values as a cell may hold
MAX_ALL_HEAPS = 10**11  # positions x heaps: about 800 GB of heaps
MAX_RULE_SETS = 1_000_000
MAX_MOVES_PER_SET = 1_000_000  # the most moves a rules cell may hold
MAX_RULES_MOVES = 20_000_000
"""The most moves a run's rules rows hold together (each row's distinct moves, file by file,
row by row): past it a row with moves is rejected, so that a small rules file of long ranges
cannot take the run's memory and time (each move is held as a Python integer)."""
MAX_ALL_MOVES = MAX_RULES_MOVES  # rule sets x moves: what `generate` writes, a run reads
MAX_FILES = 100_000
MAX_SHUFFLED_ROWS = 20_000_000
