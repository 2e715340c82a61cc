"""Pictures of SG sequences (matplotlib, an optional extra, `plot`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.errors import MissingExtra, OutputError
from pipeline.grundy import SGTable, counted_values
from pipeline.io.outputs.whole import whole_file


def require_plotting() -> None:
    """MissingExtra when matplotlib (the plot extra) is not installed: said before any work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtra("--plot", "plot", " (matplotlib)") from None


def plot_sequence(table: SGTable, path: Path, upto: int) -> None:
    """Draw SG(0..upto) as a step plot, shading the preperiod and one period."""
    require_plotting()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    ys = table.sg(np.arange(upto + 1, dtype=np.int64))
    ys = ys[ys >= 0]
    xs = np.arange(ys.shape[0])
    fig, ax = plt.subplots(figsize=(11, 4), dpi=110)
    ax.step(xs, ys, where="mid", color="#1f4e79", linewidth=1.0, label="SG(x)")
    if table.period is not None:
        pre, per = table.preperiod or 0, table.period
        if pre:
            ax.axvspan(-0.5, min(pre, upto) - 0.5, color="#f4b183", alpha=0.35,
                       label=f"preperiod ({pre})")
        if pre <= upto:
            ax.axvspan(pre - 0.5, min(pre + per, upto + 1) - 0.5, color="#a9d18e", alpha=0.45,
                       label=f"one period ({per})")
        title = f"{table.rule.label}: preperiod {pre}, period {per}"
    else:
        title = f"{table.rule.label}: no period found within {counted_values(table.table_len)}"
    ax.set_title(title)
    ax.set_xlabel("heap x")
    ax.set_ylabel("SG(x)")
    ax.set_xlim(-0.5, upto + 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    try:
        with whole_file(path) as temporary:  # a full disk leaves an older picture whole
            fig.savefig(temporary, format="png")
    except OSError as exc:
        raise OutputError(f"{path}: cannot write plot ({exc.strerror})") from None
    finally:
        plt.close(fig)
