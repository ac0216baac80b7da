"""Every decoding method declared once: what it is, what it builds, what it must reproduce, what it is compared with.

    from mrp_repro import methods
    m = methods.get("spiffy")                   # a Method: name, family, mode, build, grid, lossless, controls, series
    m.family, m.lossless.name, m.controls       # "peer", "static(1)", ("speculative-naive",)
    m.policies(profile, head, backbone=bb)      # its settings grid as policies (spiffy calibrates on held-out prompts)
    methods.settings(profile, head, runs="modes_runs")   # (mode, policy) of every method whose rows that grid holds
    methods.register(methods.Method(name="toy", family="peer", mode="static", build=lambda head, **s: Static(1),
                                    grid=lambda profile, head: [{}], series="toy"))   # a new method: one declaration

A Method (frozen):
- name: the registry key (series, claims and tables name it by this); family: FAMILIES, whose method it is (ours:
  the paper's method and the package's own baselines and controls in our engine; upstream: the released code's loop,
  decoding.upstream*; peer: a published method of another paper on our engine, verify path and accounting);
- mode: the runs frame's mode (measure.schema.MODES) its rows carry, so the existing tables find their columns;
- build(head, **setting) -> Policy; grid(profile, head) -> the settings (keyword dicts for build) the profile
  decodes, empty where the profile or a missing head rules the method out; prepare (optional; profile, backbone,
  head, setting) -> more keywords for build, computed once per setting (spiffy: its graph, calibrated offline on
  held-out prompts, never the evaluated ones: calibration_problems);
- lossless: the Reference it must reproduce token for token (static(1), dynamic(τ)) or None; a lossless method's
  rows are compared with its reference's before any speed of it is reported;
- controls: the names of the methods it is judged against (what a claim subtracts from it); series: the label it
  draws; runs: the grid frames that hold its rows (RUNS: report.grids' modes_runs and controls_runs, and peers_runs
  for the peers); cite: where it comes from.

The declarations below reproduce today's grids: the settings of the methods with "modes_runs" in `runs` are
measure.runs.settings_for(profile, head) and those with "controls_runs" report.grids.control_settings(profile, head)
(tests/test_methods.py checks both, setting for setting); the peers add spiffy, spiffy-dynamic, wino and s2d2 (where
decoding.s2d2_thresholds declares an AR mode), and name the no-head drafter speculative(K, naive) as the SSD / FreeDave
chain. peers_runs (report.peers) is decoded from this registry: every method with "peers_runs" in `runs` (the peers, and
static, dynamic, MRP speculative and remasking beside them, with the SSD / FreeDave chain), each lossless method's
reference, and PeerStatic, the peer family's static(1) (measure.runs.collect_runs takes one static per algorithm as its
identical_to_static reference).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mrp_repro.decoding.engine import Dynamic, Policy, Static

__all__ = ["Method", "Reference", "PeerStatic", "FAMILIES", "RUNS", "STATIC1", "register", "unregister", "get",
           "all_methods", "settings", "remask_taus", "calibration_problems", "CONTROL_STEPS", "SPIFFY_DYNAMIC_TAU",
           "CALIBRATION_PROMPTS"]  # fmt: skip

FAMILIES = ("ours", "upstream", "peer")
RUNS = ("modes_runs", "controls_runs", "peers_runs")
#: the untrained head's direct steps (report.grids.CONTROL_STEPS, the paper's direct table)
CONTROL_STEPS = (1, 2)
#: the dynamic threshold the draft graph runs over (Spiffy's SDAR setting: dynamic(0.9))
SPIFFY_DYNAMIC_TAU = 0.9
#: held-out prompts per benchmark a draft graph is calibrated on
CALIBRATION_PROMPTS = 32


@dataclass(frozen=True)
class Reference:
    """What a lossless method reproduces token for token: kind "static" (value: tokens per step, 1) or "dynamic"
    (value: τ), decoded by the method's own family (upstream methods against the released code's static)."""

    kind: str
    value: float

    def __post_init__(self):
        if self.kind not in ("static", "dynamic"):
            raise ValueError(f"reference kind {self.kind!r}: static or dynamic")

    @property
    def name(self) -> str:
        return f"static({int(self.value)})" if self.kind == "static" else f"dynamic({self.value})"

    @property
    def method(self) -> str:
        """The registered method whose settings the reference is (static, dynamic)."""
        return self.kind

    def policy(self, family: str = "ours"):
        """The reference's policy in `family`'s engine."""
        if family == "upstream":
            from mrp_repro.decoding.upstream import UpstreamStatic
            from mrp_repro.decoding.upstream_remask import UpstreamDynamic

            if self.kind == "static" and self.value == 1:
                return UpstreamStatic()
            return UpstreamDynamic(self.value)
        return Static(int(self.value)) if self.kind == "static" else Dynamic(self.value)


STATIC1 = Reference("static", 1)


class PeerStatic(Static):
    """static(1) in the peer family (algorithm "peer"): measure.runs.collect_runs compares every row with its
    algorithm's one static (identical_to_static), so a grid holding peer rows decodes this beside our static(1). The
    same engine and policy: its tokens and counters are static(1)'s; only its name and algorithm are its own."""

    algorithm = "peer"

    def __init__(self):
        super().__init__(1)
        self.name = "peer_static(1)"


