"""The one look of every figure and the checks every figure is held to: theme, palette, saving, legends.

    from mrp_repro.report import plots_base
    plots_base.save_figure(fig, profile, "speedup")      # figures/<profile>/speedup.{png,pdf}
    plots_base.legend_points(fig)                         # legend entry -> finite points drawn (0: an empty series)
    plots_base.hidden_markers(fig)                        # markers drawn exactly over others (none in a good figure)
    dx = plots_base.side_by_side_offsets({"a": [(1, 2), (3, 4)], "b": [(1, 2)]}, step=8)  # {"a": [-4, 0], "b": [4]}
    plots_base.shift(ax, ax.errorbar([1], [2]), dx["a"][0])                 # a's marker at (1, 2) drawn 4 points left

The figures themselves: report.plots_speed (speculative, speedup, lookahead, kernels), report.plots_remask
(remasking, trajectory), report.plots_training (training curves, adjacent-step similarity), report.peers (MRP beside
its peers); report.plots names them all. Each figure draws every series its table holds, reads its columns by exact
name (a missing one is a KeyError naming it: _need), refuses a table with more than one row per series point instead
of blending them (_unique), and never draws an empty panel. One seaborn theme, the colour-blind palette.
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
           "hidden_markers", "drop_overlapping_labels", "fit_labels", "labels_outside", "labels_off_their_point",
           "text_extent", "NESTED_PREFIX",
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
NESTED_KEY = "two series at one point: the later one's marker hollow and larger, around the other"


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


def _gap(box, p) -> float:
    """Distance (display units) from point p to the box, 0 inside it."""
    return float(np.hypot(max(box.x0 - p[0], 0, p[0] - box.x1), max(box.y0 - p[1], 0, p[1] - box.y1)))


def text_extent(t, renderer):
    """The display box of an annotation's text alone (Annotation.get_window_extent adds its leader line's)."""
    from matplotlib.text import Annotation, Text

    if isinstance(t, Annotation):
        t.update_positions(renderer)  # where Annotation.get_window_extent places its text before measuring
    return Text.get_window_extent(t, renderer)


#: two labelled points closer than this on screen (pixels, about one marker across) are one spot: one label names
#: both (drop_overlapping_labels' merge); at 25 a range named points drawn apart (τ=0.35 18 px from τ=0.3)
NEAR_PX = 12.0


#: the directions a kept label's leader places are tried in (radians): the diagonals first, then the axes, then the
#: directions between
RING_ANGLES = tuple(math.radians(d) for d in (45, -45, 135, -135, 0, 180, 90, -90, 22.5, -22.5, 157.5, -157.5, 67.5,
                                             -67.5, 112.5, -112.5))  # fmt: skip
#: the clear margin (points) between a label drawn with a leader line and any other point's marker
LEADER_CLEAR_PT = 6.0


def drop_overlapping_labels(ax, keep=None, merge=None) -> int:
    """Place `ax`'s annotations (in the order they were added) so that each reads as its own point's: inside the
    panel, over no label placed before it nor an inset, off every marker, and nearer its own point than any other
    point's marker (a label nearer another marker was read as that point's: matched_speed's "τ=0.35" on τ=0.3's ●,
    "K=1" on direct(3,4)'s ▲). First the labels of points that are one spot on screen (within NEAR_PX of the spot's
    first point) become one: `merge(first, other)` gives its text (None: unchanged), so the spot names every point at
    it ("τ=0.25" and "τ=0.3" become "τ=0.25…0.3"). The annotations for which `keep(text)` is true are placed first
    and never removed (matched_speed: every direct(K) and static). A label stays where it was put if that place
    qualifies, else (in offset points) goes to the first place that does a line above or below, or mirrored to the
    left of its point; a kept label may also go further out, with a thin grey leader line to its point that passes
    no other marker and no label, and where no place qualifies it takes the place read against fewest markers
    (`conflicts`; else stays). A label that no place holds is removed: its point is left unlabelled rather than
    named by another point's label. Call it after the figure's layout is final. -> how many were removed."""
    from matplotlib.text import Annotation

    renderer = ax.figure.canvas.get_renderer()
    labels = [c for c in ax.get_children() if isinstance(c, Annotation) and c.get_visible()]
    firsts = {id(t) for t in labels if keep is not None and keep(t.get_text())}
    px = ax.figure.dpi / 72.0
    # every marker drawn in the panel: display centre and half its size as a radius
    marks = [(np.asarray(xy, float), 0.5 * size * px) for _, pts, size, _, _ in _marker_artists(ax) for xy in pts]
    insets = [c.get_tightbbox(renderer) for c in ax.child_axes]  # an inset (title, ticks) hides what is under it
    a = ax.bbox
    removed = 0
    named: dict[int, list] = {}  # a label -> the display points it names (its own and those merged into it)
    for t in labels:
        if t.xycoords == "data":
            named[id(t)] = [ax.transData.transform(t.xy)]
    spots: list = []  # the first label of each spot
    for t in [t for t in labels if id(t) not in firsts]:
        own = named.get(id(t), [None])[0]
        spot = next((k for k in spots if own is not None and np.hypot(*(named[id(k)][0] - own)) <= NEAR_PX), None)
        if spot is None:
            spots.append(t)
            continue
        if merge is not None and (text := merge(spot.get_text(), t.get_text())) is not None:
            spot.set_text(text)
        named[id(spot)].append(own)
        t.remove()
        removed += 1
    boxes: dict[int, object] = {}  # label number -> its text box, for the labels placed so far (measured once)
    leaders: dict[int, tuple] = {}  # label number -> (text centre, point) of a placed label's leader line (display)

    def conflicts(box, mine_pts, leader: bool = False, skip: int | None = None) -> int | None:
        """None where the label may not go (outside the panel, over a label or an inset), else a count of what it
        would be read against: 2 per marker under the text (its own spot's too: a range's last digit under a square
        read as another number) or nearer the text than its own point (without a leader line, which names its
        point) and per leader line under the text, 1 per marker, label or leader line its own leader crosses.
        skip: a placed label left out (the one being moved)."""
        if not (a.x0 <= box.x0 and box.x1 <= a.x1 and a.y0 <= box.y0 and box.y1 <= a.y1):
            return None
        others = [b for k, b in boxes.items() if k != skip]
        lines = [ln for k, ln in leaders.items() if k != skip]
        if any(box.overlaps(k) for k in others) or any(box.overlaps(i) for i in insets):
            return None
        own = mine_pts[0] if mine_pts else None
        mine = 0.0 if leader or own is None else _gap(box, own)
        n = 0  # a marker under or nearest the text counts twice a line crossed: it is what misnames a label
        for p, r in marks:
            at_own = any(np.abs(p - q).max() <= 1 for q in mine_pts)
            # a text beside another marker reads as its label even with a leader line to its own (matched_speed:
            # "K=1" by static's ring): that needs a clear margin, LEADER_CLEAR_PT
            n += 2 * (_gap(box, p) <= (0.8 * r if at_own else
                                       max(r + (LEADER_CLEAR_PT * px if leader else 0), mine + 2 * px)))
        # a text over another label's leader line reads as naming that line's point (matched_speed: "K=2" on
        # static's line), and two crossing lines swap their points to the eye
        n += 2 * sum(_segment_meets_box(c, q, box) for c, q in lines)
        if leader and own is not None:  # the line from the text's centre to its point
            c = _centre(box)
            n += sum(_segments_cross(c, own, c2, q) for c2, q in lines)
            n += sum(_segment_meets_box(c, own, b) for b in others)
            seg = [c + f * (own - c) for f in np.linspace(0.15, 0.9, 16)]
            n += sum(any(np.hypot(*(q - p)) <= r + px for q in seg) for p, r in marks if np.abs(p - own).max() > 1)
        return n

    def places(origin, box, far: bool) -> list[tuple[float, float, bool]]:
        """(dx, dy, leader) in points: near its point (a line up or down, mirrored left), then further out."""
        dx, dy = origin
        line, width = box.height / px, box.width / px
        left = -dx - width  # the same gap, on the point's other side
        near = [(x, dy + k * line, False) for x in (dx, left) for k in (0, 1.2, -1.2)]
        if not far:
            return near
        ring = [(math.cos(u) * r, math.sin(u) * r - 0.5 * line, True) for r in np.arange(2.5, 9.0, 1.5) * line
                for u in RING_ANGLES]  # fmt: skip
        return near + [(x - (width if x < 0 else 0), y, lead) for x, y, lead in ring]

    def best(t, i, mine_pts, origin, far: bool):
        """(conflicts, order, (dx, dy, leader)) of t's best place with label i left out: the first read against
        nothing, else the one read against least (on ties, the first); None where no place may take it. t stays
        where it was."""
        at, scored = t.xyann, []
        for j, (x, y, lead) in enumerate(places(origin, text_extent(t, renderer), far)):
            t.xyann = (x, y)
            n = conflicts(text_extent(t, renderer), mine_pts, lead, skip=i)
            if n == 0:
                scored = [(0, j, (x, y, lead))]
                break
            if n is not None:
                scored.append((n, j, (x, y, lead)))
        t.xyann = at
        return min(scored, default=None)

    def put(t, i, mine_pts, place=None):
        """Record t as placed label i, moved to `place` first (a leader place draws its line: _with_leader)."""
        if place is not None:
            x, y, lead = place
            t.xyann = (x, y)
            if lead and t.arrow_patch is None:
                t = _with_leader(ax, t)
        boxes[i] = text_extent(t, renderer)
        leaders.pop(i, None)
        if t.arrow_patch is not None and mine_pts:
            leaders[i] = (_centre(boxes[i]), mine_pts[0])
        return t

    kept: dict[int, tuple] = {}  # a kept label's number -> (the label, its points, where it was put)
    for i, t in enumerate([t for t in labels if id(t) in firsts] + spots):
        mine_pts = named.get(id(t), [])
        is_kept = id(t) in firsts
        origin = t.xyann
        place = None
        if conflicts(text_extent(t, renderer), mine_pts) != 0 and t.anncoords == "offset points":
            found = best(t, None, mine_pts, origin, far=is_kept)
            place = found[2] if found is not None and (found[0] == 0 or is_kept) else None
            if place is None and not is_kept:
                t.remove()
                removed += 1
                continue
        elif conflicts(text_extent(t, renderer), mine_pts) != 0 and not is_kept:
            t.remove()
            removed += 1
            continue
        t = put(t, i, mine_pts, place)
        if is_kept and t.anncoords == "offset points":
            kept[i] = (t, mine_pts, origin)
    # a kept label placed early took its place before the later ones drew their lines (chain-code's K=1 line across
    # K=2's and K=3's): each one read against something is placed again, every other label where it is
    for _ in range(2):
        for i, (t, mine_pts, origin) in kept.items():
            now = conflicts(boxes[i], mine_pts, t.arrow_patch is not None, skip=i)
            if now == 0:
                continue
            again = best(t, i, mine_pts, origin, far=True)
            if again is not None and (now is None or again[0] < now):
                kept[i] = (put(t, i, mine_pts, again[2]), mine_pts, origin)
    return removed


def _centre(box) -> np.ndarray:
    return np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])


def _segments_cross(p1, p2, q1, q2) -> bool:
    """Whether segments p1-p2 and q1-q2 (display points) cross (a shared end point does not count)."""
    def side(a, b, c):
        return np.sign((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))

    return bool(side(p1, p2, q1) * side(p1, p2, q2) < 0 and side(q1, q2, p1) * side(q1, q2, p2) < 0)


def _segment_meets_box(p, q, box) -> bool:
    """Whether segment p-q (display points; a leader line, its ends shortened as drawn) passes through box."""
    pts = [p + f * (q - p) for f in np.linspace(0.15, 0.9, 16)]
    return any(box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1 for x, y in pts)


def _with_leader(ax, t):
    """The annotation t again, with a thin grey line from its text to its point (a label moved away from it)."""
    kw = dict(xycoords=t.xycoords, textcoords=t.anncoords, fontsize=t.get_fontsize(), zorder=t.get_zorder(),
              path_effects=t.get_path_effects(), color=t.get_color(), ha=t.get_horizontalalignment(),
              va=t.get_verticalalignment())  # fmt: skip
    new = ax.annotate(t.get_text(), t.xy, xytext=t.xyann, arrowprops=dict(arrowstyle="-", lw=0.6, color="0.45",
                                                                          shrinkA=1, shrinkB=3), **kw)  # fmt: skip
    t.remove()
    return new


def _labels_in_view(ax) -> list:
    """ax's visible annotations placed at a data point inside its current limits (matplotlib draws no other)."""
    from matplotlib.text import Annotation

    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    return [c for c in ax.get_children() if isinstance(c, Annotation) and c.get_visible() and c.xycoords == "data"
            and x0 <= c.xy[0] <= x1 and y0 <= c.xy[1] <= y1]  # fmt: skip


