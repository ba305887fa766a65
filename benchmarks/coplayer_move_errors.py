"""Benchmark (diagnosis): which moves of a frozen self-play learner the goal belief gets wrong, and whether a belief
over the grid's transposition ("rows first" or "columns first" as a partner's style) recovers them.

For stag hunt runs of `benchmarks/coplayer_adaptation.py` (the learner on slot 0, a population on slot 1), the
frozen self-play learner (`learned_partner#b`) is played for K = 10 consecutive episodes in 32 envs, memory on, as
`hypermappo adapt` does, twice per seed: against the run that trained with it (`bayes_minus_stag_s*`: in
distribution) and against the run that never met it (`bayes_minus_learned_s*`: held out). Per step it records the
partner's move, the move its own policy favours (its mode), the belief's prediction and each of the belief's
hypotheses (a named goal's policy, the counted moves). Reported:

  - how often the belief, and each goal's policy alone, names the partner's mode, and how often some goal does;
  - the mispredicted modes by kind: the other axis (the partner steps up where the belief says left: two moves on
    a shortest way to a target, a choice of path), the opposite direction, staying or not;
  - a belief simulated from the recorded hypotheses (the belief's Bayes update, hazard and prior carried across
    episodes, without the online correction): as the goal model gives them; with each goal's policy on the
    transposed grid (rows and columns swapped, moves mapped alike: a partner that walks "columns first") as one
    more hypothesis per goal; and with each goal's policy half as learnt, half transposed (either way to a goal).

    python benchmarks/coplayer_move_errors.py --runs runs/bench_coplayer_adaptation --seeds 3,4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from throughput import machine, write_results  # noqa: E402

from hypermappo.adaptation import HeldOutMatch, parse_mix  # noqa: E402

UP, DOWN, LEFT, RIGHT = 1, 2, 3, 4
TRANSPOSED = torch.tensor([0, LEFT, RIGHT, UP, DOWN])  # up <-> left, down <-> right
KINDS = ("other axis", "opposite direction", "a move where it stays", "staying where it moves")


def transpose_view(obs: torch.Tensor, n_hunters: int, window: int) -> torch.Tensor:
    """A stag hunt observation (`observation=partial`: own position (row, col), one-hot id, elapsed fraction, four
    window x window planes) on the transposed grid: rows and columns swapped."""
    o = obs.clone()
    o[..., [0, 1]] = obs[..., [1, 0]]
    start = 2 + n_hunters + 1
    end = start + 4 * window * window
    planes = o[..., start:end].unflatten(-1, (4, window, window)).transpose(-1, -2).flatten(-3)
    return torch.cat([o[..., :start], planes, o[..., end:]], -1)


def kind_of(mode: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """Index into KINDS of each mispredicted move (mode != pred)."""
    vertical = lambda a: (a == UP) | (a == DOWN)  # noqa: E731
    other_axis = (mode > 0) & (pred > 0) & (vertical(mode) != vertical(pred))
    opposite = (mode > 0) & (pred > 0) & ~other_axis
    return torch.where(other_axis, 0, torch.where(opposite, 1, torch.where(mode == 0, 2, 3)))


def record(run_dir: Path, partner: str, episodes: int, envs: int) -> dict:
    """Play the held-out protocol and keep, per step, what the diagnosis needs."""
    match = HeldOutMatch(run_dir, None, envs, torch.device("cpu"))
    side = match.coplayer[0]  # its belief is made at each play's start: read it at every step
    steps = []
    act, observe = side.act, side.observe

    def side_act(s, memory, deterministic):
        steps.append({"obs": s.obs[:, side.slots].clone(), "prev": side.belief.prev.clone()})
        return act(s, memory, deterministic)

    def side_observe(s, actions, active_before):
        partner_slot = int(match.partner_slots[0])
        steps[-1].update(move=actions[:, partner_slot].clone(), ended=(s.terminated | s.truncated).clone(),
                         pred=side.log_pred[:, 0, partner_slot].exp().clone(),
                         hyp=side.belief.log_pi[:, 0, 0].exp().clone())  # [E, H, A]: before this move's update
        return observe(s, actions, active_before)

    from hypermappo.policies import population as population_mod

    population_act = population_mod.Population.act

    def partner_act(self, *a, **k):
        out = population_act(self, *a, **k)
        steps.append({"probs": None if self.policy_probs is None else self.policy_probs[:, 0].clone()})
        return out

    side.act, side.observe = side_act, side_observe
    population_mod.Population.act = partner_act
    try:
        match.play(parse_mix(partner), episodes, True, match.cfg.seed + 1000)
    finally:
        population_mod.Population.act = population_act
    merged = [{**steps[i], **steps[i + 1]} for i in range(0, len(steps), 2)]  # (learner's act, partner's act) pairs
    for m in merged:  # a scripted partner's rule: its move is its mode
        if m["probs"] is None:
            m["probs"] = torch.nn.functional.one_hot(m["move"], m["pred"].shape[-1]).float()
    out = {k: torch.stack([m[k] for m in merged]) for k in ("obs", "prev", "move", "ended", "pred", "hyp", "probs")}
    out["episode"] = torch.cumsum(out["ended"].long(), 0) - out["ended"].long()  # [T, E] episode index of each step
    out["match"] = match
    return out


def simulate(hyp: torch.Tensor, move: torch.Tensor, ended: torch.Tensor, valid: torch.Tensor, alpha: float,
             hazard: float) -> float:
    """The belief's arithmetic (algos/coplayer_bayes.py, without the online correction) over the recorded
    hypotheses hyp [T, E, M, A] (probabilities) and the counted moves: accuracy of its prediction of `move`."""
    from hypermappo.models.coplayer_goal import bayes_update, carry, predictive, switch

    T, E, M, A = hyp.shape
    prior = torch.full((E, M + 1), 1.0 / (M + 1))
    log_b, counts = prior.log(), torch.zeros(E, A)
    correct = total = 0
    for t in range(T):
        habit = ((counts + 1.0) / (counts.sum(-1, keepdim=True) + A)).log()
        log_h = torch.cat([hyp[t].clamp(min=1e-30).log(), habit.unsqueeze(1)], 1)  # [E, M + 1, A]
        hit = predictive(log_b, log_h).argmax(-1) == move[t]
        correct += int((hit & valid[t]).sum())
        total += int(valid[t].sum())
        like = log_h.gather(-1, move[t].view(-1, 1, 1).expand(-1, M + 1, 1)).squeeze(-1)
        post = switch(bayes_update(log_b, like), prior, hazard)
        counts = counts + torch.nn.functional.one_hot(move[t], A).float()
        end = ended[t].unsqueeze(-1)
        prior = torch.where(end, carry(prior, post, alpha), prior)
        log_b = torch.where(end, prior.log(), post)
    return correct / max(total, 1)


def diagnose(run_dir: Path, partner: str, episodes: int, envs: int) -> dict:
    r = record(run_dir, partner, episodes, envs)
    match = r["match"]
    belief, cfg = match.coplayer[0].belief, match.cfg
    model = belief.model
    G = model.n_goals
    valid = r["episode"] < episodes
    move, mode = r["move"], r["probs"].argmax(-1)
    pred = r["pred"].argmax(-1)
    named = r["hyp"][:, :, :G - 1]  # [T, E, G - 1, A]: the named goals' policies (as the belief used them)
    n = valid.sum()
    out = {"run": str(run_dir), "accuracy": float((pred == move)[valid].sum() / n),
           "ceiling": float((mode == move)[valid].sum() / n), "names_its_mode": float((pred == mode)[valid].sum() / n),
           "goal_names_mode": {name: float((named[:, :, g].argmax(-1) == mode)[valid].sum() / n)
                               for g, name in enumerate(match.env.spec.goal_names)},
           "some_goal_names_mode": float((named.argmax(-1) == mode.unsqueeze(-1)).any(-1)[valid].sum() / n)}
    wrong = valid & (pred != mode)
    kinds = torch.bincount(kind_of(mode[wrong], pred[wrong]), minlength=len(KINDS))
    out["mispredicted_modes"] = float(wrong.sum() / n)
    out["by_kind"] = {k: float(c / max(int(wrong.sum()), 1)) for k, c in zip(KINDS, kinds)}
    # each goal's policy on the transposed grid, from the same inputs (raw: no online correction), moves mapped back
    kw = cfg.env_kwargs
    hunters, window = int(kw.get("n_hunters", 2)), 2 * int(kw.get("view_radius", 2)) + 1
    T, E = move.shape
    with torch.no_grad():
        seen, target, prev = model.coplayer_inputs(r["obs"].flatten(0, 1), r["prev"].flatten(0, 1), belief.slots)
        raw, _ = model.net(seen, target, prev)
        prev_t = torch.where(prev < len(TRANSPOSED), TRANSPOSED[prev.clamp(max=len(TRANSPOSED) - 1)], prev)
        flipped, _ = model.net(transpose_view(seen, hunters, window), target, prev_t)
    raw = raw[:, 0, 0, :G - 1].exp().unflatten(0, (T, E))
    flipped = flipped[:, 0, 0, :G - 1][..., TRANSPOSED].exp().unflatten(0, (T, E))
    out["transposed_goal_names_mode"] = {name: float((flipped[:, :, g].argmax(-1) == mode)[valid].sum() / n)
                                         for g, name in enumerate(match.env.spec.goal_names)}
    either = ((raw.argmax(-1) == mode.unsqueeze(-1)) | (flipped.argmax(-1) == mode.unsqueeze(-1))).any(-1)
    out["either_style_names_mode"] = float(either[valid].sum() / n)
    c = cfg.coplayer
    out["simulated"] = simulate(raw, move, r["ended"], valid, c.prior_weight, c.hazard)
    out["simulated_with_transposed"] = simulate(torch.cat([raw, flipped], 2), move, r["ended"], valid, c.prior_weight,
                                                c.hazard)
    out["simulated_half_transposed"] = simulate(0.5 * raw + 0.5 * flipped, move, r["ended"], valid, c.prior_weight,
                                                c.hazard)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_coplayer_adaptation"))
    p.add_argument("--seeds", default="3,4")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--name", default="coplayer_move_errors")
    args = p.parse_args()
    torch.set_num_threads(1)
    runs = Path(args.runs) / "staghunt"
    partner = f"{runs / 'learned_partner'}#b"
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for where, fold in (("in distribution", "stag"), ("held out", "learned")):
            t = time.time()
            row = {"seed": seed, "where": where, **diagnose(runs / f"bayes_minus_{fold}_s{seed}", partner, args.k,
                                                            args.envs)}
            rows.append(row)
            print(f"[done] seed {seed} {where} in {time.time() - t:.0f}s: {json.dumps(row)}", flush=True)
    write(rows, args)


def mean(rows: list[dict], key, sub=None) -> float:
    xs = [r[key][sub] if sub else r[key] for r in rows]
    return sum(xs) / len(xs)


def write(rows: list[dict], args) -> None:
    goals = list(rows[0]["goal_names_mode"])
    lines = ["# A frozen self-play learner's moves the goal belief gets wrong", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()['cpu']}; `python "
             f"benchmarks/coplayer_move_errors.py --runs {args.runs} --seeds {args.seeds}`: the stag hunt's frozen "
             f"self-play learner against the run that trained with it (in distribution) and the one that never met "
             f"it (held out), K = {args.k} episodes in {args.envs} envs, memory on. Mean over seeds "
             f"{sorted({r['seed'] for r in rows})}. 'Its mode': the move its own policy favours (it samples its "
             f"moves).", "",
             "| | in distribution | held out |", "|---|---:|---:|"]
    parts = {w: [r for r in rows if r["where"] == w] for w in ("in distribution", "held out")}

    def line(label, key, sub=None, fmt="{:.3f}"):
        lines.append(f"| {label} | " + " | ".join(fmt.format(mean(rs, key, sub)) for rs in parts.values()) + " |")

    line("belief's action accuracy", "accuracy")
    line("ceiling (its mode)", "ceiling")
    line("the belief names its mode", "names_its_mode")
    for g in goals:
        line(f"goal '{g}' alone names its mode", "goal_names_mode", g)
    line("some goal names its mode", "some_goal_names_mode")
    line("its mode mispredicted (share of moves)", "mispredicted_modes")
    for k in KINDS:
        line(f"&nbsp;&nbsp;of these: {k}", "by_kind", k)
    for g in goals:
        line(f"goal '{g}' on the transposed grid names its mode", "transposed_goal_names_mode", g)
    line("either style of some goal names its mode", "either_style_names_mode")
    line("simulated belief, the goal model's hypotheses", "simulated")
    line("simulated belief, + each goal on the transposed grid", "simulated_with_transposed")
    line("simulated belief, each goal half as learnt, half transposed", "simulated_half_transposed")
    write_results(args.name, {"meta": {"args": vars(args), "machine": machine()}, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
