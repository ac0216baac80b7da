"""A Spiffy-style calibrated draft graph (Agrawal et al., arXiv 2509.18085) on our engine: lossless self-speculation.

    from mrp_repro.decoding import generate, Static, Dynamic
    from mrp_repro.decoding.peers_spiffy import DraftGraph, Spiffy, calibrate
    graph = calibrate(model, held_out_prompts, Static(1), D=6, block_size=L, mask_id=M, eos_ids=E,
                      max_new_tokens=N, pad_id=P)                    # offline, on prompts never evaluated
    generate(model, prompts, Spiffy(graph), L, M, E, N, pad_id=P)   # token-identical to Static(1)
    graph = calibrate(model, held_out_prompts, Dynamic(0.9), D=6, ...)
    generate(model, prompts, Spiffy(graph, Dynamic(0.9)), ...)      # token-identical to Dynamic(0.9)
    Spiffy(DraftGraph.chain(3))                                      # the SSD / FreeDave chain (= speculative(3,naive))

The idea (the paper's, in our words; no code of theirs): the backbone is its own drafter. On state S with logits A
(the seed: a block forward, or the verify row of the previous round), the base decoding's step on A is exact and
free: S1 = base(S, A). The draft states are S1 with a few more (slot, token) reveals written in, each named by ranks
read off A: slot rank r = the r-th most confident slot still masked in S1 (ties: the lowest index), token rank k =
the k-th most likely token there (k = 0: the greedy token). A node of the graph is a set of such (r, k) pairs, the
root the empty set (S1 itself). One backbone call verifies the D node states (model.forward_candidates, path
`verify`: "exact" gives logits bitwise those of a block forward on the same state). Then the walk: from the root, take
the base decoding's step on the current node's verified logits; if the state it gives equals another node's state,
move there (its logits are the backbone's on exactly that state) and repeat; else stop. The round ends on the last
node reached, whose logits seed the next round. Every state entered is one the base decoding would reach, with
logits bitwise the base's, so the output is the base's token for token (fp32 and bf16; tests/test_peers_spiffy.py).

The graph (`calibrate`, offline): decode held-out prompts with the base decoding and, at every step t of every
block, express what the next steps reveal as (r, k) pairs ranked by step t's logits: N_d = the union of the pairs
of steps t+2 .. t+d+1 (step t+1 is the exact S1), so each anchor traces a path root -> N_1 -> N_2 -> ...; count
every node and every edge; keep the root and then, greedily, the most frequent node with an observed edge from a
kept node, until D nodes (D counts the root: one verify of D candidate blocks, the chain's K at D = K). Token ranks
past `token_ranks` end a path (too rare to draft). The paper also prunes the graph per step at run time; here the
D candidates are verified every round (less the ones that no row can use), so a graph's verify rows are its D.

Accounting (the engine's, as speculative(K)): the first block forward and each verify count one denoising forward
per row that needs it; the verify's candidates beyond the first count as RowStats.extra_rows; a row whose S1 has no
mask left is finished by its base step and takes no verify. rounds / drafted (the node states verified for the row,
the root included) / accepted and accept_lengths (base steps per round: 1 + nodes walked).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import torch

from mrp_repro.decoding.engine import BlockState, Dynamic, Policy, Static, generate, masked_confidence, top_masked
from mrp_repro.model import VERIFY_PATHS

__all__ = ["DraftGraph", "Spiffy", "GraphRecorder", "calibrate", "base_select", "rank_tokens", "rank_slots",
           "TOKEN_RANKS"]  # fmt: skip

#: token ranks a calibrated node may use (k < TOKEN_RANKS); a path needing a rarer token ends there
TOKEN_RANKS = 3

Node = tuple[tuple[int, int], ...]  # sorted (slot_rank, token_rank) pairs; () is the root


def base_select(base: Policy, conf: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """(B, L) bool: the slots `base` (Static(1) or Dynamic(τ)) reveals on a state with confidence conf (B, L)."""
    if isinstance(base, Dynamic):
        return base.select(conf, masked)
    if isinstance(base, Static) and base.k == 1:
        return top_masked(conf, masked, 1)
    raise ValueError(f"a draft graph runs over static(1) or dynamic(tau), not {base.name}")


def rank_slots(conf: torch.Tensor, remaining: torch.Tensor) -> torch.Tensor:
    """(B, L) slot order: the slots masked in `remaining` (B, L) by descending conf (B, L) (ties: lowest index),
    then the others; order[:, r] is slot rank r."""
    score = torch.where(remaining, conf.float(), torch.full_like(conf, -2.0, dtype=torch.float32))
    return torch.sort(score, dim=1, descending=True, stable=True).indices


def rank_tokens(logits: torch.Tensor, tok: torch.Tensor, n: int) -> torch.Tensor:
    """(B, L, n) token ids by rank: rank 0 = tok (B, L) (masked_confidence's greedy token, the base's own pick), ranks
    1.. the next most likely (topk of logits (B, L, V) without tok; [MASK] already -inf there)."""
    if n <= 1:
        return tok[..., None]
    rest = logits.scatter(-1, tok[..., None], float("-inf")).topk(n - 1, dim=-1).indices  # (B, L, n - 1)
    return torch.cat([tok[..., None], rest], -1)


@dataclass(frozen=True)
class DraftGraph:
    """nodes[0] = () the root (S1); nodes[i] a sorted tuple of (slot_rank, token_rank) pairs written into S1.
    base: the decoding it was calibrated on (its name); kind: "calibrated" or "chain"; counts: calibration
    frequency per node (the root: the anchors seen)."""

    nodes: tuple[Node, ...]
    base: str = "static(1)"
    kind: str = "calibrated"
    counts: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self):
        if not self.nodes or self.nodes[0] != ():
            raise ValueError("a draft graph's first node is the root ()")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("draft graph nodes must be distinct")
        for n in self.nodes:
            if len({r for r, _ in n}) != len(n) or any(r < 0 or k < 0 for r, k in n):
                raise ValueError(f"node {n}: one token per slot rank, ranks >= 0")

    @property
    def D(self) -> int:
        """Candidate blocks one verify scores (the root included)."""
        return len(self.nodes)

    @classmethod
    def chain(cls, D: int, base: str = "static(1)") -> DraftGraph:
        """root, {(0,0)}, {(0,0),(1,0)}, ...: the next most confident slots with their greedy tokens (the SSD /
        FreeDave chain; over static(1) it is speculative(D, naive) round for round)."""
        if D < 1:
            raise ValueError("D must be >= 1")
        return cls(tuple(tuple((r, 0) for r in range(d)) for d in range(D)), base, "chain")

    def to_json(self) -> str:
        return json.dumps(dict(nodes=[[list(p) for p in n] for n in self.nodes], base=self.base, kind=self.kind,
                               counts=list(self.counts)))  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> DraftGraph:
        d = json.loads(text)
        nodes = tuple(tuple((int(r), int(k)) for r, k in n) for n in d["nodes"])
        return cls(nodes, d["base"], d.get("kind", "calibrated"), tuple(d.get("counts", ())))

    def tensors(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """R (D, P) slot ranks and T (D, P) token ranks (-1: padding; P = the largest node), size (D,)."""
        P = max(1, max(len(n) for n in self.nodes))
        R = torch.full((self.D, P), -1, dtype=torch.long)
        T = torch.full((self.D, P), -1, dtype=torch.long)
        for i, n in enumerate(self.nodes):
            for j, (r, k) in enumerate(n):
                R[i, j], T[i, j] = r, k
        size = torch.tensor([len(n) for n in self.nodes])
        return R.to(device), T.to(device), size.to(device)


# -- calibration -------------------------------------------------------------------------------------
class GraphRecorder(Policy):
    """Decodes exactly as `base` and records, per block and row, each step's ranking and reveals, which
    `build_graph` turns into node and edge counts. One instance per calibration (its record grows)."""

    algorithm = "peer"

    def __init__(self, base: Policy, token_ranks: int = TOKEN_RANKS):
        base_select(base, torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.bool))  # validates the base
        self.base, self.token_ranks = base, token_ranks
        self.name = f"graph_recorder({base.name})"
        self.nodes: Counter = Counter()
        self.edges: Counter = Counter()
        self.anchors = 0

    def denoise(self, st: BlockState) -> None:
        steps = []  # per step: slot order (B, L), ranked tokens (B, L, R), revealed (B, L), ids after (B, L), as lists
        while st.rows_needing_work().any():
            out = st.backbone()
            masked = st.masked
            tok, conf = masked_confidence(out.logits, masked, st.mask_id)
            sel = base_select(self.base, conf, masked)
            toks = rank_tokens(out.logits, tok, self.token_ranks)  # (B, L, R)
            st.reveal(sel, tok)
            order = rank_slots(conf, st.masked)  # (B, L) slot ranks among the slots still masked in S1
            steps.append((order.tolist(), toks.tolist(), sel.tolist(), st.ids.tolist(), st.masked.any(1).tolist()))
            st.step += 1
        self._count_paths(steps)

    def _count_paths(self, steps) -> None:
        """Every (row, step t) anchor whose S1 still has a mask: the path of nodes that steps t+1, t+2, ... (0-based
        after the anchor's own step t) trace, ranked by step t's logits."""
        for t, (order, toks, sel, _, left) in enumerate(steps):
            for b in range(len(order)):
                if not any(sel[b]) or not left[b]:
                    continue  # the row did not work at t, or its S1 finished the block
                self.anchors += 1
                rank_of = {s: r for r, s in enumerate(order[b])}
                node: Node = ()
                for u in range(t + 1, len(steps)):
                    sel_u, ids_u = steps[u][2][b], steps[u][3][b]
                    pairs = []
                    for s in (i for i, x in enumerate(sel_u) if x):
                        ranked = toks[b][s]
                        if ids_u[s] not in ranked:
                            pairs = None  # a token past the ranks drafted: the path ends
                            break
                        pairs.append((rank_of[s], ranked.index(ids_u[s])))
                    if not pairs:
                        break
                    child = tuple(sorted(node + tuple(pairs)))
                    self.nodes[child] += 1
                    self.edges[(node, child)] += 1
                    node = child

    def build_graph(self, D: int) -> DraftGraph:
        """The root and, greedily, the most frequent node with an observed edge from a kept node, up to D nodes
        (ties: the smaller node, then the lexicographically first)."""
        if D < 1:
            raise ValueError("D must be >= 1")
        kept, counts = [()], [self.anchors]
        have = {()}
        while len(kept) < D:
            cand = {c for (p, c) in self.edges if p in have and c not in have}
            if not cand:
                break
            best = min(cand, key=lambda n: (-self.nodes[n], len(n), n))
            kept.append(best)
            counts.append(self.nodes[best])
            have.add(best)
        return DraftGraph(tuple(kept), self.base.name, "calibrated", tuple(counts))


def calibrate(model, prompts: list[list[int]], base: Policy, D: int, block_size: int, mask_id: int,
              eos_ids, max_new_tokens: int, pad_id: int | None = None, batch_size: int = 16,
              token_ranks: int = TOKEN_RANKS) -> DraftGraph:  # fmt: skip
    """The D-node draft graph of `base` (Static(1) or Dynamic(τ)) on held-out `prompts` (module docstring)."""
    rec = GraphRecorder(base, token_ranks)
    for i in range(0, len(prompts), batch_size):
        generate(model, prompts[i : i + batch_size], rec, block_size, mask_id, eos_ids, max_new_tokens,
                 pad_id=pad_id, trace=False)  # fmt: skip
    return rec.build_graph(D)


# -- decoding ----------------------------------------------------------------------------------------
class Spiffy(Policy):
    """Lossless self-speculation over `base` (Static(1), the default, or Dynamic(τ)) with a draft graph (module
    docstring). K (= D) and drafter ("graph" / "chain") name it in the runs frame as mode speculative does."""

    algorithm = "peer"

    def __init__(self, graph: DraftGraph, base: Policy | None = None, verify: str = "exact"):
        base = Static(1) if base is None else base
        base_select(base, torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.bool))  # validates the base
        if verify not in VERIFY_PATHS:
            raise ValueError(f"verify={verify!r}: choose one of {VERIFY_PATHS}")
        if graph.base != base.name:
            raise ValueError(f"graph calibrated over {graph.base}, decoding over {base.name}")
        self.graph, self.base, self.verify = graph, base, verify
        self.K, self.drafter = graph.D, graph.kind
        self._R, self._T, self._size = graph.tensors("cpu")  # (D, P), (D, P), (D,)
        self._kmax = int(self._T.max()) + 1 if bool((self._T >= 0).any()) else 1
        over = "" if isinstance(base, Static) else f",{base.name}"
        extra = "" if verify == "exact" else f",{verify}"
        self.name = f"spiffy({graph.D}{',chain' if graph.kind == 'chain' else ''}{over}{extra})"

    def _nodes(self, S1, remaining, conf, logits, tok):
        """The D node states: cands (B, D, L), valid (B, D) (every slot rank exists in the row), full (B, D) (no
        mask left: its logits are never read)."""
        B, L = S1.shape
        dev = S1.device
        R, T, size = self._R.to(dev), self._T.to(dev), self._size.to(dev)  # (D, P), (D, P), (D,)
        D, P = R.shape
        order = rank_slots(conf, remaining)  # (B, L)
        toks = rank_tokens(logits, tok, self._kmax)  # (B, L, kmax)
        slots = order.gather(1, R.clamp(0, L - 1).view(1, -1).expand(B, -1)).view(B, D, P)  # (B, D, P); R >= L: invalid
        flat = toks.reshape(B, L * toks.shape[-1])  # (B, L * kmax)
        tk = flat.gather(1, (slots * toks.shape[-1] + T.clamp(min=0)).view(B, -1)).view(B, D, P)
        n_rem = remaining.sum(1)  # (B,)
        valid = ((R < 0)[None] | (R[None] < n_rem[:, None, None])).all(-1)  # (B, D)
        idx = torch.where((R >= 0)[None], slots, L)  # padding writes a spare column
        cands = torch.cat([S1[:, None].expand(B, D, L), S1[:, None, :1].expand(B, D, 1)], -1).clone()
        cands = cands.scatter_(2, idx, tk)[..., :L]  # (B, D, L)
        full = valid & (size[None] == n_rem[:, None])
        return cands, valid, full

    def denoise(self, st: BlockState) -> None:
        if not bool(st.rows_needing_work().any()):
            return
        logits = st.backbone().logits  # (B, L, V) the seed of the first round
        B = st.ids.shape[0]
        ar = torch.arange(B, device=st.ids.device)
        while True:
            masked = st.masked  # (B, L)
            working = masked.any(1)
            if not bool(working.any()):  # the round's host sync
                return
            tok, conf = masked_confidence(logits, masked, st.mask_id)
            S1 = torch.where(base_select(self.base, conf, masked), tok, st.ids)  # the base's exact step
            remaining = (S1 == st.mask_id) & st.active[:, None]
            need = remaining.any(1) & working  # rows that verify
            state, walked, drafted = S1, torch.zeros_like(working, dtype=torch.long), working.long()
            if bool(need.any()):
                cands, valid, full = self._nodes(S1, remaining, conf, logits, tok)
                fwd = (valid & ~full & need[:, None]).any(0)  # (D,) nodes some row can use
                idx = fwd.nonzero().flatten()  # (M,) the root first
                slot_of = torch.full((cands.shape[1],), -1, dtype=torch.long, device=S1.device)
                slot_of[idx] = torch.arange(len(idx), device=S1.device)
                vout = st.backbone_candidates(cands[:, idx], self.verify, rows=need)  # (B, M, L, V)
                drafted = torch.where(need, valid.sum(1), drafted)
                cur = torch.zeros(B, dtype=torch.long, device=S1.device)  # node index per row: the root
                for _ in range(cands.shape[1]):
                    m = (state == st.mask_id) & st.active[:, None]
                    go = need & m.any(1)  # rows still walking (a full node ends the block)
                    lg = vout.logits[ar, slot_of[cur].clamp(min=0)]  # (B, L, V) the current node's logits
                    t2, c2 = masked_confidence(lg, m, st.mask_id)
                    nxt = torch.where(base_select(self.base, c2, m), t2, state)  # (B, L)
                    match = (cands == nxt[:, None]).all(-1) & valid & go[:, None]  # (B, D)
                    moved = match.any(1)
                    if not bool(moved.any()):
                        break
                    cur = torch.where(moved, match.long().argmax(1), cur)
                    state = torch.where(moved[:, None], nxt, state)
                    walked = walked + moved.long()
                logits = vout.logits[ar, slot_of[cur].clamp(min=0)]  # the last node's: the next seed
            st._count("rounds", working)
            st._count("drafted", working, drafted)
            st._count("accepted", working, walked + 1)
            st.stats.accept.append(torch.where(working, walked + 1, -1))
            st.reveal((state != st.ids) & masked, state)
            st.step += 1
