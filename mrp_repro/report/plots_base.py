"""The one look of every figure and the checks every figure is held to: theme, palette, saving, legends.

    from mrp_repro.report import plots_base
    plots_base.save_figure(fig, profile, "speedup")      # figures/<profile>/speedup.{png,pdf}
    plots_base.legend_points(fig)                         # legend entry -> finite points drawn (0: an empty series)
    plots_base.hidden_markers(fig)                        # markers drawn exactly over others (none in a good figure)
    dx = plots_base.side_by_side_offsets({"a": [(1, 2), (3, 4)], "b": [(1, 2)]}, step=8)  # {"a": [-4, 0], "b": [4]}
    plots_base.shift(ax, ax.errorbar([1], [2]), dx["a"][0])                 # a's marker at (1, 2) drawn 4 points left

The figures themselves: report.plots_speed (speculative, speedup, lookahead, kernels), report.plots_remask
(remasking, trajectory), report.plots_training (training curves, adjacent-step similarity), report.peers (MRP beside
its peers); report.plots names them all; point labels: report.plots_labels. Each figure draws every series its table
holds, reads its columns by exact name (a missing one is a KeyError naming it: _need), refuses a table with more than
one row per series point instead of blending them (_unique), and never draws an empty panel. One seaborn theme, the
colour-blind palette.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from mrp_repro.measure.schema import require
from mrp_repro.report.tables import out_dir

__all__ = ["PALETTE", "LABELS", "set_theme", "save_figure", "legend_points", "nest_coincident_markers",
           "GATE_FAILED_LABEL", "GATE_UNCHECKED_LABEL", "mark_clock_gates",
           "hidden_markers", "NESTED_PREFIX", "NESTED_KEY",
           "side_by_side_offsets", "shift"]  # fmt: skip


PALETTE = "colorblind"
LABELS = {
    "threshold": "confidence threshold τ",
    "accuracy": "accuracy (%)",
    "lookahead_k": "lookahead K",
    "distance": "step distance",
    "kl_median": "median KL(next ‖ current), nats",
    "top1_agreement": "top-1 agreement",
    "throughput_speedup": "speedup over static (×, wall clock)",
}


def set_theme() -> None:
    """The one look of every figure: seaborn whitegrid, colour-blind palette, readable font sizes."""
    sns.set_theme(style="whitegrid", palette=PALETTE, context="notebook", font_scale=1.0)
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 150, "savefig.bbox": "tight", "axes.titlesize": 11})


def _colors(n: int) -> list:
    """n colours, all distinct: the palette's own up to its size (it cycles beyond: two series of one figure shared a
    colour, e.g. dynamic(τ) and WINO in peers.png), tab20's up to 20, then evenly spaced hues."""
    if n <= len(sns.color_palette(PALETTE)):
        return sns.color_palette(PALETTE, max(n, 1))
    return sns.color_palette("tab20", n) if n <= 20 else sns.color_palette("husl", n)


def _need(df: pd.DataFrame, cols, what: str) -> None:
    require(df, cols, what)
    if df.empty:
        raise ValueError(f"{what}: the table is empty; nothing to draw")


def _unique(df: pd.DataFrame, keys: list[str], what: str) -> None:
    """One row per series point, or a ValueError naming the duplicated point (never blend rows)."""
    dup = df.duplicated(keys, keep=False)
    if dup.any():
        point = df.loc[dup, keys].iloc[0].to_dict()
        raise ValueError(f"{what}: more than one row for {point}; select one row per {keys} first")


def _yerr(df: pd.DataFrame, col: str):
    lo = (df[col] - df[f"{col}_lo"]).clip(lower=0).to_numpy()
    hi = (df[f"{col}_hi"] - df[col]).clip(lower=0).to_numpy()
    return np.vstack([lo, hi])


def save_figure(fig, profile_or_dir, name: str) -> list[Path]:
    """Write `fig` as <dir>/<name>.png and .pdf; returns both paths."""
    from mrp_repro.integrity import atomic_file

    d = out_dir(profile_or_dir)
    paths = []
    for ext in ("png", "pdf"):
        p = d / f"{name}.{ext}"
        with atomic_file(p) as tmp:  # renamed into place: a link at p is replaced, never written through
            fig.savefig(tmp, format=ext)
        paths.append(p)
    return paths


def _paper_benchmark(g: pd.DataFrame) -> str:
    """The paper's benchmark of our rows `g` (their paper_benchmark column, else report.paper.BENCHMARK_MAP)."""
    from mrp_repro.report.paper import BENCHMARK_MAP

    if "paper_benchmark" in g and g["paper_benchmark"].notna().any():
        return str(g["paper_benchmark"].dropna().iloc[0])
    return BENCHMARK_MAP.get(str(g["benchmark"].iloc[0]), "")


