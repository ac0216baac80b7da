"""reproduce.publish_notebook: the browsable executed copy keeps every output, cuts long text, drops the PDF beside
a PNG, and writes no absolute repository path (the copy is the same on every machine)."""

from __future__ import annotations

import json

from mrp_repro.config import repo_root
from mrp_repro.reproduce import MAX_TEXT_CHARS, publish_notebook


def test_publish_keeps_outputs_cuts_long_text_and_paths(tmp_path):
    root = str(repo_root())
    long = "x" * (MAX_TEXT_CHARS + 500)
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"papermill": {"input_path": f"{root}/notebooks/x.ipynb"}},
          "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# t"]},
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": ["print(1)"], "outputs": [
            {"output_type": "stream", "name": "stdout", "text": [f"{root}/figures/tiny\n", long]},
            {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBORw0KGgo=",
                                                                     "application/pdf": "JVBERi0=",
                                                                     "text/plain": ["<Figure>"]}},
            {"output_type": "execute_result", "execution_count": 1, "metadata": {},
             "data": {"text/html": [f"<table><td>{root}</td></table>"], "text/plain": ["short"]}},
        ]},
    ]}  # fmt: skip
    src = tmp_path / "run.ipynb"
    src.write_text(json.dumps(nb))
    out = publish_notebook(src, tmp_path / "pub" / "05_x.ipynb")
    got = json.loads(out.read_text())
    outs = got["cells"][1]["outputs"]
    assert len(outs) == 3 and got["cells"][1]["execution_count"] == 1
    text = outs[0]["text"]
    assert text.startswith("./figures/tiny\n") and "more characters cut" in text
    assert len(text) < MAX_TEXT_CHARS + 100
    assert outs[1]["data"]["image/png"] == "iVBORw0KGgo=" and "application/pdf" not in outs[1]["data"]
    assert outs[2]["data"]["text/html"] == "<table><td>.</td></table>" and outs[2]["data"]["text/plain"] == "short"
    assert root not in out.read_text() and got["metadata"]["papermill"]["input_path"] == "./notebooks/x.ipynb"
