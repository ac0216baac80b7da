"""Every figure of the reproduction, by one name: the notebooks' import (the figures live in the modules below).

    from mrp_repro.report import paper, plots
    fig = plots.plot_lookahead(paper.lookahead_table(runs))
    plots.save_figure(fig, profile, "lookahead")          # figures/<profile>/lookahead.{png,pdf}

Nothing is defined here; each name is its module's:
- report.plots_base: the theme, save_figure, and the checks every figure is held to (legend_points, hidden_markers,
  nest_coincident_markers);
- report.plots_training: plot_adjacent, plot_adjacent_relative, plot_training_curve;
- report.plots_speed: plot_speculative, plot_speedup (at_batch, speedup_controls), plot_lookahead, plot_kernels;
- report.plots_remask: plot_remasking (remasking_controls), plot_trajectory;
- report.pareto: plot_matched_speed; report.peers: plot_peers; report.ablations: plot_axis.
Tables: mrp_repro.report.tables.
"""

from __future__ import annotations

from mrp_repro.report.plots_base import (
    GATE_FAILED_LABEL,
    GATE_UNCHECKED_LABEL,
    LABELS,
    PALETTE,
    hidden_markers,
    legend_points,
    nest_coincident_markers,
    save_figure,
    set_theme,
)
from mrp_repro.report.plots_remask import plot_remasking, plot_trajectory, remasking_controls
from mrp_repro.report.plots_speed import (
    CONTROL_DRAFTER,
    SPEEDUP_COLUMNS,
    at_batch,
    plot_kernels,
    plot_lookahead,
    plot_speculative,
    plot_speedup,
    speedup_controls,
)
from mrp_repro.report.plots_training import plot_adjacent, plot_adjacent_relative, plot_training_curve

__all__ = [
    "PALETTE", "LABELS", "set_theme", "save_figure", "legend_points", "nest_coincident_markers", "hidden_markers",
    "plot_adjacent", "plot_adjacent_relative", "plot_training_curve", "plot_remasking", "remasking_controls",
    "plot_trajectory", "plot_lookahead", "plot_speculative", "plot_speedup", "at_batch", "speedup_controls",
    "plot_kernels", "CONTROL_DRAFTER", "SPEEDUP_COLUMNS", "GATE_FAILED_LABEL", "GATE_UNCHECKED_LABEL",
]  # fmt: skip
