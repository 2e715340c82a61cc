"""Numeric limits shared by the configuration and the tables (no imports, so that reading a
config never loads numba): the largest heap and table, and the default work limits."""

MAX_HEAP = 2**63 - 1
MAX_TABLE_LEN = 2**32 - 1
DEFAULT_TABLE_LEN = 2**26
DEFAULT_TOTAL_VALUES = 2**30
DEFAULT_RULE_OPS = 2_000_000_000
DEFAULT_RUN_OPS = 10_000_000_000
DEFAULT_PROBE_OPS = 200_000_000