@dataclass(frozen=True)
class Method:
    name: str
    family: str
    mode: str
    build: Callable[..., Any]
    grid: Callable[[Any, Any], Sequence[dict]]
    series: str
    lossless: Reference | None = None
    controls: tuple[str, ...] = ()
    runs: tuple[str, ...] = ("peers_runs",)
    prepare: Callable[..., dict] | None = None
    cite: str = ""

    def __post_init__(self):
        from mrp_repro.measure.schema import MODES

        if self.family not in FAMILIES:
            raise ValueError(f"method {self.name!r}: family {self.family!r}, one of {FAMILIES}")
        if self.mode not in MODES:
            raise ValueError(f"method {self.name!r}: mode {self.mode!r}, one of {MODES}")
        if set(self.runs) - set(RUNS):
            raise ValueError(f"method {self.name!r}: runs {self.runs}, of {RUNS}")

    def policies(self, profile, head=None, backbone=None, prepare: bool = True) -> list:
        """Its grid's policies on `profile` (a `prepare`, e.g. a calibration, needs the backbone). prepare=False
        builds them as declared, unprepared (spiffy: the chain of D nodes, the same D verify rows as its calibrated
        graph at most): what a cost estimate needs, never what is decoded."""
        out = []
        for s in self.grid(profile, head):
            kw = dict(s)
            if self.prepare is not None and prepare:
                if backbone is None:
                    raise ValueError(f"method {self.name!r} prepares its settings on the backbone: pass backbone=")
                kw.update(self.prepare(profile, backbone, head, dict(s)))
            out.append(self.build(head, **kw))
        return out


# -- the registry ------------------------------------------------------------------------------------
_REGISTRY: dict[str, Method] = {}


def register(method: Method, replace: bool = False) -> Method:
    """Add `method` (its controls must be registered already, or be itself); replace=True overwrites a name."""
    if method.name in _REGISTRY and not replace:
        raise ValueError(f"method {method.name!r} is registered already (replace=True to overwrite)")
    missing = [c for c in method.controls if c not in _REGISTRY and c != method.name]
    if missing:
        raise ValueError(f"method {method.name!r}: controls {missing} are not registered")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> Method:
    """Remove a method (a test's toy); returns it."""
    return _REGISTRY.pop(name)


def get(name: str) -> Method:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no method {name!r}; registered: {', '.join(_REGISTRY)}") from None


def all_methods(family: str | None = None, runs: str | None = None) -> tuple[Method, ...]:
    """Registered methods in registration order, of one family and/or held by one grid frame."""
    return tuple(m for m in _REGISTRY.values()
                 if (family is None or m.family == family) and (runs is None or runs in m.runs))  # fmt: skip


def settings(profile, head=None, backbone=None, runs: str | None = None, names: Sequence[str] | None = None) -> list:
    """(mode, policy) of every registered method (or of `names`), held by grid `runs` if given: what a grid decodes."""
    ms = [get(n) for n in names] if names is not None else all_methods(runs=runs)
    return [(m.mode, p) for m in ms if runs is None or runs in m.runs for p in m.policies(profile, head, backbone)]


# -- the grids' shared pieces --------------------------------------------------------------------------
def remask_taus(profile) -> list[float]:
    """The remasking τ the profile decodes (measure.runs: {0.5, 0.3} and decoding.thresholds, descending)."""
    return sorted({0.5, 0.3, *profile.decoding.thresholds}, reverse=True)


def _ours(profile) -> bool:
    return "ours" in profile.decoding.algorithms


def _upstream(profile, head) -> bool:
    return "upstream" in profile.decoding.algorithms and head is not None