def _legend_below(fig, axes, ncol: int = 4) -> None:
    """One legend for every axis, below the panels (never over a line or a label), each label once."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, h)
    rows = math.ceil(len(seen) / ncol)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=ncol, frameon=False, fontsize=8)
    # the legend's height in inches (8 pt rows), as a share of this figure's height: a figure of several rows
    # of panels would otherwise give it far more room than it needs
    bottom = min((0.19 * rows + 0.12) / fig.get_size_inches()[1], 0.5)
    fig.tight_layout(rect=(0, bottom, 1, 1))


def _legend_under_ticks(ax, ncol: int) -> None:
    """`ax`'s legend below its (rotated, long) x tick labels, placed from their drawn extent: a fixed offset in
    axes units collides with them whenever the labels are longer than it assumed (the upstream settings)."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in [*ax.get_xticklabels(), ax.xaxis.label] if t.get_text()]
    low = min((b.y0 for b in boxes), default=ax.get_window_extent(renderer).y0)
    pad = 4 * fig.dpi / 72  # 4 pt under the lowest label
    _, y = ax.transAxes.inverted().transform((0, low - pad))
    ax.legend(frameon=False, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, y), ncol=ncol)


_MARKERLESS = ("", "None", "none", " ", None, "_", "|")


def _marker_lines(ax) -> list:
    """The axis' lines that draw markers (not error-bar caps), in drawing order (zorder, then insertion)."""
    lines = [ln for ln in ax.get_lines() if ln.get_marker() not in _MARKERLESS and ln.get_visible()]
    return sorted(lines, key=lambda ln: ln.get_zorder())  # stable: insertion order within a zorder


def _data(ln) -> tuple[np.ndarray, np.ndarray]:
    """(every (x, y) of `ln`, whether a marker is drawn there: finite, and in its markevery mask if it has one)."""
    x, y = np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float)
    if x.size != y.size:
        return np.zeros((0, 2)), np.zeros(0, bool)
    xy = np.stack([x, y], 1)
    shown = np.isfinite(xy).all(1)
    every = ln.get_markevery()
    if every is not None and np.ndim(every) == 1 and len(every) == len(xy) and np.asarray(every).dtype == bool:
        shown &= np.asarray(every, bool)
    return xy, shown


def _on_screen(transform, xy: np.ndarray) -> np.ndarray:
    """Where points `xy` are drawn (display units) through the artist's `transform`: two markers coincide where they
    are drawn, so a series drawn sideways (shift) no longer sits on the point it shares in data."""
    return transform.transform(xy) if len(xy) else np.zeros((0, 2))


def _points(ln) -> np.ndarray:
    """Where `ln` draws a marker (display units; its markevery mask applied)."""
    xy, shown = _data(ln)
    return _on_screen(ln.get_transform(), xy[shown])


def shift(ax, artists, dx_points: float) -> None:
    """Draw `artists` (drawn on `ax` in data units: a line, an errorbar container) `dx_points` typographic points
    sideways, beside the x they are at (side_by_side_offsets). Called after drawing them, so the axis' data limits
    are their data's (drawn through a moved transform, autoscaling read nothing of them)."""
    from matplotlib.container import Container
    from matplotlib.transforms import ScaledTranslation

    if dx_points == 0:
        return
    moved = ax.transData + ScaledTranslation(dx_points / 72.0, 0.0, ax.figure.dpi_scale_trans)
    for a in artists.get_children() if isinstance(artists, Container) else [artists]:
        a.set_transform(moved)


def side_by_side_offsets(points: dict, step: float) -> dict:
    """Sideways offsets (points), one per point of each series, for the points several series share exactly: the
    series (keys, in order; values: their (x, y) points) sitting on one point are spread `step` apart, symmetric
    around it, in key order; every other point keeps 0, so a series moves only where another sits on it (peers.png:
    rules delta, loo and logp-delta revoke nothing at chain-math's τ 0.6-0.9, one point for the three at each τ;
    shifting whole series moved tau's own 100% point 0.75 TPF off its value)."""
    keys = list(points)
    pts = {k: [(float(x), float(y)) for x, y in points[k]] for k in keys}
    members: dict[tuple, list] = {}
    for k in keys:
        for xy in dict.fromkeys(xy for xy in pts[k] if math.isfinite(xy[0]) and math.isfinite(xy[1])):
            members.setdefault(xy, []).append(k)
    at = {xy: {k: (j - (len(ks) - 1) / 2) * step for j, k in enumerate(ks)} for xy, ks in members.items()}
    return {k: [at.get(xy, {}).get(k, 0.0) for xy in pts[k]] for k in keys}