def leaders_tangled(ax) -> list[str]:
    """The texts of ax's labels with a leader line (an annotation drawn with an arrow) whose line crosses another's,
    or whose text sits on another's line: either reads as naming the other's point (matched_speed: "K=2" on
    static's line, K=1's line across K=2's and K=3's)."""
    renderer = ax.figure.canvas.get_renderer()
    led = [t for t in _labels_in_view(ax) if t.arrow_patch is not None]
    geo = []
    for t in led:
        b = text_extent(t, renderer)
        geo.append((t.get_text(), b, np.array([(b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2]), ax.transData.transform(t.xy)))
    out = []
    for i, (text, box, c, p) in enumerate(geo):
        others = geo[:i] + geo[i + 1 :]
        if any(_segments_cross(c, p, c2, p2) or _segment_meets_box(c2, p2, box) for _, _, c2, p2 in others):
            out.append(text)
    return out


def labels_outside(ax, pad_px: float = 1.0) -> list[str]:
    """The texts of ax's annotations (in view) that are drawn past its frame by more than pad_px: a label there
    prints into the next panel or under the tick labels (matched_speed's τ labels at a panel's right edge)."""
    renderer = ax.figure.canvas.get_renderer()
    a = ax.bbox
    out = []
    for t in _labels_in_view(ax):
        b = text_extent(t, renderer)
        if b.x0 < a.x0 - pad_px or b.x1 > a.x1 + pad_px or b.y0 < a.y0 - pad_px or b.y1 > a.y1 + pad_px:
            out.append(t.get_text())
    return out


def labels_off_their_point(ax) -> list[str]:
    """The texts of ax's annotations (in view, without a leader line) drawn nearer the marker of a point beyond
    NEAR_PX of their own than their own point: read as that point's label (matched_speed's "τ=0.35" on τ=0.3's
    marker). Markers within NEAR_PX are not counted: a merged label names the points of its spot."""
    renderer = ax.figure.canvas.get_renderer()
    marks = [np.asarray(xy, float) for _, pts, _, _, _ in _marker_artists(ax) for xy in pts]
    out = []
    for t in _labels_in_view(ax):
        if t.arrow_patch is not None:
            continue
        b, own = text_extent(t, renderer), ax.transData.transform(t.xy)
        if any(_gap(b, p) < _gap(b, own) for p in marks if np.hypot(*(p - own)) > NEAR_PX):
            out.append(t.get_text())
    return out


def fit_labels(ax, pad_px: float = 3.0, rounds: int = 3) -> None:
    """Widen ax's limits until every annotation in view is drawn inside its frame (pad_px clear of it): each label's
    overhang past a side, in pixels, is a share of the axes' width (height) that its point must sit inside by, which
    sets that side's limit (in the axis' scale: linear or log). A few rounds, since widening one side moves every
    point; labels whose own size exceeds the axes are left as they are. Call it after the layout is final."""
    renderer = ax.figure.canvas.get_renderer()
    for _ in range(rounds):
        a = ax.bbox
        moved = False
        for axis, (lo_px, size) in (("x", (a.x0, a.width)), ("y", (a.y0, a.height))):
            scale = ax.get_xscale() if axis == "x" else ax.get_yscale()
            f, finv = (np.log10, lambda u: 10.0**u) if scale == "log" else (float, float)
            lim = ax.get_xlim() if axis == "x" else ax.get_ylim()
            lo, hi = f(lim[0]), f(lim[1])
            new_lo, new_hi = lo, hi
            for t in _labels_in_view(ax):
                b = text_extent(t, renderer)
                p = ax.transData.transform(t.xy)[0 if axis == "x" else 1]  # the point, display px
                u = f(t.xy[0] if axis == "x" else t.xy[1])
                before = p - (b.x0 if axis == "x" else b.y0) + pad_px  # the label's reach below/left of its point
                after = (b.x1 if axis == "x" else b.y1) - p + pad_px  # and above/right of it
                if p - before < lo_px and before < size:  # the point must sit at least before/size into the axes
                    s = before / size
                    new_lo = min(new_lo, (u - s * new_hi) / (1 - s))
                if p + after > lo_px + size and after < size:
                    s = after / size
                    new_hi = max(new_hi, new_lo + (u - new_lo) / (1 - s))
            if (new_lo, new_hi) != (lo, hi):
                moved = True
                (ax.set_xlim if axis == "x" else ax.set_ylim)(finv(new_lo), finv(new_hi))
        if not moved:
            return


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

