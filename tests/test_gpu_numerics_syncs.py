"""Host syncs of the upstream family's speculative round (issue 36): ~32 per round before (every counter a .tolist(),
the acceptance a bool() per draft, the bonus and the fixed-point test one each), now one, at the round's end (any
mask left, stalled); counting lives on the device and is read once per generation. Tokens and every counter are
unchanged (tests/test_upstream.py compares them with the released-form reference).

A host sync is counted wherever the decode asks the device for a value: bool(), int(), float(), .item(), .tolist(),
torch.equal, nonzero (a torch function mode sees every one of them, on CPU as on CUDA).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_gpu_numerics_syncs.py
"""

from __future__ import annotations

import traceback
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from mrp_repro.decoding.mismatch import MASK, random_backbone, random_head, random_prompts
from mrp_repro.decoding.upstream import UpstreamSpeculative, generate_upstream
from mrp_repro.model import use_numerics

torch.set_num_threads(1)

SYNCS = {torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__, torch.Tensor.__float__,
         torch.Tensor.__index__, torch.equal, torch.Tensor.nonzero, torch.nonzero}  # fmt: skip


class SyncCounter(TorchFunctionMode):
    """Counts host syncs by the file of the innermost mrp_repro frame that asked for them."""

    def __init__(self):
        super().__init__()
        self.by_file: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in SYNCS:
            frames = [f for f in traceback.extract_stack()[:-1] if "mrp_repro" in f.filename]
            self.by_file[frames[-1].filename.rsplit("mrp_repro/", 1)[-1] if frames else "?"] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("numerics", ["ours", "upstream"])
@pytest.mark.parametrize("batch", [1, 3])
@torch.no_grad()
def test_one_host_sync_per_speculative_round(numerics, batch, capsys):
    m, h = random_backbone(0, torch.bfloat16), random_head(100, torch.bfloat16)
    ps = random_prompts(batch, 1, 9)
    with use_numerics(numerics, m, h), SyncCounter() as c:
        r = generate_upstream(m, ps, UpstreamSpeculative(3, h), 4, MASK, [2], 16)
    rounds, blocks = r.batch.spec_rounds, r.batch.blocks_decoded
    ours = c.by_file["decoding/upstream.py"]
    # one per round; per block: the finished test and the block's mask test; per generation: the counters, tokens
    assert ours <= rounds + 2 * blocks + 6, dict(c.by_file)
    total = sum(c.by_file.values())
    with capsys.disabled():
        print(
            f"\n  {numerics} numerics, batch {batch}: {total / rounds:.1f} host syncs per round "
            f"({ours / rounds:.1f} in upstream.py, {c.by_file['model.py'] / rounds:.1f} in model.attention_mask)"
        )
    if numerics == "ours":
        assert total <= 3 * rounds, dict(c.by_file)
    else:  # attention_mask's all-True test, once per backbone or head call (issue 38's code): the rest
        assert total - c.by_file["model.py"] <= 3 * rounds, dict(c.by_file)
