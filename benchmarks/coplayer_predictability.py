"""Benchmark: how predictable is a held-out frozen learner from any policy that learnt the same game?

The co-player benchmark (coplayer_adaptation.py) holds out two frozen self-play learners per game (`learned`, and
`learned-early` from early in its self-play) and reports the goal belief's action accuracy against them beside a
ceiling: the partner's own most likely move under its own weights. This script measures what lies between: the
accuracy, at predicting the frozen partner's sampled moves, of
  - ceiling     the partner's own mode (its weights, its own observation),
  - teammate    the mode of the self-play teammate it was trained with (group a of the same run, fed the partner's
                observation): a policy that learnt *this* game beside *this* partner,
  - learner     the mode of each benchmark learner trained with that partner held out (`bayes_minus_learned_s*`,
                fed the partner's observation): the learner's own policy as a model of the partner (HOP's "self as a
                model of others"), per seed,
  - others      the mode of self-play learners of other seeds (`--other-seeds`; groups a and b of each, fed the
                partner's observation; trained here at the partner's budget when missing): whether learners of this
                game share one way of playing that a model could learn from some of them and apply to another,
  - belief      the Bayesian goal belief's held-out accuracy, read from the runs' own `heldout*/adaptation.json`,
  - bound       (`--bound`) what the belief's per-partner online correction could reach on its own features: in K
                consecutive held-out episodes (`hypermappo adapt`'s protocol, memory on), the correction's
                multinomial logistic regression on the goal network's last hidden layer (on top of the belief's
                prediction) fitted offline, by L-BFGS, to each env's episodes 1..K/2 and scored on K/2+1..K (the
                data one env's partner gives), and fitted on every env's first half at once (E times the data);
                beside them the online correction's own accuracy on the same episodes.
  - ties        (`--ties`, stag hunt) the other kind of held-out partner the belief falls short on, a scripted hare
                hunter (`bayes_minus_hare_s*` runs): its rule walks to the nearest hare and breaks distance ties by the
                hares' index in the env's state, which no observation shows; the belief's accuracy in K held-out
                episodes on the moves made with two or more hares equally near, and on the others.
Rollouts: the benchmark learner at slot 0 acting by its mode (as `hypermappo adapt` does), the frozen partner at
slot 1 sampling its moves, E envs, `--steps` steps, one seed per learner.

    python benchmarks/coplayer_predictability.py --runs runs/bench_coplayer
    python benchmarks/coplayer_predictability.py --runs runs/bench_coplayer --games staghunt --other-seeds 200,300 \
        --bound --name coplayer_predictability_bound
    python benchmarks/coplayer_predictability.py --runs runs/bench_coplayer --games staghunt --ties --name ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hypermappo.envs.registry import make_env
from hypermappo.policies.loaded import load_policy

ROOT = Path(__file__).resolve().parents[1]
PARTNERS = {"learned": ("learned_partner", "heldout"), "learned-early": ("learned_partner_early", "heldout_early")}


@torch.no_grad()
def agreement(learner_run: Path, partner_run: Path, num_envs: int, steps: int, seed: int,
              others: list[Path] = ()) -> dict[str, float]:
    me = load_policy(learner_run, group="learner", checkpoint="newest_intact", device="cpu")
    partner = load_policy(partner_run, group="b", checkpoint="newest_intact", device="cpu")
    teammate = load_policy(partner_run, group="a", checkpoint="newest_intact", device="cpu")
    strangers = {f"{run.name}#{g}": load_policy(run, group=g, checkpoint="newest_intact", device="cpu")
                 for run in others for g in ("a", "b")}
    env = make_env(me.cfg.env, num_envs, "cpu", **me.cfg.env_kwargs)
    torch.manual_seed(seed)
    s = env.reset(seed=seed)
    hits = {"ceiling": 0, "teammate": 0, "learner": 0, **{name: 0 for name in strangers}}
    n = 0
    for _ in range(steps):
        own, theirs = s.obs[:, 0:1], s.obs[:, 1:2]
        d = partner.actor(theirs).dist
        move = d.sample()
        hits["ceiling"] += int((d.mode() == move).sum())
        hits["teammate"] += int((teammate.actor(theirs).dist.mode() == move).sum())
        hits["learner"] += int((me.actor(theirs).dist.mode() == move).sum())
        for name, other in strangers.items():
            hits[name] += int((other.actor(theirs).dist.mode() == move).sum())
        n += move.numel()
        s = env.step(torch.cat([me.actor(own).dist.mode(), move], 1))
    return {k: v / n for k, v in hits.items()}


def other_learners(base: Path, partner_dir: str, seeds: list[int]) -> list[Path]:
    """Self-play runs of other seeds beside the partner's (its recipe and budget), trained when missing."""
    import subprocess

    runs = []
    for seed in seeds:
        run = base / f"{partner_dir}_seed{seed}"
        if not (run / "summary.json").exists():
            subprocess.run([sys.executable, "-m", "hypermappo.cli", "train", str(base / partner_dir / "config.yaml"),
                            f"seed={seed}", f"run_dir={run}", "log.progress=false"], check=True,
                           stdout=subprocess.DEVNULL)
        runs.append(run)
    return runs


