"""The `upstream` decoding family: the released code's static and speculative decoding, its layout and counters.

    from mrp_repro.decoding.upstream import UpstreamStatic, UpstreamSpeculative, generate_upstream
    res = generate_upstream(model, prompts, UpstreamSpeculative(3, head, draft_logits="none"), block_size=16,
                            mask_id=mask_id, eos_ids=eos_ids, max_new_tokens=4096)
    res.tokens[0], res.stats[0].tokens, res.batch.denoise_forwards, res.batch.tpf

`Backbone.generate` sends a policy with `algorithm == "upstream"` here; our family (`engine.generate`) is
unchanged. What "their code" means below: heavyball-research/multi-token-residual-prediction,
`src/models/SDAR-1.7B-MRP/modeling_sdar_mrp.py` (`generate` with `low_confidence_static`, `_generate_spec`),
as its evaluation runs it (temperature 1.0, top_k 1, top_p 1.0; `mrp_verify_mode=spec`, `mrp_steps=K`).

Layout and length (theirs, unlike our engine): rows share positions 0.. (no left padding; a prompt is
followed by [MASK] slots), every row is cut at the same `total` = ceil(max(longest prompt, shortest prompt +
max_new_tokens) / L) * L, so a row gets total - len(prompt) new slots (longer prompts get fewer; every row
may get up to L - 1 more than max_new_tokens). The prefill writes the shortest prompt's whole blocks; a longer
prompt's later tokens sit in the decoded blocks, never masked. A row stops (no more reveals) once an EOS id
appears in its generated part at a block's end; decoding ends when every row has stopped or at `total`.
Output: the row's slots from its prompt's end to `total`, [MASK] ids dropped (their decode strips
'<|MASK|>'), cut at the first EOS.

Pick rule: `upstream_pick` (the full softmax in the logits' dtype, [MASK] a candidate, ties to the lowest
index). A [MASK] pick writes [MASK] (no change). Their static then spends its remaining steps on the same
pick and leaves the block's remaining masks; their speculative loop would repeat such a round forever. Here
a speculative block ends after two consecutive rounds that change no row (the second is a fixed point: its
successor has the same state and logits), with the masks left, which is static's block; counted in
`UpstreamCounters.stalled_blocks` (0 in every run of a trained model we made).

The speculative round (their `_generate_spec`), K = mrp_steps:
  1. draft 1 = the pick on the logits already held: the block's seed forward in its first round, else the
     previous round's verify logits of C(accepted), i.e. of the state BEFORE that round's bonus; drafts
     2..K = picks on the head's logits, one head call per draft on the state after the previous draft;
  2. one verify forward of the K + 1 candidates C(0..K) (C(k) = the state with drafts 1..k), every round,
     also when the drafts finish the block;
  3. accepted = the longest prefix of drafts whose (position, token) equals the backbone's pick on the
     candidate before it, in EVERY row of the batch (a row with nothing left to pick matches vacuously);
  4. the state becomes C(accepted) plus the bonus: the backbone's pick on C(accepted), from the verify;
     the next round is seeded with the verify's logits and hidden state of C(accepted).
Draft logits (`draft_logits`): "none" = lm_head(h_C) alone, the head chained on its own output h_C (their
published speculative sweep: MRP_LOGIT_MIX_MODE=none); "sum" = A + s*C accumulated in logit space (A + s*C_1
+ s*C_2 ...), the head fed h_A + s*h_C_1 + ... (their `logits_sum` with mrp_logit_sum_scale = s; s = 2 in
their -k2 sweeps). The head sees only its own block: in their speculative path the head layers' KV cache is
never written (its layer indices lie past the backbone's), so it attends to nothing before the block.

Counters: `UpstreamCounters` are theirs, per batch, as `_last_tpf_stats` counts them (one per batched
forward, whatever the rows; `drafts_accepted` one scalar per round, the bonus excluded); `tpf` = tokens
revealed summed over rows / their denoising forwards (seed + verify; static: block forwards). `RowStats`
per row count as our engine does (a forward counts for a row while it has a masked slot to fill), so the
runs frame's per-row columns mean the same in both families.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mrp_repro.decoding.engine import COUNTERS, GenerationResult, RowStats
from mrp_repro.decoding.upstream_pick import upstream_confidence, upstream_pick, upstream_static_select
from mrp_repro.model import VERIFY_PATHS, SDARModel, mask_form_hint

__all__ = ["DRAFT_LOGITS", "UpstreamCounters", "UpstreamResult", "UpstreamPolicy", "UpstreamStatic",
           "UpstreamSpeculative", "generate_upstream", "upstream_layout"]  # fmt: skip

#: draft-logit modes of upstream speculative (their mrp_logit_mix_mode: none, logits_sum)
DRAFT_LOGITS = ("none", "sum")


@dataclass
class UpstreamCounters:
    """Their per-batch counters (`_last_tpf_stats`), names as theirs less the `num_` prefix."""

    prefill_forwards: int = 0  # num_target_fwd_prefill
    denoise_forwards: int = 0  # num_target_fwd_denoising: seed + verify forwards (static: block forwards)
    store_kv_forwards: int = 0  # num_target_fwd_store_kv: one per decoded block
    mrp_forwards: int = 0  # num_mrp_fwd_denoising: K - 1 per round
    blocks_decoded: int = 0
    spec_rounds: int = 0
    drafts_proposed: int = 0  # valid drafts, summed over rows
    drafts_accepted: int = 0  # the batch's accepted prefix length, summed over rounds (one scalar per round)
    bonus_tokens: int = 0  # rows given a bonus pick, summed over rounds
    tokens: int = 0  # slots revealed with a real token, summed over rows ([MASK] writes not counted)
    stalled_blocks: int = 0  # speculative blocks ended at a fixed point (see the module docstring)

    @property
    def total_forwards(self) -> int:
        """num_target_fwd_total."""
        return self.prefill_forwards + self.denoise_forwards + self.store_kv_forwards

    @property
    def tpf(self) -> float:
        """Their TPF: tokens summed over the batch's rows per batched denoising forward."""
        return self.tokens / max(self.denoise_forwards, 1)


