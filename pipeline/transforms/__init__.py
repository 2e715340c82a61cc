"""Pure frame -> frame steps: normalise, validate, look up, XOR, order. No paths here.

Every normalised frame carries `_source` (file), `_row` (0-based row in that file), `_column`
(the canonical name of the column at fault) and `_reason`: a row whose `_reason` is set is
rejected with that reason, the rest go on.

| module | steps |
|---|---|
| `schema` | the input's columns and form; the rejects' schema and column names |
| `lists` | list text in cells ("2 5 12", "[2, 5]", "1..3") and why a list is bad |
| `buffers` | zero-copy numpy views of Arrow buffers for the kernels |
| `normalize` | input rows -> typed, validated rows; rule sets -> distinct rules |
| `evaluate` | rule set -> table, nim-sums and winning moves, verdicts |
| `long_form` | long-form rows -> positions (and the scratch split of large inputs) |
| `ordering` | evaluated batches -> verdicts in key order, duplicates out |
| `outputs` | rejects, sg_tables (with `period_status`) and summary tables; the run's key type |
| `reasons` | `ReasonCode`, the rejects' `reason_code`, read off each reason's fixed words |
"""
