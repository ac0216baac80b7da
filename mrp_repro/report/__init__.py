"""Reporting: the paper's numbers and our tables (paper), the table writer (tables), figures (plots), claims.

Reads runs frames in the schema of mrp_repro.measure.schema by exact column name.
"""
