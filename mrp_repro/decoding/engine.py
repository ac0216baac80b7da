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

Compiled (decoding.compile, model.compile_model): on CUDA every backbone and head call is a CUDA-graph replay whose
outputs the next replay may overwrite, while this loop keeps them (a block forward's hidden state feeds the head
after later calls, a loop verify stacks M forwards, a seed's logits outlive the verify); model.graph_safe marks a
new graph step per call and returns clones, so nothing here reads an overwritten output (tests/test_compiled.py).
Accounting: a verify counts one denoising forward per working row whatever its path (upstream's definition of
TPF); the backbone calls it makes (1 folded, M for loop) are measure.cost's verify_passes; the block-rows it
processes beyond one (M - 1 for M candidates; a peer's shadow block) are RowStats.extra_rows.
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
    commit_forwards: int = 0  # forwards writing a finished block into the cache (prefill included), upstream's count
    mrp_forwards: int = 0  # MRP head calls (batched leave-one-out = 1)
    tokens: int = 0  # positions revealed by denoising (net of revocations)
    revoked: int = 0  # reveals put back to [MASK] by remasking
    drafted: int = 0  # speculative drafts proposed
    accepted: int = 0  # speculative drafts accepted
    rounds: int = 0  # speculative rounds
    accept_lengths: list[int] = field(default_factory=list)
    # fuse_commit=True: commits (of commit_forwards) that cost this row no forward of their own -- written by a
    # forward the row needed anyway (its next block's first denoise forward), or never needed (its last block).
    fused_commits: int = 0

    # Block-rows a counted denoising forward processed beyond the row's one block (a verify of M candidates: M - 1;
    # a peer's shadow block: 1): what "equal verify rows" compares and a wide forward is charged. A class attribute,
    # not a dataclass field (Stats.rows sets it per row), so RowStats' equality and asdict, which the frozen-loop
    # tests compare field by field, are those of the counters above.
    extra_rows = 0

    @property
    def backbone_forwards(self) -> int:
        """Upstream's accounting: every commit a forward of its own."""
        return self.denoise_forwards + self.commit_forwards

    @property
    def fused_backbone_forwards(self) -> int:
        """The forwards this row actually needed (= backbone_forwards without fuse_commit)."""
        return self.denoise_forwards + self.commit_forwards - self.fused_commits

    @property
    def tpf(self) -> float:
        """Tokens per forward, upstream's definition: per forward inside the denoising loop."""
        return self.tokens / max(self.denoise_forwards, 1)


COUNTERS = ("denoise_forwards", "commit_forwards", "mrp_forwards", "tokens", "revoked", "drafted", "accepted",
            "rounds", "fused_commits")  # fmt: skip
_COL = {n: i for i, n in enumerate(COUNTERS)}
KINDS = ("reveal", "revoke", "draft", "accept")


class Stats:
    """The per-row counters of one generation as one (B, len(COUNTERS)) tensor on the device: counting never
    syncs with the host; `rows()` turns it into RowStats once, at the end."""

    def __init__(self, batch: int, device):
        self.counts = torch.zeros(batch, len(COUNTERS), dtype=torch.long, device=device)
        self.extra_rows = torch.zeros(batch, dtype=torch.long, device=device)  # (B,) RowStats.extra_rows
        self.accept = []  # per speculative round: (B,) accept length, -1 for rows that did not take part

    def add(self, name: str, rows: torch.Tensor, n: int | torch.Tensor = 1):
        """counts[name] += n on the rows where `rows` (B,) bool is set (n: int or (B,) tensor); name: one of
        COUNTERS or "extra_rows"."""
        if name == "extra_rows":
            self.extra_rows += rows.long() * n
            return
        self.counts[:, _COL[name]] += rows.long() * n

    def rows(self) -> list[RowStats]:
        counts = self.counts.tolist()
        acc = torch.stack(self.accept, 1).tolist() if self.accept else [[] for _ in counts]
        out = [RowStats(**dict(zip(COUNTERS, c, strict=True)), accept_lengths=[j for j in a if j >= 0])
               for c, a in zip(counts, acc, strict=True)]  # fmt: skip
        for s, x in zip(out, self.extra_rows.tolist(), strict=True):
            s.extra_rows = x
        return out


class Trace:
    """Trace events kept as device tensors while decoding and turned into dicts in one pass at the end
    (`generate(trace=False)` records nothing: timing runs)."""

    def __init__(self):
        self.chunks = []  # (kind, block, step, sel (B, L) bool | pos (B, K) long with -1 = none, tokens (B, L | K))

    def add_mask(self, kind: str, block: int, step: int, sel: torch.Tensor, tokens: torch.Tensor):
        self.chunks.append((kind, block, step, sel, tokens, True))

    def add_list(self, kind: str, block: int, step: int, pos: torch.Tensor, tokens: torch.Tensor):
        self.chunks.append((kind, block, step, pos, tokens, False))

    def events(self) -> list[dict]:
        out = []
        for kind, block, step, a, tokens, is_mask in self.chunks:
            if is_mask:
                rows, pos = a.nonzero(as_tuple=True)
                toks = tokens[rows, pos]
            else:  # row-major, draft order within a row (as they were drawn)
                rows, k = (a >= 0).nonzero(as_tuple=True)
                pos, toks = a[rows, k], tokens[rows, k]
            for r, p, t in zip(rows.tolist(), pos.tolist(), toks.tolist(), strict=True):
                out.append(dict(row=r, block=block, step=step, kind=kind, pos=p, token=t))
        return out


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # generated ids per row, cut at the first EOS (excluded) and max_new_tokens
    stats: list[RowStats]
    trace: list[dict]  # events: row, block, step, kind (reveal/revoke/draft/accept), pos, token


class BlockState:
    """Everything a policy sees and changes while one block is being denoised."""

    def __init__(self, model, cache, ids, positions, key_valid, active, mask_id, block, stats, trace, ctx,
                 pending=None):  # fmt: skip
        self.model: SDARModel = model
        self.cache = cache
        self.ids = ids  # (B, L) current tokens of the block, mask_id where still masked
        self.positions = positions  # (B, L)
        self.key_valid = key_valid  # (B, L) False on padding slots of finished rows
        self.active = active  # (B,) rows that denoise this block
        self.mask_id = mask_id
        self.block = block
        self.stats: Stats = stats
        self.trace: Trace | None = trace
        self.ctx = ctx  # the policy's per-generation state (e.g. the MRP head's cache)
        self.step = 0
        # fuse_commit: the finished block(s) the first backbone() call writes into the cache (engine-owned)
        self.pending = pending

    @property
    def masked(self) -> torch.Tensor:  # (B, L)
        return (self.ids == self.mask_id) & self.active[:, None]

    def rows_needing_work(self) -> torch.Tensor:  # (B,)
        return self.masked.any(1)

    def _count(self, name: str, rows: torch.Tensor, n: int | torch.Tensor = 1):
        self.stats.add(name, rows, n)

    def backbone(self, ids: torch.Tensor | None = None) -> ModelOutput:
        """Forward the block (B, L) against the cache; counts one forward per working row. With a pending
        fused commit the first call also writes the finished block (one forward for both)."""
        work = self.rows_needing_work()
        self._count("denoise_forwards", work)
        if self.pending is not None:
            return self.pending.run(self, self.ids if ids is None else ids, work)
        return self.model.forward_block(self.ids if ids is None else ids, self.positions, self.cache, self.key_valid)

    def backbone_candidates(self, cand_ids: torch.Tensor, verify: str = "exact",
                            rows: torch.Tensor | None = None) -> ModelOutput:  # fmt: skip
        """One verify of (B, M, L) candidate states (`verify`: a path of model.VERIFY_PATHS); one
        forward per working row (or per row of `rows`), whatever the path (a verify is one pass), and M - 1
        extra rows (RowStats.extra_rows)."""
        charged = self.rows_needing_work() if rows is None else rows
        self._count("denoise_forwards", charged)
        self._count("extra_rows", charged, cand_ids.shape[1] - 1)
        return self.model.forward_candidates(cand_ids, self.positions, self.cache, self.key_valid, verify=verify)

    def reveal(self, select: torch.Tensor, tokens: torch.Tensor, kind: str = "reveal"):
        """select (B, L) bool over masked slots; tokens (B, L) ids to write there."""
        select = select & self.masked
        self.ids = torch.where(select, tokens, self.ids)
        self._count("tokens", torch.ones_like(self.active), select.sum(1))
        if self.trace is not None:
            self.trace.add_mask(kind, self.block, self.step, select, self.ids)

    def revoke(self, select: torch.Tensor):
        """Put revealed slots back to [MASK]."""
        n = select.sum(1)
        self._count("tokens", torch.ones_like(self.active), -n)
        self._count("revoked", torch.ones_like(self.active), n)
        if self.trace is not None:
            self.trace.add_mask("revoke", self.block, self.step, select, self.ids)
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
    algorithm = "ours"  # the decoding family (runs column `algorithm`); decoding.upstream's policies are "upstream"

    def begin(self, model: SDARModel, batch: int, capacity: int, device, static_cache: bool = False) -> object:
        return None

    def denoise(self, st: BlockState) -> None:
        raise NotImplementedError

    def on_commit(self, st_ctx, out: ModelOutput, ids, positions, key_valid) -> None:
        """Called after a block (or the prefill) is written into the backbone cache (out: hidden states;
        logits may be None)."""


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


class _Commit:
    """A finished block (or the prefill) waiting to be written into the cache.

    Unfused, `write` runs it as its own forward at once. Fused, the next block's first backbone() call runs
    it (`run`: one forward writing it and denoising the new block), or `write` does if that block never
    forwards; a commit still pending when decoding stops is never needed and never run."""

    def __init__(self, engine, lo, hi, rows):
        self.engine, self.lo, self.hi = engine, lo, hi
        e = engine
        self.ids, self.pos, self.kv = e.seq[:, lo:hi], e.positions[:, lo:hi], e.real[:, lo:hi]
        self.charged = rows & self.kv.any(1)  # all-padding rows cost nothing
        e.stats.add("commit_forwards", self.charged)

    def write(self):
        e = self.engine
        if self.hi - self.lo == e.L:
            out = e.model.commit_block(self.ids, self.pos, e.cache, self.kv, with_logits=False)
        else:
            out = e.model.prefill(self.ids, self.pos, self.kv, e.cache, e.L, with_logits=False)
        e.policy.on_commit(e.ctx, out, self.ids, self.pos, self.kv)

    def run(self, st: BlockState, ids: torch.Tensor, work: torch.Tensor) -> ModelOutput:
        e = self.engine
        st.pending = None
        prev, out = e.model.commit_and_forward(self.ids, self.pos, self.kv, ids, st.positions, e.cache, st.key_valid)
        e.policy.on_commit(e.ctx, prev, self.ids, self.pos, self.kv)
        # Free for a row that needed this forward anyway, or that needs no forward of this block at all.
        e.stats.add("fused_commits", self.charged & (work | ~st.active))
        return out

    def drop(self):
        """Decoding stopped: nothing reads this block; its commit costs no row a forward."""
        self.engine.stats.add("fused_commits", self.charged)


class _Engine:
    """The state of one generate() call that commits read and write."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


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
    fuse_commit: bool = False,
    trace: bool = True,
    static_cache: bool = False,
) -> GenerationResult:
    """fuse_commit: write each finished block into the cache in the next block's first forward (one forward
    less per block, `RowStats.fused_commits`); tokens are those of the unfused engine wherever that fused
    forward rounds like forward_block (tests/test_engine.py measures it). trace=False: no trace events (timing).
    static_cache: the backbone's and head's caches are model.KVCache(static=True), one shape per call kind."""
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
    end_t = torch.tensor(end_block, device=device)
    gen_start = torch.tensor(lens, device=device)[:, None]

    cache = model.new_cache(B, total_blocks * L, static=static_cache)
    stats = Stats(B, device)
    tr = Trace() if trace else None
    ctx = policy.begin(model, B, total_blocks * L, device, static_cache=static_cache)
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    e = _Engine(model=model, seq=seq, positions=positions, real=real, cache=cache, stats=stats, policy=policy,
                ctx=ctx, L=L)  # fmt: skip

    def commit(lo: int, hi: int, rows: torch.Tensor) -> _Commit | None:
        c = _Commit(e, lo, hi, rows)
        if fuse_commit:
            return c
        c.write()
        return None

    pending = commit(0, (N - 1) * L, torch.ones(B, dtype=torch.bool, device=device)) if N > 1 else None

    for b in range(N - 1, total_blocks):
        lo, hi = b * L, (b + 1) * L
        # Rows past their last block, or stopped at EOS, sit out with invisible padding.
        done_now = finished | (b >= end_t)
        seq[:, lo:hi] = torch.where(done_now[:, None], pad_id, seq[:, lo:hi])
        real[:, lo:hi] &= ~done_now[:, None]
        active = ~done_now
        st = BlockState(model, cache, seq[:, lo:hi].clone(), positions[:, lo:hi], real[:, lo:hi], active, mask_id,
                        b, stats, tr, ctx, pending)  # fmt: skip
        policy.denoise(st)
        if st.pending is not None:  # the policy never forwarded (nothing to denoise): write it on its own
            st.pending.write()
        if st.masked.any():
            raise RuntimeError(f"policy {policy.name} left masked slots in block {b}")
        seq[:, lo:hi] = st.ids
        pending = commit(lo, hi, active)
        gen_part = positions[:, lo:hi] >= gen_start
        finished |= active & (torch.isin(st.ids, eos) & gen_part & real[:, lo:hi]).any(1)
        if bool((finished | (b + 1 >= end_t)).all()):
            break
    if pending is not None:
        pending.drop()

    tokens = []
    eos_set = set(eos_ids)
    for r, row in enumerate(seq.tolist()):
        gen = row[pad[r] + lens[r] : pad[r] + lens[r] + max_new_tokens]
        cut = next((i for i, t in enumerate(gen) if t in eos_set), len(gen))
        tokens.append(gen[:cut])
    return GenerationResult(tokens, stats.rows(), tr.events() if tr is not None else [])