def _coincide(a: np.ndarray, b: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Per point of a: whether some point of b is the same point (within tol, relative to the values' scale)."""
    if not len(a) or not len(b):
        return np.zeros(len(a), bool)
    d = np.abs(a[:, None, :] - b[None, :, :]) <= tol * np.maximum(1.0, np.abs(a[:, None, :]))
    return d.all(-1).any(1)


def _shared(a: np.ndarray, b: np.ndarray, tol: float = 1e-9) -> bool:
    """Whether some point of a and some point of b coincide (within tol, relative to the values' scale)."""
    return bool(_coincide(a, b, tol).any())


#: the label prefix of the hollow markers nest_coincident_markers adds (never a legend entry)
NESTED_PREFIX = "_nested: "
#: the legend entry a figure gives its nested markers (legend_points counts the overlays under it)
NESTED_KEY = "series at one point: each later one's marker hollow and larger, around the ones before"


def nest_coincident_markers(ax) -> None:
    """Where a line's marker would sit on an earlier line's (same point), draw that one marker hollow and larger
    than every marker it covers, above them (an overlay line labelled NESTED_PREFIX + the series' label, the line's
    own marker hidden there by markevery): the markers nest instead of hiding one another, and the series keeps its
    own filled markers at every other point (hollowing a whole series made two of our rules look like a hollow-marker
    peer in peers.png)."""
    drawn = []
    for ln in _marker_lines(ax):
        if ln.get_label().startswith(NESTED_PREFIX):
            continue
        xy, shown = _data(ln)  # a second call sees the first one's overlays, not the markers it hid
        at = _on_screen(ln.get_transform(), xy)
        covered, under = np.zeros(len(xy), bool), []
        for o in drawn:
            on = _coincide(at, _points(o)) & shown
            if on.any():
                covered |= on
                under.append(o)
        if under:
            size = max(ln.get_markersize(), *(o.get_markersize() for o in under))
            ln.set_markevery(list(shown & ~covered))
            (over,) = ax.plot(xy[covered, 0], xy[covered, 1], ls="none", marker=ln.get_marker(), mfc="none",
                              transform=ln.get_transform(),
                              mec=ln.get_markeredgecolor() if ln.get_markerfacecolor() == "none" else ln.get_color(),
                              mew=max(ln.get_markeredgewidth(), 1.5), ms=size + 2.5,
                              zorder=max(ln.get_zorder(), *(o.get_zorder() for o in under)) + 0.1,
                              label=NESTED_PREFIX + ln.get_label())  # fmt: skip
            drawn.append(over)
        drawn.append(ln)


def _marker_artists(ax) -> list[tuple[str, np.ndarray, float, bool, bool]]:
    """(label, points, marker size in points, hollow, faceless) of every line and scatter of `ax` that draws
    markers, in drawing order (zorder, then insertion). A scatter's size is sqrt(s); hollow: transparent faces;
    faceless: a marker of strokes only (×, +: a path that never closes), which covers nothing."""
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.markers import MarkerStyle
    from matplotlib.path import Path as MplPath

    lines = set(_marker_lines(ax))
    out = []
    for a in sorted(ax.get_children(), key=lambda a: a.get_zorder()):  # stable: insertion order within a zorder
        if a in lines:
            hollow = str(a.get_markerfacecolor()) == "none"
            faceless = not MarkerStyle(a.get_marker()).is_filled()
            out.append((a.get_label(), _points(a), float(a.get_markersize()), hollow, faceless))
        elif isinstance(a, PathCollection) and not isinstance(a, LineCollection) and a.get_visible():
            pts = np.asarray(a.get_offsets(), float).reshape(-1, 2)
            pts = _on_screen(a.get_offset_transform(), pts[np.isfinite(pts).all(1)])
            sizes = np.asarray(a.get_sizes(), float)
            size = float(np.sqrt(sizes.max())) if sizes.size else 0.0
            faces = np.asarray(a.get_facecolors(), float).reshape(-1, 4)
            paths = a.get_paths()
            unfilled = bool(paths) and all(p.codes is None or MplPath.CLOSEPOLY not in p.codes for p in paths)
            hollow = not faces.size or bool((faces[:, 3] == 0).all())
            out.append((a.get_label(), pts, size, hollow, unfilled))
    return out


def hidden_markers(fig) -> list[tuple[str, str]]:
    """(covered, covering) label pairs of markers (lines' and scatters') that one draws exactly over the other in
    `fig`, the later neither faceless (×), nor hollow and larger, nor clearly smaller (under 0.8 of its size: the
    earlier's rim shows around it): a marker the reader cannot see. Empty for a figure where none hides another."""
    out = []
    for ax in fig.axes:
        marks = _marker_artists(ax)
        for i, (la, pa, sa, _, _) in enumerate(marks):
            for lb, pb, sb, hollow, faceless in marks[i + 1:]:
                if _shared(pa, pb) and not faceless and not (hollow and sb > sa) and not sb < 0.8 * sa:
                    out.append((la, lb))
    return out


def _finite_points(artist) -> int:
    """Finite (x, y) points an artist draws: a line's data, a scatter's offsets, an errorbar's data line, a bar
    container's bars (finite heights), a patch's extent, a line collection's segments."""
    from matplotlib.collections import Collection, LineCollection
    from matplotlib.container import BarContainer, ErrorbarContainer
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    def finite(xy) -> int:
        a = np.asarray(xy, float).reshape(-1, 2) if np.size(xy) else np.zeros((0, 2))
        return int(np.isfinite(a).all(axis=1).sum())

    if isinstance(artist, ErrorbarContainer):
        return _finite_points(artist.lines[0]) if artist.lines[0] is not None else 0
    if isinstance(artist, BarContainer):
        return sum(int(np.isfinite(p.get_height()) and np.isfinite(p.get_x())) for p in artist.patches)
    if isinstance(artist, Line2D):
        x, y = np.asarray(artist.get_xdata(), float), np.asarray(artist.get_ydata(), float)
        return int((np.isfinite(x) & np.isfinite(y)).sum()) if x.size == y.size else 0
    if isinstance(artist, LineCollection):
        return sum(finite(seg) for seg in artist.get_segments())
    if isinstance(artist, Collection):
        return finite(artist.get_offsets())
    if isinstance(artist, Rectangle):
        return int(np.isfinite([artist.get_x(), artist.get_y(), artist.get_width(), artist.get_height()]).all())
    return 0


def legend_points(fig) -> dict[str, int]:
    """Every legend entry of `fig` (each axis' legend and the figure's) -> the finite points drawn, over every axis,
    by the artists carrying that label: 0 means the legend names a series the figure does not draw."""
    drawn: dict[str, int] = {}
    for ax in fig.axes:
        inside = {id(a) for c in ax.containers for a in c.get_children()}  # counted through their container
        artists = [*ax.containers, *(a for a in [*ax.lines, *ax.collections, *ax.patches] if id(a) not in inside)]
        for a in artists:
            label = a.get_label()
            label = NESTED_KEY if label.startswith(NESTED_PREFIX) else label
            if label and not label.startswith("_"):
                drawn[label] = drawn.get(label, 0) + _finite_points(a)
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    names = [t.get_text() for leg in legends if leg is not None for t in leg.get_texts()]
    return {n: drawn.get(n, 0) for n in names}


#: the legend entries of a wall-clock number whose clock gate (report.wallclock) did not pass: a sanity check failed
#: (clock_gate "failed: ..."), or none was made (clock_gate "unchecked: ...", not re-timed by the repeated passes)
GATE_FAILED_LABEL = "× clock gate failed (a sanity check failed)"
GATE_UNCHECKED_LABEL = "◇ clock unchecked (not re-timed by the repeated passes: its CI is over prompts only)"


def mark_clock_gates(ax, x, y, gates, size: float = 30, zorder: float = 7, lw: float = 1.4) -> dict[str, int]:
    """Mark each wall-clock point (x, y) whose gate did not pass: a red × where a check failed, a grey hollow diamond
    where none was made (not a ring: matched_speed's hollow rings are the settings off the frontier); a passed gate
    or the reference (schema.CLOCK_TRUSTED) and a blank gate get none. -> marks per label."""
    from mrp_repro.measure.schema import CLOCK_TRUSTED

    g = pd.Series(list(gates), dtype=object).fillna("").astype(str).to_numpy()
    x, y = np.asarray(x, float), np.asarray(y, float)
    failed = np.char.startswith(g.astype(str), "failed")
    unchecked = ~failed & (g != "") & ~np.isin(g, CLOCK_TRUSTED)
    out = {}
    for mask, label, style in ((failed, GATE_FAILED_LABEL, dict(marker="x", color="crimson", lw=lw + 0.4)),
                               (unchecked, GATE_UNCHECKED_LABEL, dict(marker="D", facecolors="none",
                                                                      edgecolors="0.35", lw=lw))):  # fmt: skip
        if mask.any():
            ax.scatter(x[mask], y[mask], s=size, zorder=zorder, label=label, **style)
            out[label] = int(mask.sum())
    return out