def calibration_problems(profile, n: int = CALIBRATION_PROMPTS) -> list:
    """Held-out problems, n per benchmark, never among the evaluated ones: a synthetic task's val split; a real
    benchmark's problems after the evaluation.n_prompts evaluated ones (its own test split, past the cut)."""
    from mrp_repro.tasks import synthetic

    out = []
    for task in profile.evaluation.benchmarks:
        if task in synthetic.TASKS:
            out += synthetic.generate(task, "val", n, profile.data.seed, profile.block_size)
            continue
        from mrp_repro.runtime import data_dir
        from mrp_repro.tasks import benchmarks

        cut = profile.evaluation.n_prompts
        if cut is None:
            raise ValueError(f"{task}: the whole test split is evaluated; no held-out prompts to calibrate on")
        out += benchmarks.load_benchmark(task, data_dir(profile), limit=cut + n)[cut:]
    return out


# -- builders ---------------------------------------------------------------------------------------------
def _speculative(drafter):
    def build(head, K, verify="exact"):
        from mrp_repro.decoding.mrp_modes import Speculative

        return Speculative(K, drafter, head=head if drafter == "mrp" else None, verify=verify)

    return build


def _spec_grid(drafter):
    def grid(profile, head):
        if not _ours(profile) or (drafter == "mrp" and head is None):
            return []
        return [dict(K=K, verify=profile.decoding.verify) for K in profile.decoding.speculative_k]

    return grid


def _remask_build(head, tau, rule, delta=None):
    from mrp_repro.decoding.mrp_modes import Remask

    return Remask(tau, rule, delta=delta, head=head)


def _remask_grid(profile, head):
    from mrp_repro.decoding.mrp_modes import REMASK_RULES

    if head is None:
        return []
    d = profile.decoding
    deltas = {"delta": d.remask_delta, "logp-delta": d.remask_logp_delta}
    return [dict(tau=t, rule=r, delta=deltas.get(r)) for t in remask_taus(profile) for r in REMASK_RULES
            if r in d.remask_rules]  # fmt: skip


def _frontier_grid(profile, head):
    if head is None:
        return []
    have = {round(t, 6) for t in remask_taus(profile)}
    return [dict(tau=t) for t in sorted(set(profile.decoding.frontier_thresholds), reverse=True)
            if round(t, 6) not in have]  # fmt: skip


def _veto_build(kind):
    def build(head, tau, seed=0):
        from mrp_repro.decoding.controls import ConfidenceVeto, RandomVeto

        return RandomVeto(tau, head=head, seed=seed) if kind == "random" else ConfidenceVeto(tau, head=head)

    return build


def _untrained_build(head, steps, seed=0):
    from mrp_repro.decoding.controls import UntrainedDirect, untrained_head

    return UntrainedDirect(steps, head=untrained_head(head, seed=seed))


def _upstream_spec_build(head, K, draft_logits="none", sum_scale=1.0, verify="exact"):
    from mrp_repro.decoding.upstream import UpstreamSpeculative

    return UpstreamSpeculative(K, head, draft_logits, sum_scale, verify)


def _upstream_remask_build(head, tau, delta):
    from mrp_repro.decoding.upstream_remask import UpstreamRemask

    return UpstreamRemask(tau, delta, head=head)


def _spiffy_base(dynamic: bool) -> Policy:
    return Dynamic(SPIFFY_DYNAMIC_TAU) if dynamic else Static(1)


def _spiffy_build(dynamic: bool):
    def build(head, D, verify="exact", graph=None):
        from mrp_repro.decoding.peers_spiffy import DraftGraph, Spiffy

        base = _spiffy_base(dynamic)
        return Spiffy(graph if graph is not None else DraftGraph.chain(D, base.name), base, verify=verify)

    return build


def _spiffy_grid(profile, head):
    """D = K and 2K for every speculative K: the graph at the chain's verify rows, and at twice them."""
    Ks = profile.decoding.speculative_k
    return [dict(D=D, verify=profile.decoding.verify) for D in sorted({*Ks, *(2 * K for K in Ks)})]


#: calibration recorders per backbone: id -> (a weak reference to it, {(profile hash, base): GraphRecorder}): one
#: calibration decode per (backbone, profile, base) for every D (the greedy graph of D nodes is a prefix of 2D's)
_RECORDERS: dict[int, tuple[weakref.ref, dict]] = {}


def _recorders(backbone) -> dict:
    key = id(backbone)
    ref, memo = _RECORDERS.get(key, (None, None))
    if ref is None or ref() is not backbone:
        ref, memo = weakref.ref(backbone, lambda _r: _RECORDERS.pop(key, None)), {}
        _RECORDERS[key] = (ref, memo)
    return memo


