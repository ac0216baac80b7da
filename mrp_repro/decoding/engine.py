"""Block-diffusion decoding with a KV cache: one loop, pluggable denoising policies.

    from mrp_repro.decoding import generate, Static, Dynamic
    result = generate(model, prompts, Static(), block_size=8, mask_id=1, eos_ids=[2], max_new_tokens=32)
    result.tokens[0], result.stats[0].tpf

The loop (METHOD.md §1): prefill the prompt's whole blocks; then, block by block, let
the policy denoise the block (reveal masked positions, forwarding the block against
the cache, never writing it) and commit the finished block with one more forward that
writes its K/V. Policies (static, dynamic here; speculative, direct, remask in
`mrp_repro.decoding.mrp_modes`) only decide what to reveal; the engine owns layout,
cache, stopping and the accounting of every forward.

Layout: rows are left-padded by whole blocks so every row's blocks start at multiples
of the block size in its own positions (as upstream SDAR: position 0 is the first
prompt token), and all rows share one block index. A row whose prompt ends inside a
block denoises the rest of that block first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mrp_repro.kernels import confidence
from mrp_repro.model import ModelOutput, SDARModel


@dataclass
class RowStats:
    """Per-row accounting. A forward counts for a row only while that row needs it,
    so the numbers do not depend on which prompts share the batch."""

    denoise_forwards: int = 0  # backbone forwards inside the denoising loop (packed verify = 1)
    commit_forwards: int = 0  # forwards writing a finished block into the cache (prefill included)
    mrp_forwards: int = 0  # MRP head calls (batched leave-one-out = 1)
    tokens: int = 0  # positions revealed by denoising (net of revocations)
    revoked: int = 0  # reveals put back to [MASK] by remasking
    drafted: int = 0  # speculative drafts proposed
    accepted: int = 0  # speculative drafts accepted
    rounds: int = 0  # speculative rounds
    accept_lengths: list[int] = field(default_factory=list)

    @property
    def backbone_forwards(self) -> int:
        return self.denoise_forwards + self.commit_forwards

    @property
    def tpf(self) -> float:
        """Tokens per forward, upstream's definition: per forward inside the denoising loop."""
        return self.tokens / max(self.denoise_forwards, 1)


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # generated ids per row, cut at the first EOS (excluded) and max_new_tokens
    stats: list[RowStats]
    trace: list[dict]  # events: row, block, step, kind (reveal/revoke/draft/accept), pos, token

    def total(self, name: str) -> int:
        return sum(getattr(s, name) for s in self.stats)


class BlockState:
    """Everything a policy sees and changes while one block is being denoised."""

    def __init__(self, model, cache, ids, positions, key_valid, active, mask_id, block, stats, trace, ctx):
        self.model: SDARModel = model
        self.cache = cache
        self.ids = ids  # (B, L) current tokens of the block, mask_id where still masked
        self.positions = positions  # (B, L)
        self.key_valid = key_valid  # (B, L) False on padding slots of finished rows
        self.active = active  # (B,) rows that denoise this block
        self.mask_id = mask_id
        self.block = block
        self.stats: list[RowStats] = stats
        self.trace = trace
        self.ctx = ctx  # the policy's per-generation state (e.g. the MRP head's cache)
        self.step = 0

    @property
    def masked(self) -> torch.Tensor:  # (B, L)
        return (self.ids == self.mask_id) & self.active[:, None]

    def rows_needing_work(self) -> torch.Tensor:  # (B,)
        return self.masked.any(1)

    def _count(self, name: str, rows: torch.Tensor, n: int = 1):
        for r in rows.nonzero().flatten().tolist():
            setattr(self.stats[r], name, getattr(self.stats[r], name) + n)

    def backbone(self, ids: torch.Tensor | None = None) -> ModelOutput:
        """Forward the block (B, L) against the cache; counts one forward per working row."""
        self._count("denoise_forwards", self.rows_needing_work())
        return self.model.forward_block(self.ids if ids is None else ids, self.positions, self.cache, self.key_valid)

    def backbone_candidates(self, cand_ids: torch.Tensor, verify: str = "exact") -> ModelOutput:
        """One verify of (B, M, L) candidate states (`verify`: a path of model.VERIFY_PATHS); one
        forward per working row, whatever the path (the paper's accounting: a verify is one pass)."""
        self._count("denoise_forwards", self.rows_needing_work())
        return self.model.forward_candidates(cand_ids, self.positions, self.cache, self.key_valid, verify=verify)

    def reveal(self, select: torch.Tensor, tokens: torch.Tensor, kind: str = "reveal"):
        """select (B, L) bool over masked slots; tokens (B, L) ids to write there."""
        select = select & self.masked
        self.ids = torch.where(select, tokens, self.ids)
        for r, p in select.nonzero().tolist():
            self.stats[r].tokens += 1
            self.trace.append(dict(row=r, block=self.block, step=self.step, kind=kind, pos=p, token=int(tokens[r, p])))

    def revoke(self, select: torch.Tensor):
        """Put revealed slots back to [MASK]."""
        for r, p in select.nonzero().tolist():
            self.stats[r].tokens -= 1
            self.stats[r].revoked += 1
            self.trace.append(
                dict(row=r, block=self.block, step=self.step, kind="revoke", pos=p, token=int(self.ids[r, p]))
            )
        self.ids = torch.where(select, torch.full_like(self.ids, self.mask_id), self.ids)