@dataclass
class UpstreamResult(GenerationResult):
    batch: UpstreamCounters = field(default_factory=UpstreamCounters)


def upstream_layout(prompts: list[list[int]], block_size: int, max_new_tokens: int):
    """(total, prefill_blocks): their generation length rounded up to whole blocks, and the whole blocks of
    the shortest prompt (prefilled)."""
    lens = [len(p) for p in prompts]
    gen_len = max(max(lens), min(lens) + max_new_tokens)
    return -(-gen_len // block_size) * block_size, min(lens) // block_size


class _Run:
    """One generate_upstream call's state that a policy's block denoising reads and updates.

    Counting never syncs with the host (issue 36: a speculative round made ~32 host syncs, mostly counting): the
    per-row counters live in one (B, len(COUNTERS)) device tensor, the batch counters that depend on device values in
    device scalars, the accept lengths as one (working, lengths) pair per round; `finish` turns them into RowStats and
    UpstreamCounters once, at the end. The batch counters known on the host (forwards, rounds) stay plain ints."""

    def __init__(self, model, cache, positions, mask_id, finished, rows: list[RowStats], batch: UpstreamCounters):
        self.model: SDARModel = model
        self.cache, self.positions, self.mask_id = cache, positions, mask_id
        self.finished = finished  # (B,) bool: rows that stopped (no more reveals)
        self.rows, self.batch = rows, batch
        self.counts = torch.zeros(len(rows), len(COUNTERS), dtype=torch.long, device=finished.device)
        self.batch_dev: dict[str, torch.Tensor] = {}  # UpstreamCounters field -> device scalar to add
        self.accept: list[tuple[torch.Tensor, torch.Tensor]] = []  # per round: (working (B,), accepted (B,))

    def masked(self, state: torch.Tensor) -> torch.Tensor:  # (B, L) their mask_index
        return (state == self.mask_id) & ~self.finished[:, None]

    def count(self, name: str, per_row: torch.Tensor) -> None:
        """RowStats.<name> += per_row[r] ((B,) bool or int), on the device."""
        self.counts[:, COUNTERS.index(name)] += per_row.to(self.counts.device).long()

    def count_batch(self, name: str, n: torch.Tensor) -> None:
        """UpstreamCounters.<name> += n (a device scalar), on the device."""
        n = n.long()
        self.batch_dev[name] = self.batch_dev[name] + n if name in self.batch_dev else n

    def reveal(self, cur: torch.Tensor, sel: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
        """cur with cur[sel] = tok[sel] (B, L); counts the real (non-[MASK]) reveals."""
        real = sel & (tok != self.mask_id)
        self.count("tokens", real.sum(1))
        self.count_batch("tokens", real.sum())
        return torch.where(sel, tok, cur)

    def finish(self) -> None:
        """Add the device counters into rows and batch (one transfer each)."""
        for r, vals in enumerate(self.counts.tolist()):
            for name, n in zip(COUNTERS, vals, strict=True):
                if n:
                    setattr(self.rows[r], name, getattr(self.rows[r], name) + n)
        if self.batch_dev:
            names = list(self.batch_dev)
            for name, n in zip(names, torch.stack([self.batch_dev[k] for k in names]).tolist(), strict=True):
                setattr(self.batch, name, getattr(self.batch, name) + n)
        if self.accept:
            working = torch.stack([w for w, _ in self.accept], 1).tolist()
            acc = torch.stack([a for _, a in self.accept], 1).tolist()
            for r, (ws, accs) in enumerate(zip(working, acc, strict=True)):
                self.rows[r].accept_lengths.extend(a for w, a in zip(ws, accs, strict=True) if w)
        self.counts.zero_()
        self.batch_dev, self.accept = {}, []


class UpstreamPolicy:
    """Base of the upstream policies: `denoise_block(run, cur) -> cur` denoises one block (B, L)."""

    algorithm = "upstream"
    name = "upstream"
    head = None

    def denoise_block(self, run: _Run, cur: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class UpstreamStatic(UpstreamPolicy):
    """Their `low_confidence_static` with denoising_steps = block length: one reveal per step, at most L
    steps per block (a [MASK] pick uses a step and reveals nothing)."""

    name = "upstream_static(1)"

    def denoise_block(self, run: _Run, cur: torch.Tensor) -> torch.Tensor:
        for _ in range(cur.shape[1]):  # denoising_steps = L, num_transfer_tokens = 1 per step
            masked = run.masked(cur)  # (B, L)
            if not masked.any():
                break
            out = run.model.forward_block(cur, run.positions, run.cache)
            run.batch.denoise_forwards += 1
            run.count("denoise_forwards", masked.any(1))
            tok, conf = upstream_confidence(out.logits)  # (B, L), (B, L) in the logits' dtype
            cur = run.reveal(cur, upstream_static_select(conf, masked, 1), tok)
        return cur


def _set(state: torch.Tensor, pos: torch.Tensor, tok: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """state with state[r, pos[r]] = tok[r] where valid[r] (a copy; no host sync: invalid rows write their own
    value back at slot 0, pos of an invalid row being meaningless)."""
    p = torch.where(valid, pos, torch.zeros_like(pos))[:, None]
    return state.clone().scatter_(1, p, torch.where(valid, tok, state.gather(1, p).squeeze(1))[:, None])


class UpstreamSpeculative(UpstreamPolicy):
    """Their `_generate_spec` with K = mrp_steps (see the module docstring). verify: how the K + 1
    candidates are computed (model.VERIFY_PATHS, decoding.verify; "exact", the default: bitwise each one's block
    forward, in one folded backbone call where that is bitwise, else one call each, so lossless in every dtype;
    theirs is one packed forward, our "packed": under the upstream numerics (Backbone.generate) in their call form,
    SDPA with their [1, (K+1)L, S] block-diagonal mask (issue 38), which rounds apart from the block forwards in bf16
    (on CPU SDPA's math kernel against its flash kernel), so, as theirs, not token-identical to static there;
    docs/upstream.md)."""

    def __init__(self, K: int, head, draft_logits: str = "none", sum_scale: float = 1.0, verify: str = "exact"):
        if K < 1:
            raise ValueError("K must be >= 1")
        if head is None:
            raise ValueError("upstream speculative needs an MRP head")
        if draft_logits not in DRAFT_LOGITS:
            raise ValueError(f"draft_logits={draft_logits!r}: choose one of {DRAFT_LOGITS}")
        if verify not in VERIFY_PATHS:
            raise ValueError(f"verify={verify!r}: choose one of {VERIFY_PATHS}")
        self.K, self.head, self.draft_logits, self.verify = K, head, draft_logits, verify
        self.sum_scale = float(sum_scale)
        self.drafter = "mrp"
        mix = "none" if draft_logits == "none" else ("sum" if self.sum_scale == 1.0 else f"sum*{self.sum_scale:g}")
        extra = "" if verify == "exact" else f",{verify}"
        self.name = f"upstream_speculative({K},{mix}{extra})"

    def _drafts(self, run: _Run, logits, hidden, cur):
        """K drafts: [(pos, tok, valid)] and the candidates [C(0), ..., C(K)]."""
        eligible = ~run.finished
        cands, drafts = [cur], []
        h_acc = hidden  # "sum": h_A + s*h_C_1 + ... (their hidden_acc)
        h_cur = hidden  # "none": the previous call's h_C (their cur_hidden)
        for j in range(self.K):
            p, t, v = upstream_pick(logits, cands[-1], run.mask_id, eligible)  # (B,) x 3
            cands.append(_set(cands[-1], p, t, v))
            drafts.append((p, t, v))
            run.count_batch("drafts_proposed", v.sum())
            run.count("drafted", v)
            if j == self.K - 1:
                break
            h_in = h_acc if self.draft_logits == "sum" else h_cur
            # the head on its own block only (cache=None): their head layers' KV cache is never written here. With
            # no cache and no key_valid its mask is all True: said on the host, so attention_mask reads no mask
            with mask_form_hint(self.head, "unmasked"):
                h_C = self.head(h_in, cands[-1], run.positions, run.model.embed_tokens)  # (B, L, H)
            run.batch.mrp_forwards += 1
            run.count("mrp_forwards", run.masked(cands[-1]).any(1))
            C = run.model.lm_head(h_C)  # (B, L, V) their raw MRP logits
            if self.draft_logits == "sum":
                h_acc = h_acc + self.sum_scale * h_C
                logits = logits + self.sum_scale * C  # logit space, accumulated as theirs
            else:
                logits = C
            h_cur = h_C
        return drafts, cands

    def denoise_block(self, run: _Run, cur: torch.Tensor) -> torch.Tensor:
        masked = run.masked(cur)
        if not masked.any():  # their seed forward runs anyway; nothing reads it
            run.model.forward_block(cur, run.positions, run.cache)
            run.batch.denoise_forwards += 1
            return cur
        seed = run.model.forward_block(cur, run.positions, run.cache)
        run.batch.denoise_forwards += 1
        run.count("denoise_forwards", masked.any(1))
        logits, hidden = seed.logits, seed.hidden  # (B, L, V), (B, L, H)
        B = cur.shape[0]
        ar = torch.arange(B, device=cur.device)
        unchanged = torch.zeros((), dtype=torch.long, device=cur.device)  # consecutive rounds that changed no row
        more = True
        while more:  # one host sync per round, at its end: whether any mask is left, whether the block stalled
            working = masked.any(1)  # (B,)
            run.batch.spec_rounds += 1
            run.count("rounds", working)
            drafts, cands = self._drafts(run, logits, hidden, cur)
            vout = run.model.forward_candidates(torch.stack(cands, 1), run.positions, run.cache,
                                                verify=self.verify)  # (B, K+1, L, V)  # fmt: skip
            run.batch.denoise_forwards += 1
            run.count("denoise_forwards", working)
            eligible = ~run.finished
            picks = [upstream_pick(vout.logits[:, k], cands[k], run.mask_id, eligible) for k in range(self.K + 1)]
            # the batch's accepted prefix, on the device: draft k is taken iff drafts 1..k match in EVERY row
            match = torch.stack([(((dp == tp) & (dt == tt)) | (~dv & ~tv)).all()
                                 for (dp, dt, dv), (tp, tt, tv) in zip(drafts, picks, strict=False)])  # fmt: skip
            taken = torch.cumprod(match.long(), 0)  # (K,) 1 for the accepted drafts
            acc = taken.sum()  # () the accepted count
            run.count_batch("drafts_accepted", acc)
            row_acc = sum(drafts[k][2].long() * taken[k] for k in range(self.K))  # (B,)
            run.count("accepted", row_acc)
            run.accept.append((working, row_acc))
            real = sum((drafts[k][2] & (drafts[k][1] != run.mask_id)).long() * taken[k] for k in range(self.K))
            run.count("tokens", real)
            run.count_batch("tokens", real.sum())
            at = acc.view(1)
            new = torch.stack(cands, 1).index_select(1, at).squeeze(1)  # C(accepted), a copy
            bp, bt, bv = (torch.stack(x, 1).index_select(1, at).squeeze(1) for x in zip(*picks, strict=True))
            bonus = bv & run.masked(new)[ar, bp]  # the bonus: the backbone's pick on C(accepted)
            run.count_batch("bonus_tokens", bonus.sum())
            new = run.reveal(new, torch.zeros_like(masked).index_put_((ar, bp), bonus), bt[:, None].expand_as(new))
            logits, hidden = vout.logits.index_select(1, at).squeeze(1), vout.hidden.index_select(1, at).squeeze(1)
            unchanged = torch.where((new != cur).any(), torch.zeros_like(unchanged), unchanged + 1)
            cur = new
            masked = run.masked(cur)
            left = masked.any()
            more, stalled = torch.stack([left, (unchanged == 2) & left]).tolist()
            if stalled:  # a fixed point: their loop would never end
                run.batch.stalled_blocks += 1
                break
        return cur


@torch.no_grad()
def generate_upstream(model: SDARModel, prompts: list[list[int]], policy: UpstreamPolicy, block_size: int,
                      mask_id: int, eos_ids, max_new_tokens: int) -> UpstreamResult:  # fmt: skip
    """Decode `prompts` together as their generate does (layout, length, prefill, block loop, store-KV commit,
    stopping); `policy` denoises each block. Trace events are not recorded (empty list)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate_upstream needs at least one non-empty prompt")
    device = model.lm_head.weight.device
    L, B = block_size, len(prompts)
    total, n_prefill = upstream_layout(prompts, L, max_new_tokens)
    lens = torch.tensor([len(p) for p in prompts], device=device)
    x = torch.full((B, total), mask_id, dtype=torch.long, device=device)  # (B, total)
    for r, p in enumerate(prompts):
        x[r, : len(p)] = torch.tensor(p, device=device)
    positions = torch.arange(total, device=device)[None].expand(B, total)  # shared by every row
    generated = positions >= lens[:, None]  # (B, total)
    eos = torch.tensor(sorted(set(eos_ids)), device=device)
    cache = model.new_cache(B, total)
    rows, batch = [RowStats() for _ in range(B)], UpstreamCounters()
    run = _Run(model, cache, None, mask_id, torch.zeros(B, dtype=torch.bool, device=device), rows, batch)
    if n_prefill > 0:
        P = n_prefill * L
        # key_valid None: every prompt slot is real, known on the host (the mask's form needs no host sync)
        model.prefill(x[:, :P], positions[:, :P], None, cache, L, with_logits=False)
        batch.prefill_forwards += 1
        run.count("commit_forwards", torch.ones(B, dtype=torch.bool))
    for b in range(n_prefill, total // L):
        if bool(run.finished.all()):
            break
        lo, hi = b * L, (b + 1) * L
        run.positions = positions[:, lo:hi]
        batch.blocks_decoded += 1
        cur = policy.denoise_block(run, x[:, lo:hi].clone())
        model.commit_block(cur, run.positions, cache, with_logits=False)  # their store_kv forward
        batch.store_kv_forwards += 1
        run.count("commit_forwards", ~run.finished)
        x[:, lo:hi] = cur
        run.finished |= (torch.isin(x, eos) & generated).any(1)
    run.finish()
    tokens = []
    eos_set = set(eos_ids)
    for r, row in enumerate(x.tolist()):
        gen = [t for t in row[len(prompts[r]) :] if t != mask_id]
        cut = next((i for i, t in enumerate(gen) if t in eos_set), len(gen))
        tokens.append(gen[:cut])
    return UpstreamResult(tokens, rows, [], batch)