def _spiffy_prepare(dynamic: bool):
    def prepare(profile, backbone, head, setting) -> dict:
        from mrp_repro.backbone import encode_prompts
        from mrp_repro.decoding.peers_spiffy import GraphRecorder

        base = _spiffy_base(dynamic)
        memo = _recorders(backbone)
        key = (profile.hash, base.name)
        if key not in memo:
            rec = GraphRecorder(base)
            prompts = encode_prompts(backbone, calibration_problems(profile))
            bs = profile.decoding.batch_size
            for i in range(0, len(prompts), bs):
                backbone.generate(prompts[i : i + bs], rec, profile.decoding.max_new_tokens, trace=False)
            memo[key] = rec
        return dict(graph=memo[key].build_graph(setting["D"]))

    return prepare


def _tree_build(head, D, verify="exact"):
    from mrp_repro.decoding.mrp_tree import SpeculativeTree

    return SpeculativeTree(D, head=head, verify=verify)


def _tree_grid(profile, head):
    """The draft tree at the verify rows of every draft graph (spiffy's D = K and 2K) that has room for one (D >= 3)."""
    if not _ours(profile) or head is None:
        return []
    return [s for s in _spiffy_grid(profile, head) if s["D"] >= 3]


def _wino_build(head, tau1, tau2):
    from mrp_repro.decoding.peers_wino import Wino

    return Wino(tau1, tau2)


def _wino_grid(profile, head):
    """WINO at every remasking τ (τ1, beside remask(τ) and dynamic(τ)), re-masking below its published τ2 = 0.9."""
    from mrp_repro.decoding.peers_wino import WINO_TAU2

    return [dict(tau1=t, tau2=WINO_TAU2) for t in remask_taus(profile)]


def _s2d2_build(head, tau, score_cost):
    from mrp_repro.decoding.peers_s2d2 import S2D2

    return S2D2(tau, score_cost)


def _s2d2_grid(profile, head):
    """S2D2 at every decoding.s2d2_thresholds τ (empty: the profile declares no AR mode to verify with), routed with
    S2D2's SDAR cost for the block size: c = 1 at block 4 or less, c = 0 (every step verifies) above
    (their block 16)."""
    c = 1.0 if profile.block_size <= 4 else 0.0
    return [dict(tau=t, score_cost=c) for t in profile.decoding.s2d2_thresholds]


