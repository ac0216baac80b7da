"""Point labels that each read as their own point's: placed clear of markers, labels, leader lines and insets,
merged where points are one spot on screen, kept inside their panel, and the checks a figure is held to.

    from mrp_repro.report import plots_labels
    plots_labels.fit_labels(ax)                                    # widen the limits until every label is inside
    plots_labels.drop_overlapping_labels(ax, keep=lambda t: t.startswith("K="), merge=pareto._merge_tau_labels)
    plots_labels.labels_outside(ax)            # labels past the frame (none in a good figure)
    plots_labels.labels_off_their_point(ax)    # labels nearer another point's marker than their own
    plots_labels.leaders_tangled(ax)           # leader lines across one another, or a label on another's line

Call them once the figure's layout is final (they measure text on screen). matched_speed.png (report.pareto) is the
figure they were written for: cold reads of it found every rule here (docs/tables-figures-notebooks.md).
"""

from __future__ import annotations

import math

import numpy as np

from mrp_repro.report.plots_base import _marker_artists

__all__ = ["NEAR_PX", "LEADER_CLEAR_PT", "RING_ANGLES", "text_extent", "drop_overlapping_labels", "fit_labels",
           "labels_outside", "labels_off_their_point", "leaders_tangled"]  # fmt: skip


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
        clash = conflicts(text_extent(t, renderer), mine_pts) != 0
        if clash and t.anncoords == "offset points":
            found = best(t, None, mine_pts, origin, far=is_kept)
            place = found[2] if found is not None and (found[0] == 0 or is_kept) else None
            if place is None and not is_kept:
                t.remove()
                removed += 1
                continue
        elif clash and not is_kept:
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