def masked_confidence(logits: torch.Tensor, masked: torch.Tensor, mask_id: int):
    """logits (B, L, V), masked (B, L) -> greedy tokens (B, L), confidence (B, L) with -1 on unmasked slots.

    The [MASK] token itself is never a candidate (set to -inf in place): revealing it would
    loop forever, and a trained model never wants it anyway."""
    B, L, V = logits.shape
    logits[..., mask_id] = float("-inf")
    tok, conf, _ = confidence(logits.reshape(B * L, V))
    return tok.view(B, L), torch.where(masked, conf.view(B, L), torch.full_like(conf.view(B, L), -1.0))


def top_masked(conf: torch.Tensor, masked: torch.Tensor, n: int | torch.Tensor = 1) -> torch.Tensor:
    """(B, L) bool selecting the n most confident masked slots per row; ties go to the lowest index."""
    order = torch.sort(conf, dim=1, descending=True, stable=True).indices  # (B, L)
    n = torch.as_tensor(n, device=conf.device).expand(conf.shape[0])
    rank_ok = torch.arange(conf.shape[1], device=conf.device)[None, :] < n[:, None]
    pick = torch.zeros_like(masked)
    pick.scatter_(1, order, rank_ok)
    return pick & masked


class Policy:
    """A denoising policy. `denoise` must leave no masked slot in active rows."""

    name = "policy"

    def begin(self, model: SDARModel, batch: int, capacity: int, device) -> object:
        return None

    def denoise(self, st: BlockState) -> None:
        raise NotImplementedError

    def on_commit(self, st_ctx, out: ModelOutput, ids, positions, key_valid, cache_len_before: int) -> None:
        """Called after a block (or the prefill) is written into the backbone cache."""


class Static(Policy):
    """`low_confidence_static`: a fixed number of reveals per step, most confident first."""

    def __init__(self, tokens_per_step: int = 1):
        if tokens_per_step < 1:
            raise ValueError("tokens_per_step must be >= 1")
        self.k = tokens_per_step
        self.name = f"static({tokens_per_step})"

    def denoise(self, st: BlockState) -> None:
        while st.rows_needing_work().any():
            out = st.backbone()
            tok, conf = masked_confidence(out.logits, st.masked, st.mask_id)
            st.reveal(top_masked(conf, st.masked, self.k), tok)
            st.step += 1


