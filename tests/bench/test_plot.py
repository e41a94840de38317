"""The plot's pure parts and its skip paths (`pytest tests/bench/test_plot.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.bench import plot


def test_percentile_interpolates_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100, shuffled order must not matter
    values.reverse()
    assert plot.percentile(values, 50) == pytest.approx(50.5)
    assert plot.percentile(values, 0) == 1.0
    assert plot.percentile(values, 100) == 100.0
    assert plot.percentile(values, 99.9) == pytest.approx(99.901)
    assert plot.percentiles([7.0]) == [7.0, 7.0, 7.0, 7.0]


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no samples"):
        plot.percentile([], 50)


def test_binned_gives_the_median_of_each_live_count_bin() -> None:
    points = [(0, 5.0), (1, 7.0), (2, 6.0), (10, 9.0), (11, 11.0), (35, 1.0)]
    assert plot.binned(points, 10) == [(4.5, 6.0), (14.5, 10.0), (34.5, 1.0)]


def test_record_accumulates_per_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plot, "SAMPLES", plot.Samples())
    plot.record_latency("router", [1.0, 2.0])
    plot.record_latency("router", [3.0])
    plot.record_spawns("daemon", [(0, 4.0)])
    assert plot.SAMPLES.latency_us == {"router": [1.0, 2.0, 3.0]}
    assert plot.SAMPLES.spawns_ms == {"daemon": [(0, 4.0)]}


def test_no_samples_skips_the_plot(tmp_path: Path) -> None:
    out = tmp_path / "p.png"
    assert "plot skipped: no benchmark recorded samples" in plot.write(out, plot.Samples())
    assert not out.exists()


def test_without_matplotlib_the_plot_is_skipped_with_the_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    out = tmp_path / "p.png"
    message = plot.write(out, plot.Samples(latency_us={"bare": [1.0, 2.0]}))
    assert message.startswith("plot skipped: matplotlib is not installed")
    assert "pip install" in message
    assert not out.exists()


def test_png_has_both_panels_even_with_one_series(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    samples = plot.Samples(spawns_ms={"daemon": [(i, 4.0 + i % 3) for i in range(50)]})
    assert plot.write(out, samples) == f"plot written to {out}"
    assert out.read_bytes().startswith(b"\x89PNG")
