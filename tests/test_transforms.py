"""pipeline.transforms helpers that the run tests reach only through whole runs, checked here
against plain-Python references."""

from __future__ import annotations

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from pipeline.transforms import integer_keys


def writes_itself(text: str | None) -> bool:
    """Reference: text is exactly how Python writes an Int64 value."""
    if text is None:
        return True
    try:
        value = int(text)
    except ValueError:
        return False
    return str(value) == text and -2**63 <= value < 2**63


KEY_TEXT = st.one_of(
    st.none(),
    st.integers(-2**64, 2**64).map(str),
    st.sampled_from(["-0", "07", "+5", " 5", "1_0", "x", "", "٣", "9223372036854775808"]),
)


@given(st.lists(KEY_TEXT, max_size=6), st.sampled_from(["rule_set_id", "position_id"]))
def test_integer_keys_converts_only_text_that_casts_back_to_itself(texts, key):
    other = "position_id" if key == "rule_set_id" else "rule_set_id"
    frame = pl.DataFrame({key: pl.Series(texts, dtype=pl.String),
                          other: pl.Series(range(len(texts)), dtype=pl.Int64),
                          "heaps": [[1]] * len(texts)})
    out = integer_keys(frame)
    converted = all(writes_itself(t) for t in texts)
    assert out[key].dtype == (pl.Int64 if converted else pl.String)
    assert out[key].cast(pl.String).to_list() == texts
    assert out.drop(key).equals(frame.drop(key))
