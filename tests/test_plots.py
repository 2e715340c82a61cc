"""`grundy --plot`: a real PNG whose pixels show the sequence and the marked regions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app

matplotlib = pytest.importorskip("matplotlib")


def _blend(hex_rgb: str, alpha: float) -> tuple[float, float, float]:
    """A fill colour drawn with `alpha` over white, as matplotlib renders it."""
    rgb = [int(hex_rgb[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return tuple(alpha * c + (1 - alpha) for c in rgb)


PREPERIOD_FILL = _blend("#f4b183", 0.35)
PERIOD_FILL = _blend("#a9d18e", 0.45)


def _near(rgb: np.ndarray, colour: tuple[float, ...], tol: float = 0.03) -> int:
    return int((np.abs(rgb - np.asarray(colour)) < tol).all(axis=-1).sum())


def _pixels(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    return mpimg.imread(path)


def test_plot_marks_preperiod_and_period(tmp_path: Path) -> None:
    # {3, 5, 9}: preperiod 14, period 2 (naive reference in test_grundy/test_run)
    png = tmp_path / "sg.png"
    result = CliRunner().invoke(app, ["grundy", "--moves", "3 5 9", "--upto", "60",
                                      "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = _pixels(png)
    assert img.shape[0] > 300 and img.shape[1] > 800
    rgb = img[..., :3]
    assert _near(rgb, PREPERIOD_FILL) > 5000  # the preperiod band is drawn
    assert _near(rgb, PERIOD_FILL) > 1000  # one period is drawn
    assert _near(rgb, (0.12, 0.31, 0.47), tol=0.15) > 80  # the SG curve (thin, antialiased)


def test_plot_without_period_has_no_bands(tmp_path: Path) -> None:
    png = tmp_path / "sg.png"
    result = CliRunner().invoke(app, ["grundy", "--moves", "3 5 9", "--upto", "60",
                                      "--cap", "20", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "none found within 20 values" in result.output
    rgb = _pixels(png)[..., :3]
    assert _near(rgb, PREPERIOD_FILL) < 50 and _near(rgb, PERIOD_FILL) < 50


def test_plot_to_unwritable_path_is_a_clean_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["grundy", "--moves", "2 5", "--plot", "/proc/sg.png"])
    assert result.exit_code == 1
    assert "cannot write plot" in result.output and "Traceback" not in result.output


def test_a_plot_that_cannot_be_written_whole_leaves_the_old_one(tmp_path: Path) -> None:
    """A write cut short (here a file size limit, as a full disk would) fails cleanly and
    leaves the picture already there whole: the new one goes beside it, then is renamed."""
    import resource
    import signal
    import subprocess
    import sys

    old = tmp_path / "sg.png"
    assert CliRunner().invoke(app, ["grundy", "--moves", "2 5", "--plot", str(old)]
                              ).exit_code == 0
    before = old.read_bytes()

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    script = Path(sys.executable).with_name("snim-batch")
    proc = subprocess.run([str(script), "grundy", "--moves", "1 2 3 4 5 6 7 8 9 10 11 12",
                           "--upto", "100", "--plot", str(old)], capture_output=True,
                          text=True, timeout=120, preexec_fn=small_files)
    assert proc.returncode == 1, proc.stderr
    assert "cannot write plot (File too large)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert old.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sg.png"]


@pytest.mark.parametrize(("given", "shown"), [
    (".", "--plot '.': is a directory (give the PNG file's name)"),
    ("/", "--plot '/': is a directory (give the PNG file's name)"),
    ("DIR", "--plot 'DIR': is a directory (give the PNG file's name)"),
    ("s3://bucket/sg.png", "--plot 's3://bucket/sg.png': takes a local path, not a URL "
                           "(write it locally, then copy it to the store)"),
    ("missing/sg.png", "--plot 'missing/sg.png': its directory does not exist"),
])
def test_a_plot_that_names_no_local_file_is_a_usage_error(tmp_path: Path, monkeypatch,
                                                         given: str, shown: str) -> None:
    """A directory (`.` was an internal error), a URL (drawn into `s3:/bucket/`) or a missing
    directory (found once the table was built) is refused before any work, as the other
    options of local paths are: exit 2."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    result = CliRunner().invoke(app, ["grundy", "--moves", "2 5", "--plot", given])
    assert (result.exit_code, result.stderr) == (2, f"snim-batch: error: {shown}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR"]


def test_a_plot_onto_a_pipe_is_refused_and_through_a_link_replaces_its_target(
        tmp_path: Path, monkeypatch) -> None:
    """A PNG is written whole by a rename over its file: a pipe (as root, a device such as
    /dev/null) is refused before any work, not replaced by a regular file; a symlink stays
    a link and the file it points to gets the picture."""
    import os
    import stat

    monkeypatch.chdir(tmp_path)
    os.mkfifo("fifo")
    result = CliRunner().invoke(app, ["grundy", "--moves", "2 5", "--plot", "fifo"])
    assert (result.exit_code, result.stderr) == (
        2, "snim-batch: error: --plot 'fifo': is a pipe (a named pipe, /dev/stdin piped, "
           "<(...)), not a regular file, and the file is replaced whole, by a rename over it; "
           "name a PNG file\n")
    assert stat.S_ISFIFO(os.lstat("fifo").st_mode)
    (tmp_path / "plots").mkdir()
    Path("latest.png").symlink_to("plots/sg.png")
    result = CliRunner().invoke(app, ["grundy", "--moves", "2 5", "--plot", "latest.png"])
    assert result.exit_code == 0, result.output
    assert Path("latest.png").is_symlink()
    assert (tmp_path / "plots" / "sg.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    Path("dangling.png").symlink_to("nowhere/sg.png")  # its directory: checked before work
    result = CliRunner().invoke(app, ["grundy", "--moves", "2 5", "--plot", "dangling.png"])
    assert (result.exit_code, result.stderr) == (
        2, "snim-batch: error: --plot 'dangling.png': its directory does not exist\n")