def _fit(x: torch.Tensor, base: torch.Tensor, moves: torch.Tensor, weight_decay: float) -> torch.Tensor:
    """Correction weights W [B, H + 1, A] maximising sum_b log softmax(base_b + x_b W_b)[moves_b] - wd |W|^2 over
    x [B, M, H + 1], base [B, M, A] (log-probabilities), moves [B, M]: B independent regressions (the objective is
    a sum of separate convex terms), one L-BFGS run."""
    W = torch.zeros(x.shape[0], x.shape[-1], base.shape[-1], requires_grad=True)
    opt = torch.optim.LBFGS([W], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logits = base + x @ W
        loss = F.cross_entropy(logits.flatten(0, 1), moves.flatten(), reduction="sum") / moves.shape[1] \
            + weight_decay * (W ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return W.detach()


def recorded_play(match, partner: str, episodes: int, seed: int, before, after) -> list[tuple]:
    """`match.play` against `partner` (memory on) with its first co-player learner's every step recorded: per step
    before() (taken before the learner acts), after() (once the belief has predicted), then the partner's move."""
    from hypermappo.adaptation import parse_partner

    side, slot = match.coplayer[0], int(match.partner_slots[0])
    steps: list[tuple] = []
    act, observe = side.act, side.observe

    def recording_act(s, memory, deterministic):
        ahead = before()
        out = act(s, memory, deterministic)
        steps.append((*ahead, *after()))
        return out

    def recording_observe(s, actions, active_before):
        steps[-1] = (*steps[-1], actions[:, slot].clone())
        observe(s, actions, active_before)

    side.act, side.observe = recording_act, recording_observe
    match.play(parse_partner(partner), episodes, True, seed)
    return steps


def correction_bound(learner_run: Path, partner_run: Path, num_envs: int, episodes: int, seed: int,
                     weight_decay: float = 0.01) -> dict[str, float]:
    """The online correction's accuracy on episodes K/2+1..K against the frozen partner, and that of the same
    regression fitted offline to each env's episodes 1..K/2 ("per env") or to all envs' ("pooled")."""
    from hypermappo.adaptation import HeldOutMatch

    match = HeldOutMatch(learner_run, None, num_envs, torch.device("cpu"))
    side = match.coplayer[0]
    if side.belief is None and side.other_goal is None:
        raise SystemExit(f"{learner_run}: not a run with the Bayesian goal belief")
    slot = int(match.partner_slots[0])
    # per step: hidden [E, H], log-predicted [E, A], episode index [E], the move [E]
    steps = recorded_play(match, f"{partner_run}#b", episodes, seed, lambda: (), lambda: (
        side.belief.h[:, 0, 0].clone(), side.log_pred[:, 0, slot].clone(), side.belief.episode_index.clone()))
    h, base, episode, moves = (torch.stack(x, 1) for x in zip(*steps))  # [E, T, ...]
    x = torch.cat([h, torch.ones(*h.shape[:2], 1)], -1)
    first, last = episode < episodes // 2, (episode >= episodes // 2) & (episode < episodes)
    n_first = int(first[0].sum())  # every env plays its episodes in lockstep (a fixed episode length)
    if not bool((first.sum(1) == n_first).all()):
        raise SystemExit("episodes of unequal length: the per-env split needs a fixed episode length")

    def split(mask):
        return (x[mask].view(x.shape[0], -1, x.shape[-1]), base[mask].view(x.shape[0], -1, base.shape[-1]),
                moves[mask].view(x.shape[0], -1))

    (x1, b1, m1), (x2, b2, m2) = split(first), split(last)
    online = float((b2.argmax(-1) == m2).float().mean())
    with torch.enable_grad():
        W = _fit(x1, b1, m1, weight_decay)
        Wp = _fit(x1.flatten(0, 1)[None], b1.flatten(0, 1)[None], m1.flatten()[None], weight_decay)
    per_env = float(((b2 + x2 @ W).argmax(-1) == m2).float().mean())
    pooled = float(((b2 + x2 @ Wp[0]).argmax(-1) == m2).float().mean())
    return {"online": online, "per_env": per_env, "pooled": pooled}


def hare_ties(learner_run: Path, num_envs: int, episodes: int, seed: int) -> dict[str, float]:
    """The belief's accuracy against a held-out scripted hare hunter on moves with a tie for the nearest hare (the
    rule's choice rests on the hares' order in the env's state) and on the others; each kind's share of moves."""
    from hypermappo.adaptation import HeldOutMatch

    match = HeldOutMatch(learner_run, None, num_envs, torch.device("cpu"))
    side, env, slot = match.coplayer[0], match.env, int(match.partner_slots[0])
    hares = slice(env.n_stags, env.n_prey)  # the env's prey: stags first, then hares
    # per step: positions before the move (the partner's, the hares' and which are alive), the belief's prediction,
    # the move
    steps = recorded_play(match, "scripted:staghunt_hare", episodes, seed,
                          lambda: (env.hunters[:, slot].clone(), env.prey[:, hares].clone(),
                                   env.prey_alive[:, hares].clone()),
                          lambda: (side.log_pred[:, 0, slot].argmax(-1),))
    me, prey, alive, pred, move = (torch.stack(x) for x in zip(*steps))  # [T, E, ...]
    dist = (prey - me.unsqueeze(2)).abs().sum(-1).float().masked_fill(~alive, float("inf"))  # [T, E, H]
    nearest = (dist == dist.min(-1, keepdim=True).values) & alive
    tie, some = nearest.sum(-1) > 1, alive.any(-1)
    # one nearest hare as far in rows as in columns: the rule moves along rows first, a convention observable on the
    # grid but not one every hare hunter in training shares
    gap = (prey - me.unsqueeze(2)).gather(2, nearest.float().argmax(-1)[..., None, None].expand(-1, -1, 1, 2))[:, :, 0]
    diagonal = ~tie & (gap[..., 0].abs() == gap[..., 1].abs()) & (gap[..., 0] != 0)
    hit = pred == move
    out = {}
    for name, mask in (("tie", tie & some), ("diagonal", diagonal & some), ("straight", ~tie & ~diagonal & some)):
        out[f"{name}_accuracy"] = float(hit[mask].float().mean())
        out[f"{name}_share"] = float(mask.sum() / some.sum())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="runs/bench_coplayer")
    ap.add_argument("--games", default="staghunt,snowdrift,coingame")
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200, help="env steps per rollout (8 episodes of 25)")
    ap.add_argument("--name", default="coplayer_predictability")
    ap.add_argument("--other-seeds", default="", help="self-play learners of these seeds as predictors too")
    ap.add_argument("--bound", action="store_true", help="the online correction's offline bound (K = --episodes)")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--ties", action="store_true", help="only the stag hunt's held-out hare hunter, ties or not")
    args = ap.parse_args()
    torch.set_num_threads(1)
    other_seeds = [int(x) for x in args.other_seeds.split(",") if x]
    if args.ties:
        return ties_report(args)
    rows = []
    for game in args.games.split(","):
        base = Path(args.runs) / game
        learners = sorted(base.glob("bayes_minus_learned_s*"))
        for label, (partner_dir, heldout) in PARTNERS.items():
            if not (base / partner_dir / "summary.json").exists() or not learners:
                print(f"[skip] {game} {label}: no partner run or no bayes_minus_learned_s* learners under {base}")
                continue
            others = other_learners(base, partner_dir, other_seeds) if other_seeds else []
            per_seed, belief, bounds = [], [], []
            for run in learners:
                seed = int(run.name.rsplit("_s", 1)[1])
                per_seed.append(agreement(run, base / partner_dir, args.num_envs, args.steps, 1000 + seed, others))
                result = run / heldout / "adaptation.json"
                if result.exists():
                    on = [r for r in json.loads(result.read_text())["results"] if r["memory"]]
                    belief.append(on[0]["action_accuracy"]["overall"])
                if args.bound:
                    bounds.append(correction_bound(run, base / partner_dir, 32, args.episodes, 1000 + seed))
                    print(f"  {run.name} vs {label}: {bounds[-1]}", flush=True)
            stranger = [statistics.mean(v for k, v in s.items() if "#" in k) for s in per_seed] if others else []
            each = sorted({k for k in per_seed[0] if "#" in k})
            row = {"game": game, "partner": label, "seeds": len(per_seed),
                   **{k: statistics.mean(s[k] for s in per_seed) for k in ("ceiling", "teammate", "learner")},
                   "learner_min": min(s["learner"] for s in per_seed), "learner_max": max(s["learner"] for s in per_seed),
                   "belief": statistics.mean(belief) if belief else None,
                   "others": statistics.mean(stranger) if stranger else None,
                   "others_each": {k: statistics.mean(s[k] for s in per_seed) for k in each},
                   **({f"bound_{k}": statistics.mean(b[k] for b in bounds) for k in bounds[0]} if bounds else {})}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = ROOT / "benchmarks" / "results"
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu, "runs": args.runs,
            "num_envs": args.num_envs, "steps": args.steps, "other_seeds": other_seeds,
            "bound": {"episodes": args.episodes, "num_envs": 32, "weight_decay": 0.01} if args.bound else None}
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["# How predictable is a held-out frozen learner?\n",
             f"{meta['date']}; {cpu}; `python benchmarks/coplayer_predictability.py {' '.join(sys.argv[1:])}`: rollouts of "
             f"{args.steps} steps x {args.num_envs} envs, the benchmark learner (slot 0, its mode) with the frozen "
             "partner (slot 1, sampling its moves). Accuracy at predicting the partner's sampled move: its own mode "
             "(ceiling), its self-play teammate's mode and the held-out benchmark learners' own mode, each fed the "
             "partner's observation, the self-play learners of other seeds (groups a and b, same recipe and budget; "
             "mean over them [min-max]) when asked for, and the Bayesian goal belief's held-out accuracy (memory on, "
             "from the runs' `adaptation.json`). Learner: mean over seeds [min-max].\n",
             "| game | held-out partner | seeds | ceiling (its own mode) | its self-play teammate | the learner's own "
             "policy | other seeds' self-play learners | goal belief (held out) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]

    def cell(v):
        return f"{v:.2f}" if v is not None else "n/a"

    for r in rows:
        spread = f" [{min(r['others_each'].values()):.2f}-{max(r['others_each'].values()):.2f}]" if r["others_each"] else ""
        lines.append(f"| {r['game']} | {r['partner']} | {r['seeds']} | {r['ceiling']:.2f} | {r['teammate']:.2f} | "
                     f"{r['learner']:.2f} [{r['learner_min']:.2f}-{r['learner_max']:.2f}] | {cell(r['others'])}{spread} "
                     f"| {cell(r['belief'])} |")
    if args.bound:
        lines += ["", f"The online correction against its offline bound, K = {args.episodes} consecutive held-out "
                  f"episodes in 32 envs (memory on): accuracy on episodes {args.episodes // 2 + 1}..{args.episodes}, "
                  f"mean over seeds. Offline: the same regression (goal network's last hidden layer + 1, on top of "
                  f"the belief's prediction, L2 0.01) fitted by L-BFGS to episodes 1..{args.episodes // 2}.", "",
                  "| game | held-out partner | online correction (the belief) | offline, each env's own data | "
                  "offline, every env's data at once |", "|---|---|---:|---:|---:|"]
        lines += [f"| {r['game']} | {r['partner']} | {r['bound_online']:.3f} | {r['bound_per_env']:.3f} | "
                  f"{r['bound_pooled']:.3f} |" for r in rows if "bound_online" in r]
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def ties_report(args) -> None:
    runs = sorted((Path(args.runs) / "staghunt").glob("bayes_minus_hare_s*"))
    if not runs:
        raise SystemExit(f"no bayes_minus_hare_s* runs under {Path(args.runs) / 'staghunt'}")
    per_seed = []
    for run in runs:
        per_seed.append(hare_ties(run, 32, args.episodes, 1000 + int(run.name.rsplit("_s", 1)[1])))
        print(f"  {run.name}: {per_seed[-1]}", flush=True)
    mean = {k: statistics.mean(r[k] for r in per_seed) for k in per_seed[0]}
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = ROOT / "benchmarks" / "results"
    (out / f"{args.name}.json").write_text(json.dumps({"meta": {"date": date, "cpu": cpu, "runs": args.runs,
                                                                "episodes": args.episodes, "num_envs": 32},
                                                       "per_seed": per_seed, "mean": mean}, indent=1))
    lines = ["# A held-out hare hunter: the moves its observation cannot explain\n",
             f"{date}; {cpu}; `python benchmarks/coplayer_predictability.py {' '.join(sys.argv[1:])}`: the goal "
             f"belief of each stag hunt run trained with the scripted hare hunter held out (`bayes_minus_hare_s*`, "
             f"{len(runs)} seeds) against it, K = {args.episodes} consecutive episodes in 32 envs, memory on. The "
             "rule walks to the nearest hare and breaks a tie for the nearest by the hares' order in the env's "
             "state, which no observation shows: its moves split by whether two or more hares were equally near "
             "when it moved, and the others by whether the nearest was as many rows away as columns. Mean over "
             "seeds.\n",
             "| moves | share of the partner's moves | belief's action accuracy |", "|---|---:|---:|",
             f"| a tie for the nearest hare (the env's hidden order decides) | {mean['tie_share']:.3f} | "
             f"{mean['tie_accuracy']:.3f} |",
             f"| one nearest hare, as many rows away as columns (the rule's rows-first convention decides) | "
             f"{mean['diagonal_share']:.3f} | {mean['diagonal_accuracy']:.3f} |",
             f"| one nearest hare, the rest | {mean['straight_share']:.3f} | {mean['straight_accuracy']:.3f} |"]
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