class Dynamic(Policy):
    """`low_confidence_dynamic`: reveal every masked slot above tau; if none, the top one."""

    def __init__(self, threshold: float):
        self.tau = threshold
        self.name = f"dynamic({threshold})"

    def select(self, conf: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        return ((conf > self.tau) & masked) | top_masked(conf, masked, 1)

    def denoise(self, st: BlockState) -> None:
        while st.rows_needing_work().any():
            out = st.backbone()
            tok, conf = masked_confidence(out.logits, st.masked, st.mask_id)
            st.reveal(self.select(conf, st.masked), tok)
            st.step += 1


@torch.no_grad()
def generate(
    model: SDARModel,
    prompts: list[list[int]],
    policy: Policy,
    block_size: int,
    mask_id: int,
    eos_ids: list[int] | tuple[int, ...],
    max_new_tokens: int,
    pad_id: int | None = None,
) -> GenerationResult:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one non-empty prompt")
    device = model.lm_head.weight.device
    L, B = block_size, len(prompts)
    pad_id = mask_id if pad_id is None else pad_id
    eos = torch.tensor(sorted(set(eos_ids)), device=device)
    lens = [len(p) for p in prompts]
    n_prompt_blocks = [-(-n // L) for n in lens]
    N = max(n_prompt_blocks)
    pad = [(N - n) * L for n in n_prompt_blocks]
    # The last block a row touches, in shared block indices.
    end_block = [pad[r] // L + -(-(lens[r] + max_new_tokens) // L) for r in range(B)]
    total_blocks = max(end_block)

    seq = torch.full((B, total_blocks * L), mask_id, dtype=torch.long, device=device)
    real = torch.zeros(B, total_blocks * L, dtype=torch.bool, device=device)
    for r, p in enumerate(prompts):
        seq[r, : pad[r]] = pad_id
        seq[r, pad[r] : pad[r] + lens[r]] = torch.tensor(p, device=device)
        real[r, pad[r] :] = True
    positions = (
        torch.arange(total_blocks * L, device=device)[None, :] - torch.tensor(pad, device=device)[:, None]
    ).clamp(min=0)

    cache = model.new_cache(B, total_blocks * L)
    stats = [RowStats() for _ in range(B)]
    trace: list[dict] = []
    ctx = policy.begin(model, B, total_blocks * L, device)
    finished = torch.zeros(B, dtype=torch.bool, device=device)

    def commit(lo: int, hi: int, block_rows: torch.Tensor):
        cache_len = cache.length
        ids, pos, kv = seq[:, lo:hi], positions[:, lo:hi], real[:, lo:hi]
        if hi - lo == L:
            out = model.commit_block(ids, pos, cache, kv)
        else:
            out = model.prefill(ids, pos, kv, cache, L)
        for r in (block_rows & kv.any(1)).nonzero().flatten().tolist():  # all-padding rows cost nothing
            stats[r].commit_forwards += 1
        policy.on_commit(ctx, out, ids, pos, kv, cache_len)

    if N > 1:
        commit(0, (N - 1) * L, torch.ones(B, dtype=torch.bool, device=device))

    for b in range(N - 1, total_blocks):
        lo, hi = b * L, (b + 1) * L
        # Rows past their last block, or stopped at EOS, sit out with invisible padding.
        done_now = finished | torch.tensor([b >= end_block[r] for r in range(B)], device=device)
        seq[done_now, lo:hi] = pad_id
        real[done_now, lo:hi] = False
        active = ~done_now
        st = BlockState(
            model,
            cache,
            seq[:, lo:hi].clone(),
            positions[:, lo:hi],
            real[:, lo:hi],
            active,
            mask_id,
            b,
            stats,
            trace,
            ctx,
        )
        policy.denoise(st)
        if st.masked.any():
            raise RuntimeError(f"policy {policy.name} left masked slots in block {b}")
        seq[:, lo:hi] = st.ids
        commit(lo, hi, active)
        gen_part = positions[:, lo:hi] >= torch.tensor(lens, device=device)[:, None]
        finished |= active & (torch.isin(st.ids, eos) & gen_part & real[:, lo:hi]).any(1)
        if bool((finished | torch.tensor([b + 1 >= end_block[r] for r in range(B)], device=device)).all()):
            break

    tokens = []
    for r in range(B):
        gen = seq[r, pad[r] + lens[r] : pad[r] + lens[r] + max_new_tokens].tolist()
        cut = next((i for i, t in enumerate(gen) if t in set(eos_ids)), len(gen))
        tokens.append(gen[:cut])
    return GenerationResult(tokens, stats, trace)