# -- the declarations ---------------------------------------------------------------------------------
def _declare() -> None:
    from mrp_repro.decoding.mrp_modes import Direct, NaiveLookahead
    from mrp_repro.decoding.upstream import UpstreamStatic
    from mrp_repro.decoding.upstream_remask import UpstreamDynamic

    modes, controls, peers = ("modes_runs",), ("controls_runs",), ("peers_runs",)
    up = lambda f: lambda p, h: f(p, h) if _upstream(p, h) else []  # noqa: E731 (an upstream grid: needs a head)
    R = register
    R(Method("static", "ours", "static", lambda head: Static(1), lambda p, h: [{}], "static(1)",
             runs=modes + controls + peers, cite="SDAR low_confidence_static"))  # fmt: skip
    R(Method("dynamic", "ours", "dynamic", lambda head, tau: Dynamic(tau),
             lambda p, h: [dict(tau=t) for t in (remask_taus(p) if h is not None else p.decoding.thresholds)],
             "dynamic(τ)", runs=modes + peers, cite="SDAR low_confidence_dynamic"))  # fmt: skip
    R(Method("dynamic-frontier", "ours", "dynamic", lambda head, tau: Dynamic(tau), _frontier_grid,
             "dynamic(τ), dense frontier", runs=controls))  # fmt: skip
    R(Method("speculative-oracle", "ours", "speculative", _speculative("oracle"), _spec_grid("oracle"),
             "oracle drafter (ceiling)", STATIC1, runs=modes))  # fmt: skip
    R(Method("speculative-naive", "peer", "speculative", _speculative("naive"), _spec_grid("naive"),
             "no-head drafter (SSD / FreeDave chain)", STATIC1, runs=modes + peers,
             cite="SSD arXiv 2510.04147; FreeDave arXiv 2510.00294"))  # fmt: skip
    R(Method("speculative-mrp", "ours", "speculative", _speculative("mrp"), _spec_grid("mrp"), "MRP speculative",
             STATIC1, ("speculative-naive", "speculative-oracle"), runs=modes + peers,
             cite="METHOD.md §3"))  # fmt: skip
    R(Method("naive-mtp", "ours", "naive", lambda head, K: NaiveLookahead(K + 1),
             lambda p, h: [dict(K=k) for k in p.decoding.lookahead_k], "naive MTP", runs=modes))  # fmt: skip
    R(Method("direct-untrained", "ours", "direct", _untrained_build,
             lambda p, h: [] if h is None else [dict(steps=s, seed=p.seed) for s in CONTROL_STEPS],
             "untrained head", runs=controls))  # fmt: skip
    R(Method("direct", "ours", "direct", lambda head, steps: Direct(steps, head=head),
             lambda p, h: [] if h is None else [dict(steps=s) for s in sorted({1, 2, *p.decoding.lookahead_k})],
             "MRP direct", controls=("dynamic-frontier", "naive-mtp", "direct-untrained"), runs=modes,
             cite="METHOD.md §4"))  # fmt: skip
    R(Method("random-veto", "ours", "remask", _veto_build("random"),
             lambda p, h: [] if h is None else [dict(tau=t, seed=p.seed) for t in remask_taus(p)], "random veto",
             runs=controls))  # fmt: skip
    R(Method("confidence-veto", "ours", "remask", _veto_build("confidence"),
             lambda p, h: [] if h is None else [dict(tau=t) for t in remask_taus(p)], "confidence veto",
             runs=controls))  # fmt: skip
    R(Method("remask", "ours", "remask", _remask_build, _remask_grid, "MRP remasking",
             controls=("dynamic-frontier", "dynamic", "random-veto", "confidence-veto"), runs=modes + peers,
             cite="METHOD.md §5"))  # fmt: skip
    # the released code (decoding.upstream*): with "upstream" in decoding.algorithms and a head
    R(Method("upstream-static", "upstream", "static", lambda head: UpstreamStatic(), up(lambda p, h: [{}]),
             "released code: static(1)", runs=modes))  # fmt: skip
    R(Method("upstream-speculative", "upstream", "speculative", _upstream_spec_build,
             up(lambda p, h: [dict(K=K, draft_logits=p.decoding.upstream_draft_logits,
                                   sum_scale=p.decoding.upstream_sum_scale, verify=p.decoding.verify)
                              for K in p.decoding.speculative_k]),
             "released code: speculative", STATIC1, runs=modes))  # fmt: skip
    R(Method("upstream-dynamic", "upstream", "dynamic", lambda head, tau: UpstreamDynamic(tau),
             up(lambda p, h: [dict(tau=t) for t in remask_taus(p)]), "released code: dynamic(τ)",
             runs=modes))  # fmt: skip
    R(Method("upstream-remask", "upstream", "remask", _upstream_remask_build,
             up(lambda p, h: [dict(tau=t, delta=x) for t in remask_taus(p) for x in p.decoding.upstream_remask_deltas]),
             "released code: remasking", controls=("upstream-dynamic",), runs=modes))  # fmt: skip
    # the peers: published training-free methods on our engine, verify path and accounting
    R(Method("spiffy", "peer", "speculative", _spiffy_build(False), _spiffy_grid, "Spiffy draft graph", STATIC1,
             ("speculative-naive",), prepare=_spiffy_prepare(False), cite="Spiffy arXiv 2509.18085"))  # fmt: skip
    R(Method("spiffy-dynamic", "peer", "speculative", _spiffy_build(True), _spiffy_grid,
             f"Spiffy draft graph over dynamic({SPIFFY_DYNAMIC_TAU})", Reference("dynamic", SPIFFY_DYNAMIC_TAU),
             ("dynamic",), prepare=_spiffy_prepare(True), cite="Spiffy arXiv 2509.18085"))  # fmt: skip
    R(Method("wino", "peer", "remask", _wino_build, _wino_grid, "WINO revocation", controls=("dynamic", "remask"),
             cite="WINO arXiv 2507.18578"))  # fmt: skip
    R(Method("s2d2", "peer", "dynamic", _s2d2_build, _s2d2_grid, "S2D2 self-speculation (AR-mode verify)",
             controls=("dynamic",), cite="S2D2 arXiv 2603.25702"))  # fmt: skip
    # beyond the peers: MRP's drafts as a tree, at the draft graphs' verify rows
    R(Method("speculative-mrp-tree", "ours", "speculative", _tree_build, _tree_grid, "MRP draft tree", STATIC1,
             ("speculative-mrp", "spiffy", "speculative-naive"), runs=peers,
             cite="issue 37: the head's top 2 at its first draft, at a draft graph's verify rows"))  # fmt: skip


_declare()
