"""Measurement: the runs grid and its schema, statistics, the speculative cost model, adjacent-step similarity.

Modules: schema (the runs columns), runs (the grid, the one producer of runs frames), stats, cost, adjacent.
Nothing here imports mrp_repro.report (tables, figures and claims read what this package measures).
"""
