"""Typed run configuration: YAML presets + `key=value` overrides, validated before a run starts.

Every key is a dataclass field with a type, a default, a one-line help and (where it matters) a
range or a set of choices. Unknown keys, wrong types and out-of-range values raise `UserError`
naming the key and what was expected; booleans accept true/false/yes/no/1/0 and nothing else.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hypermappo.errors import UserError

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def opt(default: Any, help: str, *, choices: list | None = None, min: float | None = None,
        max: float | None = None, min_exclusive: bool = False, max_exclusive: bool = False,
        words: list | None = None) -> Any:
    """A config field: default, one-line help and the checks its value must pass (floats must also be finite);
    `words`: the strings an `int | str` field takes besides its numbers (e.g. auto)."""
    meta = {"help": help, "choices": choices, "min": min, "max": max, "min_exclusive": min_exclusive,
            "max_exclusive": max_exclusive, "words": words}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class PPOConfig:
    """PPO / MAPPO hyperparameters; defaults are the MAPPO reference code's MPE settings."""

    lr_actor: float = opt(7e-4, "actor learning rate (Adam)", min=0.0, min_exclusive=True, max=1.0)
    lr_critic: float = opt(7e-4, "critic learning rate (Adam)", min=0.0, min_exclusive=True, max=1.0)
    adam_eps: float = opt(1e-5, "Adam epsilon", min=0.0, min_exclusive=True, max=1.0)
    weight_decay: float = opt(0.0, "Adam weight decay", min=0.0, max=1.0)
    ppo_epoch: int = opt(10, "passes over each rollout", min=1)
    num_mini_batch: int = opt(1, "mini-batches per pass", min=1)
    clip: float = opt(0.2, "PPO ratio clip epsilon (also the value clip range)", min=0.0, min_exclusive=True,
                      max=1.0, max_exclusive=True)
    entropy_coef: float = opt(0.01, "entropy bonus coefficient c_H", min=0.0, max=1.0)
    value_coef: float = opt(1.0, "value loss coefficient c_V", min=0.0, max=100.0)
    gamma: float = opt(0.99, "discount factor", min=0.0, max=1.0)
    gae_lambda: float = opt(0.95, "GAE lambda", min=0.0, max=1.0)
    max_grad_norm: float = opt(10.0, "gradient-norm clip for actor and critic (0 = off)", min=0.0)
    value_clip: bool = opt(True, "clip the value update around the old prediction")
    huber: bool = opt(True, "Huber value loss (else squared error)")
    huber_delta: float = opt(10.0, "Huber delta", min=0.0, min_exclusive=True)
    value_norm: str = opt("valuenorm", "value target normalisation", choices=["none", "valuenorm", "popart"])
    advantage_norm: bool = opt(True, "normalise advantages over active agents")
    bootstrap_truncated: bool = opt(True, "bootstrap V(final obs) at time-limit truncation "
                                          "(the reference code treats truncation as terminal)")
    death: str = opt("auto", "a dead agent's targets: episode (reference: it stays in the episode with the team reward, "
                             "GAE cut only at episode ends, death-masked critic input; losses weight alive steps only), "
                             "agent (its GAE trace ends at its death, dead slots get 0); auto = episode for envs with a "
                             "team reward, else agent", choices=["auto", "episode", "agent"])
    minibatch_over: str = opt("samples", "what a mini-batch draws: samples = (t, env) rows with all agents together, "
                                         "agents = (t, env, agent) triples as the reference (the rows they touch are "
                                         "evaluated whole, only the drawn agents carry loss weight)",
                              choices=["samples", "agents"])
    micro_batch_size: int = opt(0, "agent samples (rows x agents) per gradient-accumulation block: a larger "
                                   "mini-batch is evaluated in row blocks whose share-weighted gradients add up to "
                                   "the whole's (float rounding aside), with less memory (algos/micro_batch.py); "
                                   "0 = the whole mini-batch in one pass (the default: blocks were not reliably "
                                   "faster, benchmarks/micro_batch.py)", min=0)
    data_chunk_length: int | str = opt("auto", "recurrent training chunk length (steps); it must divide rollout_length; "
                                               "auto = the largest divisor of rollout_length up to 10",
                                       min=1, words=["auto"])
    lr_decay: bool = opt(False, "decay learning rates linearly to 0 over the run")
    compile: str = opt("auto", "compiled training step (torch.compile): collection's policy forward and the whole "
                               "PPO update (loss, backward, clipping, Adam) as static-shape graphs, compiled during the "
                               "first update and cached; auto = on for runs of >= 1M env steps whose graphs this "
                               "machine's cache holds (>= 10M where compiling them would take minutes) and whose actor "
                               "and critic compile without graph breaks (the run header says which and why); float-level "
                               "differences from eager", choices=["auto", "on", "off"])


@dataclass
class MADDPGConfig:
    """MADDPG hyperparameters (algo=maddpg; see algos/maddpg.py)."""

    lr_actor: float = opt(1e-3, "actor learning rate (Adam)", min=0.0, min_exclusive=True, max=1.0)
    lr_critic: float = opt(1e-3, "critic learning rate (Adam)", min=0.0, min_exclusive=True, max=1.0)
    gamma: float = opt(0.95, "discount factor", min=0.0, max=1.0)
    tau: float = opt(0.01, "Polyak rate of the target actor and critic (1 = copy every gradient step)", min=0.0,
                     min_exclusive=True, max=1.0)
    batch_size: int = opt(1024, "replay samples (env steps of a group, all its agents) per gradient step", min=1)
    buffer_size: int = opt(200_000, "replay capacity in env steps (rows of all agents); the oldest are overwritten",
                           min=1)
    warmup_steps: int = opt(25_000, "env steps (summed over envs) collected before the first gradient step", min=0)
    update_interval: int = opt(100, "env steps (summed over envs) per gradient step after the warm-up", min=1)
    max_grad_norm: float = opt(0.5, "gradient-norm clip for actor and critic (0 = off)", min=0.0)
    gumbel_temperature: float = opt(1.0, "straight-through Gumbel-softmax temperature (discrete actions)", min=0.0,
                                    min_exclusive=True, max=100.0)
    noise_std: float = opt(0.1, "Gaussian exploration noise, as a fraction of half the Box range (continuous "
                                "actions), clipped to the bounds", min=0.0, max=10.0)
    logit_reg: float = opt(1e-3, "weight of the mean squared policy output (logits / means) in the actor loss",
                           min=0.0, max=10.0)


@dataclass
class ModelConfig:
    """Actor network (and the critic's trunk unless `critic.hidden_sizes` says otherwise)."""

    hidden_sizes: list[int] = opt([64, 64], "hidden layer widths")
    activation: str = opt("relu", "hidden activation", choices=["relu", "tanh"])
    layer_norm: bool = opt(True, "LayerNorm after each hidden layer")
    feature_norm: bool = opt(True, "LayerNorm on the network input")
    share_params: bool = opt(True, "one network for all agents (else separate weights, one batched call)")
    agent_id: bool = opt(False, "append the agent's one-hot id to the actor input")
    rnn_hidden: int = opt(64, "GRU hidden size (actor=rnn)", min=1)
    gain: float = opt(0.0, "orthogonal init gain of hidden layers; 0 = follow the activation as the reference "
                           "(nn.init.calculate_gain: sqrt(2) for relu, 5/3 for tanh)", min=0.0, max=100.0)
    policy_gain: float = opt(0.01, "orthogonal init gain of the policy head", min=0.0, max=100.0)
    log_std_init: float = opt(0.0, "initial log-std of Gaussian actions", min=-20.0, max=2.0)

    def hidden_gain(self) -> float:
        """`gain`, with 0 meaning the activation's own gain (what the reference's init uses)."""
        if self.gain > 0:
            return self.gain
        return 5 / 3 if self.activation == "tanh" else 2 ** 0.5


@dataclass
class CriticConfig:
    """Centralised (MAPPO) or local (IPPO) value function."""

    input: str = opt("auto", "critic input: auto (mappo -> state_agent_id, ippo -> obs), obs (local), "
                             "obs_concat (all agents' obs), state (env global state), state_agent_id "
                             "(state + agent one-hot), state_obs_agent_id (state + own obs + one-hot)",
                     choices=["auto", "obs", "obs_concat", "state", "state_agent_id", "state_obs_agent_id"])
    recurrent: str = opt("auto", "GRU critic: auto follows the actor (actor=rnn)", choices=["auto", "on", "off"])
    hidden_sizes: list[int] = opt([], "critic widths; empty = same as model.hidden_sizes")
    share_params: str = opt("auto", "one critic for all agents: auto follows model.share_params",
                            choices=["auto", "on", "off"])
    arch: str = opt("mlp", "critic network: mlp (MAPPO's), or hyper: a hypernetwork on the agent's one-hot id "
                           "adds per-agent increments to every critic layer (HyperMARL's critic; starts equal to mlp)",
                    choices=["mlp", "hyper"])
    hyper_hidden: int = opt(64, "critic.arch=hyper: hypernetwork width (2 hidden layers)", min=1)
    hyper_lr: float = opt(1e-4, "critic.arch=hyper: the critic hypernetwork's learning rate", min=0.0,
                          min_exclusive=True, max=1.0)


@dataclass
class HyperConfig:
    """Hyper-MAPPO (actor=hyper): actor weights theta = theta_base + delta(context) from a hypernetwork."""

    context: list[str] = opt(["agent_id"], "hypernetwork inputs, any of: agent_id, obs, history, coplayer (the "
                                           "co-player model's belief; needs coplayer.enabled)")
    id_encoding: str = opt("onehot", "agent identity as one-hot or a learned embedding",
                           choices=["onehot", "embedding"])
    id_embed_dim: int = opt(16, "agent-id embedding size (id_encoding=embedding)", min=1)
    obs_aggregation: str = opt("attention", "how all agents' encoded observations are combined: attention "
                                            "(own encoding queries all), mean (mean-pooled + own), own",
                               choices=["attention", "mean", "own"])
    obs_embed_dim: int = opt(16, "observation encoder width", min=1)
    attention_heads: int = opt(4, "attention heads (obs_embed_dim must be divisible by it)", min=1)
    attention_kernel: str = opt("auto", "attention over agents: fused (a C kernel compiled on first use, CPU), dense "
                                        "(PyTorch ops), auto = fused where it can be built",
                                choices=["auto", "fused", "dense"])
    history_hidden: int = opt(64, "GRU size of the history context (over the agent's observations)", min=1)
    hidden: int = opt(0, "hypernetwork hidden width (its code z; cost per sample grows with it for per-sample "
                         "contexts); 0 = auto: 16 with an obs / history / coplayer context, else 64", min=0)
    mlp_layers: int = opt(2, "hidden layers of the hypernetwork MLP between the (LayerNorm-ed) context and the weight "
                             "generators; 0 = the generators read the context directly", min=0)
    layers: str = opt("auto", "which actor layers are generated: all, last (policy head only), hidden; auto = last "
                              "with an obs / history / coplayer context, else all",
                      choices=["auto", "all", "last", "hidden"])
    hidden_scale: bool = opt(False, "with layers=last: a generated per-unit scale on the shared hidden layers")
    output: str = opt("increment", "increment (theta_base + delta), full (generated weights, no base) or accumulate "
                                   "(theta_t = theta_{t-1} + delta_t from theta_base at episode start / death: a "
                                   "per-agent recurrent weight state, trained on ppo.data_chunk_length chunks; "
                                   "hidden+1 floats per agent at rank 0, the generated weights at rank > 0)",
                      choices=["increment", "full", "accumulate"])
    decay: float = opt(0.0, "output=accumulate: pull toward theta_base per step, "
                            "theta_t - theta_base = (1 - decay) (theta_{t-1} - theta_base) + delta_t", min=0.0, max=1.0)
    rank: int = opt(-1, "low-rank generation delta = U V with this rank (0 = full matrices); -1 = auto: 1 for "
                        "increments from an obs / history / coplayer context, else 0", min=-1)
    lr: float = opt(1e-4, "hypernetwork learning rate", min=0.0, min_exclusive=True, max=1.0)
    alpha: float = opt(0.0, "smoothness weight: ||delta_t - delta_{t-1}||^2 (+ target term); suggested 0.1", min=0.0)
    beta: float = opt(0.0, "alignment weight: KL(pi_old || pi_new) on stored behaviour params, any actor; "
                           "suggested 0.05",
                      min=0.0)
    target: str = opt("none", "target hypernetwork for the smoothness term: none, hard (copy every "
                              "target_interval updates), polyak (tau each update)", choices=["none", "hard", "polyak"])
    target_interval: int = opt(10, "K: updates between hard target syncs", min=1)
    target_tau: float = opt(0.01, "Polyak rate of the target hypernetwork", min=0.0, min_exclusive=True, max=1.0)
    init_from: str = opt("", "warm start: load the hypernetwork from this run directory's newest intact checkpoint "
                             "(shapes must match; empty = fresh init)")
    init_base: bool = opt(False, "with init_from: also load the actor's base weights (trunk, head, log_std)")


@dataclass
class CoplayerConfig:
    """Co-player model: from a learner's own observations (and the others' public moves), predict what the other
    agents do and what they are after. `bayes` (models/coplayer_goal.py, algos/coplayer_bayes.py): a
    goal-conditioned policy of the others and a Bayesian belief over each co-player's goal, carried across
    episodes; `gru` (models/coplayer.py): a recurrent predictor of actions, goals and subgoals. The belief can
    feed the policy or be the hypernetwork's context."""

    enabled: bool = opt(False, "train a co-player model next to each learner")
    model: str = opt("bayes", "bayes = goal-conditioned co-player policy + Bayesian goal belief; gru = recurrent "
                              "predictor (an embedding as the belief); subgoal = OMG's subgoal inference (a CVAE "
                              "over each co-player's future state, a pre-trained state VAE as its prior)",
                     choices=["bayes", "gru", "subgoal"])
    action_weight: float = opt(1.0, "loss weight of predicting each co-player's next action", min=0.0)
    goal_weight: float = opt(0.0, "gru: loss weight of predicting each co-player's current goal (env goal_names; "
                                  "scripted partners' true target, else the goal it completes next)", min=0.0)
    subgoal_weight: float = opt(0.0, "gru: loss weight of predicting each co-player's observation subgoal_horizon "
                                     "steps ahead (OMG's subgoal)", min=0.0)
    subgoal_at: str = opt("horizon", "the subgoal target: a co-player's observation subgoal_horizon steps ahead, "
                                     "or at its next rewarded step (reward) in the same episode",
                          choices=["horizon", "reward"])
    subgoal_horizon: int = opt(5, "H: steps ahead of the subgoal target (gru, subgoal_at=horizon); subgoal: the "
                                  "window of future steps a co-player's subgoal is chosen from", min=1)
    subgoal_select: str = opt("auto", "subgoal: which of a co-player's next H states is its subgoal in training: the "
                                      "one the learner's critic values most (optimistic, OMG's choice in cooperative "
                                      "games) or least (conservative, general-sum); auto = optimistic where the env's "
                                      "reward is the team's", choices=["auto", "optimistic", "conservative"])
    subgoal_latent: int = opt(8, "subgoal: size of the latent subgoal per co-player slot (what the policy reads)",
                              min=1)
    kl_weight: float = opt(0.01, "subgoal: weight of the KL terms: KL(q(z | history) || p(z | subgoal state)) in the "
                                 "CVAE's loss, KL(p(z | state) || N(0, I)) in the state VAE's (against a squared "
                                 "error summed over the state's features)", min=0.0)
    prior_updates: int = opt(5, "subgoal: the state VAE (the CVAE's prior) trains on the states of the first this "
                                "many rollouts, then is frozen", min=1)
    memory: str = opt("auto", "co-player memory: episode (reset at each episode start) or persistent (carried "
                              "across episodes, reset when a co-player's partner_id changes); auto = persistent "
                              "for bayes, episode for gru", choices=["auto", "episode", "persistent"])
    prior_weight: float = opt(0.5, "bayes, persistent memory: alpha, the next episode's goal prior = alpha * last "
                                   "prior + (1 - alpha) * the episode's final posterior", min=0.0, max=1.0)
    hazard: float = opt(0.05, "bayes: probability per step that a co-player changes goal (the belief moves this "
                              "far back towards the episode's prior after each update)", min=0.0, max=1.0)
    event_reset: float = opt(0.0, "bayes: how far a co-player's belief moves back to the episode's prior when it "
                                  "completes a goal (env goal_event: a capture, a coin picked): 1 = it picks its next "
                                  "goal afresh, 0 = only the per-step hazard", min=0.0, max=1.0)
    online_lr: float = opt(1.0, "bayes: learning rate of a per-partner online correction of the goal policies' "
                                "moves (logistic regression on the goal network's last hidden layer, learnt from the "
                                "partner's public moves, normalised by the features' squared norm, kept and reset with the "
                                "belief's memory); 0 = off",
                           min=0.0)
    goal_evidence: str = opt("corrected", "bayes, with online_lr > 0: the likelihoods of the goal belief's Bayes "
                                          "update: corrected = the goal policies with the partner's online correction; "
                                          "model = the goal model's own (the correction then sharpens only the "
                                          "predicted moves: a goal-agnostic correction learnt from the belief's own "
                                          "errors can make one goal, often 'other', fit every partner)",
                             choices=["corrected", "model"])
    evidence_weight: float = opt(1.0, "bayes: the power w of each observed move's likelihood in the goal belief's "
                                      "update, b ∝ b_prev * pi(move | goal)^w: 1 = Bayes' rule; below 1 a tempered "
                                      "posterior, where a move the goal policies find unlikely (a partner pursuing a "
                                      "goal by moves of its own) moves the belief less", min=0.0, max=1.0,
                                 min_exclusive=True)
    floor: float = opt(0.05, "bayes: weight of a uniform policy mixed into every goal's policy (no observed move "
                             "can rule a goal out)", min=0.0, max=1.0, max_exclusive=True)
    observe_actions: bool = opt(True, "bayes: the co-players' previous actions are an input of their modelled "
                                      "policy (public actions: the env declares EnvSpec.public_actions)")
    view: str = opt("coplayer", "bayes: what the goal-conditioned policy of co-player j reads: coplayer = j's own "
                                "view, re-expressed from the learner's observation where the env gives one "
                                "(EnvSpec.coplayer_view; else the learner's observation); own = the learner's "
                                "observation as is", choices=["coplayer", "own"])
    self_model: bool = opt(True, "bayes: also train on the learner's own transitions seen from a co-player's "
                                 "slot (self as a model of others), so goals no training partner pursued are modelled")
    symmetries: str = opt("rules", "bayes: replay samples that train the goal policies in a random symmetry of the game "
                                    "(EnvSpec.symmetries, e.g. a grid's reflections, moves mapped alike), so a way to a "
                                    "goal seen on one side of the grid is known on every side: rules = the moves of "
                                    "scripted partners, whose rules share the game's symmetries (tested); all = every "
                                    "sample, a learner's too (a learnt habit, such as going round one way, is then "
                                    "blurred); off = none. Nothing for an env that declares none",
                           choices=["rules", "all", "off"])
    hindsight_window: int = opt(8, "bayes: a learned co-player's step is labelled with the next goal it completes "
                                   "only if it completes it within this many steps (0: any distance)", min=0)
    hindsight_weight: float = opt(0.25, "bayes: loss weight of a sample whose goal is a hindsight guess (the next "
                                        "goal a learned agent completes) relative to one whose goal a scripted "
                                        "partner's rule gives; a goal only hindsight labels show is still learnt "
                                        "from them alone", min=0.0, max=1.0)
    goal_readout: str = opt("belief", "bayes: the goal predicted for a co-player (goal accuracy, calibration, the goal "
                                      "posterior fed to the policy): belief = the posterior b(g) over the goal that "
                                      "explains its moves so far; state = b(g) x q(g | o_i, j, a_prev) renormalised, "
                                      "q a read-out of the goal network trained on the goal labels: which goal a "
                                      "partner takes up now also depends on the state (a coin game's selfish player "
                                      "goes for whichever coin is there)", choices=["belief", "state"])
    member_heads: bool = opt(False, "bayes: one more read-out of the goal policies per member of the training "
                                    "populations (learnt from that member's moves; a member whose goals no rule "
                                    "gives, a frozen learner, also as a whole, from all its moves), and the belief "
                                    "over (member, goal) pairs and members as a whole, with a member-free read-out "
                                    "for partners never met: a training partner is predicted as itself, not as the "
                                    "zoo's average")
    replay_size: int = opt(32768, "bayes: training samples (observer, co-player, step) kept from recent rollouts",
                           min=1)
    steps: int = opt(32, "bayes: Adam steps on replay mini-batches per update", min=1)
    batch_size: int = opt(512, "bayes: samples per Adam step", min=1)
    feed: str = opt("none", "policy = append the belief to the actor's input (bayes: every co-player's goal "
                            "posterior and predicted action distribution; gru: its embedding)",
                    choices=["none", "policy"])
    hidden: int = opt(0, "hidden width (gru: the GRU size = belief size); 0 = auto: 64 for bayes (its goal network "
                         "runs for every env at every step and 32 Adam steps per update: 64 units keep it within "
                         "1.3x MAPPO's time per env step; 128 model frozen learners a little better), 128 for gru "
                         "and subgoal", min=0)
    lr: float = opt(1e-3, "co-player model learning rate (Adam)", min=0.0, min_exclusive=True, max=1.0)
    epochs: int = opt(1, "gru, subgoal: passes over each rollout per update (full batch)", min=1)


@dataclass
class DiagnosticsConfig:
    """Non-stationarity diagnostics and the live-component audit (for every actor, not only hyper)."""

    every: int = opt(1, "compute per-agent KL, gradient cosine and SND every this many updates (0 = off)", min=0)
    grad_cos_samples: int = opt(2048, "samples used for the inter-agent gradient cosine", min=1)
    snd_pool: int = opt(256, "fixed observation pool size for System Neural Diversity", min=1)
    audit_updates: int = opt(3, "run the live-component audit after this many updates (0 = off)", min=0)


@dataclass
class LogConfig:
    """Where a run logs besides metrics.csv (always written): TensorBoard, Weights & Biases, the progress line."""

    tensorboard: bool = opt(True, "write TensorBoard events to RUN_DIR/tb")
    wandb: bool = opt(False, "log to Weights & Biases (needs `pip install wandb`)")
    wandb_project: str = opt("hypermappo", "W&B project name")
    progress: bool = opt(True, "live progress line on the terminal")


@dataclass
class Config:
    """One run. `hypermappo train PRESET key=value ...` fills this from configs/PRESET.yaml."""

    env: str = opt("matrix:climbing", "environment string, e.g. mpe:simple_spread, mpe2:simple_spread_v3, "
                                      "vmas:navigation, staghunt, matrix:climbing, smax:3m")
    env_kwargs: dict = opt({}, "keyword arguments for the environment")
    algo: str = opt("mappo", "algorithm", choices=["mappo", "ippo", "maddpg"])
    # the names of models/actor.py's ACTORS (tests/test_layers.py checks they agree; config imports no model)
    actor: str = opt("mlp", "actor architecture", choices=["mlp", "rnn", "hyper"])
    seed: int = opt(0, "seed of every random source in the run", min=0)
    seeds: list[int] = opt([], "train these seeds as one batched run in this process (one env of num_envs envs per "
                               "seed; on a GPU the networks vmapped over the seeds), each into its own run directory "
                               "RUN_DIR/seed_<s> and each its run alone (to the bit on a CPU, to float rounding on a "
                               "GPU); empty = the one run of `seed` (see docs/guides/seed-batch.md)")
    run_dir: str = opt("", "run directory; empty = runs/<env>_<algo>_<actor>_s<seed>_<time>")
    total_env_steps: int = opt(100_000, "environment steps to train for (summed over envs)", min=1)
    num_envs: int = opt(128, "parallel environments E", min=1)
    rollout_length: int = opt(25, "steps per env per update T", min=1)
    device: str = opt("cpu", "torch device: cpu, cuda, cuda:0, ...")
    torch_threads: int = opt(0, "torch intra-op threads; 0 = the cores this process may use (at most 4). Sweeps "
                                "split the cores between parallel runs; on a machine busy with other work, 1 "
                                "avoids threads waiting on each other", min=0)
    eval_interval: int = opt(0, "evaluate every this many updates (0 = only at the end)", min=0)
    eval_at_steps: list[int] = opt([], "also evaluate at the first update reaching each of these env steps")
    eval_episodes: int = opt(32, "episodes per evaluation (run in parallel, deterministic actions)", min=1)
    checkpoint_interval: int = opt(50, "checkpoint every this many updates (0 = only at the end)", min=0)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    maddpg: MADDPGConfig = field(default_factory=MADDPGConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    hyper: HyperConfig = field(default_factory=HyperConfig)
    coplayer: CoplayerConfig = field(default_factory=CoplayerConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    groups: list = opt([], "policy groups: agent slots -> named groups, each a learner (own actor, critic, optimiser; "
                           "optional actor/model/critic/ppo/hyper overrides), scripted (policy, params) or frozen "
                           "(run_dir), with an optional switch schedule; empty = one learner of all agents "
                           "(see docs/guides/policy-groups.md)")


# --------------------------------------------------------------------------- parsing / checking


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (list,):
        (arg,) = typing.get_args(tp)
        return f"list of {_type_name(arg)}"
    return getattr(tp, "__name__", str(tp))


def _coerce(key: str, value: Any, tp: Any, from_string: bool) -> Any:
    """Convert `value` to type `tp` or raise a one-line UserError naming `key`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType) and set(typing.get_args(tp)) == {int, str}:  # a count or a word
        if isinstance(value, str):
            try:
                return _coerce(key, value, int, from_string)
            except UserError:
                return value.strip()  # which words it takes: _check_range
        return _coerce(key, value, int, from_string)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (from_string and str(value).lower() in ("none", "null")):
            return None
        return _coerce(key, value, args[0], from_string)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        s = str(value).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise UserError(f"{key}: expected a boolean (true/false/yes/no/1/0), got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise UserError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            s = value.strip().replace("_", "")
            try:
                return int(s)
            except ValueError:
                try:
                    f = float(s)
                except ValueError:
                    f = None
                if f is not None and f.is_integer():
                    return int(f)
        raise UserError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise UserError(f"{key}: expected a number, got {value!r}")
        number = None
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                pass
        if number is None:
            raise UserError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(number):  # nan / inf pass every range comparison or blow up the losses
            raise UserError(f"{key}: expected a finite number, got {value!r}")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        if from_string or isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise UserError(f"{key}: expected a string, got {value!r}")
    if origin is list or tp is list:
        (arg,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            s = value.strip()
            if s.startswith("["):
                try:
                    value = yaml.safe_load(s)
                except yaml.YAMLError:
                    raise UserError(f"{key}: expected a list like [1, 2] or 1,2, got {value!r}") from None
            else:
                value = [v for v in s.split(",") if v.strip()] if s else []
            from_string = True
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{key}: expected a {_type_name(tp)}, got {value!r}")
        if arg is Any:
            return list(value)
        return [_coerce(f"{key}[{i}]", v, arg, from_string) for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if isinstance(value, str):
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError:
                raise UserError(f"{key}: expected a mapping like {{a: 1}}, got {value!r}") from None
        if not isinstance(value, dict):
            raise UserError(f"{key}: expected a mapping like {{a: 1}}, got {value!r}")
        return dict(value)
    raise TypeError(f"config type {tp} of {key} is not supported")


def _check_range(key: str, value: Any, meta: dict) -> None:
    words = meta.get("words")
    if words is not None and isinstance(value, str) and value not in words:
        raise UserError(f"{key}: expected an integer or one of {words}, got {value!r}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"{key}: {value!r} is not one of {choices}{hint}")
    values = value if isinstance(value, list) else [value]
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and (v < lo or (meta.get("min_exclusive") and v == lo)):
            op = ">" if meta.get("min_exclusive") else ">="
            raise UserError(f"{key}: expected a value {op} {lo}, got {v!r}")
        if hi is not None and (v > hi or (meta.get("max_exclusive") and v == hi)):
            op = "<" if meta.get("max_exclusive") else "<="
            raise UserError(f"{key}: expected a value {op} {hi}, got {v!r}")


def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _all_keys(obj: Any = None, prefix: str = "") -> list[str]:
    """Every dotted leaf key of the config, e.g. ppo.gamma."""
    obj = Config() if obj is None else obj
    keys = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        keys += _all_keys(v, prefix + f.name + ".") if dataclasses.is_dataclass(v) else [prefix + f.name]
    return keys


def _unknown_key(key: str, prefix: str, known: list[str]) -> UserError:
    """Suggest a close key of this section, else the dotted keys of any section that have this name, start
    with it (lr -> ppo.lr_actor) or are a close match: a bare `gamma=` means `ppo.gamma=`."""
    leaves = {k: k.rsplit(".", 1)[-1] for k in _all_keys()}
    near = set(difflib.get_close_matches(key, list(set(leaves.values())), n=3, cutoff=0.8))
    found = ([k for k, name in leaves.items() if name == key]
             + [k for k, name in leaves.items() if name.startswith(key + "_")]
             + [k for k, name in leaves.items() if name in near and name != key])
    found = [k for k in dict.fromkeys(found) if k != prefix + key]
    close = difflib.get_close_matches(key, known, n=1)
    if close and prefix and prefix + close[0] in found:  # a close key of this very section (ppo.lr_actr -> ppo.lr_actor)
        found = [prefix + close[0]]
    if found and not (close and close[0] == key):
        hint = f" (did you mean {' or '.join(repr(k) for k in found[:4])}?)"
        if close and not any(k == prefix + close[0] for k in found):
            hint = f" (did you mean {prefix + close[0]!r}, {', '.join(repr(k) for k in found[:3])}?)"
    else:
        hint = f" (did you mean {prefix + close[0]!r}?)" if close else ""
    return UserError(f"unknown config key {prefix + key!r}{hint}")


# values an earlier version of a key took, as the run directories it wrote hold them -> the value now
LEGACY_VALUES = {"coplayer.symmetries": {True: "all", False: "off"}}  # was a bool: every sample reflected or none


def apply_dict(obj: Any, data: dict, prefix: str = "", from_string: bool = False) -> None:
    """Set the fields of dataclass `obj` from a (nested) dict, checking every key and value."""
    if not isinstance(data, dict):
        raise UserError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(type(obj))
    fs = _fields(type(obj))
    for key, value in data.items():
        if key not in fs:
            raise _unknown_key(str(key), prefix, list(fs))
        tp = hints[key]
        full = prefix + key
        if dataclasses.is_dataclass(tp):
            apply_dict(getattr(obj, key), value, full + ".", from_string)
            continue
        if isinstance(value, bool) and value in LEGACY_VALUES.get(full, {}):
            value = LEGACY_VALUES[full][value]
        v = _coerce(full, value, tp, from_string)
        _check_range(full, v, fs[key].metadata)
        setattr(obj, key, v)


def apply_override(cfg: Config, override: str) -> None:
    """Apply one `dotted.key=value` override from the command line."""
    if "=" not in override:
        raise UserError(f"override {override!r}: expected key=value")
    key, value = override.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    obj, prefix = cfg, ""
    for part in parts[:-1]:
        fs = _fields(type(obj))
        if part not in fs or not dataclasses.is_dataclass(getattr(obj, part)):
            raise _unknown_key(part, prefix, [n for n in fs if dataclasses.is_dataclass(getattr(obj, n))])
        obj, prefix = getattr(obj, part), prefix + part + "."
    last = parts[-1]
    fs = _fields(type(obj))
    if last not in fs:
        raise _unknown_key(last, prefix, list(fs))
    if dataclasses.is_dataclass(getattr(obj, last)):
        raise UserError(f"{key} is a section; set its keys, e.g. {key}.{dataclasses.fields(getattr(obj, last))[0].name}=...")
    if typing.get_type_hints(type(obj))[last] is dict and "=" in value and not value.strip().startswith("{"):
        raise UserError(f"{key}: expected a mapping like {{a: 1}}, got {value!r}")
    apply_dict(obj, {last: value}, prefix, from_string=True)


def list_presets() -> list[str]:
    return sorted(str(p.relative_to(CONFIG_DIR).with_suffix("")) for p in CONFIG_DIR.rglob("*.yaml"))


def preset_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    path = CONFIG_DIR / f"{name}.yaml"
    if not path.exists() and "=" in name:
        raise UserError(f"expected a preset name before the overrides, got {name!r}; see `hypermappo presets`")
    if not path.exists():
        presets = list_presets()
        close = difflib.get_close_matches(name, presets, n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"unknown preset {name!r}{hint}; see `hypermappo presets` for the list")
    return path


def load_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of config keys at the top level")
    return data


def build_config(preset: str | None = None, overrides: list[str] = (), base: dict | None = None,
                 allow_unused: bool = False) -> Config:
    """Defaults <- preset YAML (or `base` dict) <- overrides, then cross-field checks and (unless
    `allow_unused`, which a sweep uses for keys only some of its runs read) the unused-key check."""
    check_duplicate_keys(overrides)
    cfg = Config()
    if base is not None:
        apply_dict(cfg, base)
    if preset:
        apply_dict(cfg, load_yaml(preset_path(preset)))
    for o in overrides:
        apply_override(cfg, o)
    validate(cfg)
    if not allow_unused:
        for message in unused_keys(cfg).values():
            raise UserError(message)
    return cfg


def check_duplicate_keys(overrides: list[str]) -> None:
    """`seed=1 seed=2` is a mistake, not "the last one wins"."""
    seen: dict[str, str] = {}
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if "=" in o and key in seen:
            raise UserError(f"{key}: given twice ({seen[key]!r} and {o!r}); give each key once")
        seen[key] = o


CHUNK_AUTO_MAX = 10  # ppo.data_chunk_length=auto: the largest divisor of rollout_length up to this


def data_chunk_length(cfg: Config) -> int:
    """ppo.data_chunk_length as steps: an explicit value as it is; auto = the largest divisor of rollout_length up to
    CHUNK_AUTO_MAX (10, the old default: any rollout_length it divides keeps it; 25 gets 5)."""
    value = cfg.ppo.data_chunk_length
    if value != "auto":
        return int(value)
    T = cfg.rollout_length
    return max(d for d in range(1, min(T, CHUNK_AUTO_MAX) + 1) if T % d == 0)


def _recurrent(cfg: Config) -> bool:
    """Whether any network has a GRU (MAPPO then trains on chunks of ppo.data_chunk_length steps)."""
    return (cfg.actor == "rnn" or cfg.critic.recurrent == "on"
            or (cfg.actor == "hyper" and ("history" in cfg.hyper.context or cfg.hyper.output == "accumulate")))


def unused_keys(cfg: Config) -> dict[str, str]:
    """Keys set to a non-default value that nothing reads in this config -> one-line error naming the key
    and what would make it read. A key equal to its default is never reported (it is not "set")."""
    default, h = Config(), cfg.hyper
    out: dict[str, str] = {}

    def check(key: str, used: bool, needs: str) -> None:
        section, name = key.split(".") if "." in key else ("", key)
        value = getattr(getattr(cfg, section) if section else cfg, name)
        if not used and value != getattr(getattr(default, section) if section else default, name):
            out[key] = f"{key}={value!r} has no effect: {needs}"

    hyper = cfg.actor == "hyper"
    for f in dataclasses.fields(HyperConfig):
        if f.name != "beta":  # the KL alignment term works with any actor
            check(f"hyper.{f.name}", hyper, f"it is read only by the hypernetwork actor (actor=hyper), "
                                            f"got actor={cfg.actor!r}")
    if hyper:
        ids, obs, attention = "agent_id" in h.context, "obs" in h.context, h.obs_aggregation == "attention"
        context = f"hyper.context={h.context}"
        check("hyper.id_encoding", ids, f"it needs agent_id in hyper.context, got {context}")
        check("hyper.id_embed_dim", ids and h.id_encoding == "embedding",
              f"it needs hyper.id_encoding=embedding and agent_id in hyper.context, got "
              f"id_encoding={h.id_encoding!r}, {context}")
        for name in ("obs_aggregation", "obs_embed_dim"):
            check(f"hyper.{name}", obs, f"it needs obs in hyper.context, got {context}")
        for name in ("attention_heads", "attention_kernel"):
            check(f"hyper.{name}", obs and attention, f"it needs obs in hyper.context and "
                                                      f"hyper.obs_aggregation=attention, got {context}, "
                                                      f"obs_aggregation={h.obs_aggregation!r}")
        check("hyper.history_hidden", "history" in h.context, f"it needs history in hyper.context, got {context}")
        check("hyper.hidden", h.mlp_layers > 0, "with hyper.mlp_layers=0 there is no hypernetwork hidden layer")
        check("hyper.target_interval", h.target == "hard", f"it needs hyper.target=hard, got {h.target!r}")
        check("hyper.target_tau", h.target == "polyak", f"it needs hyper.target=polyak, got {h.target!r}")
        check("hyper.decay", h.output == "accumulate", f"it needs hyper.output=accumulate, got {h.output!r}")
        check("hyper.init_base", bool(h.init_from), "it needs hyper.init_from=RUN_DIR (the run to load from)")
        if h.target != "none" and h.alpha == 0 and "hyper.target" not in out:
            out["hyper.target"] = (f"hyper.target={h.target!r} builds a target hypernetwork that nothing reads: only "
                                   f"the smoothness term reads it, so it needs hyper.alpha>0 (got hyper.alpha=0)")
    for f in dataclasses.fields(CoplayerConfig):
        if f.name != "enabled":
            check(f"coplayer.{f.name}", cfg.coplayer.enabled, "it needs coplayer.enabled=true")
    if cfg.coplayer.enabled:
        cp = cfg.coplayer
        bayes, gru = cp.model == "bayes", f"it is read by coplayer.model=gru, got coplayer.model={cp.model!r}"
        subgoal = cp.model == "subgoal"
        for name in ("goal_weight", "subgoal_weight", "subgoal_at"):
            check(f"coplayer.{name}", cp.model == "gru", gru)
        check("coplayer.action_weight", not subgoal, "coplayer.model=subgoal predicts subgoals, not actions")
        check("coplayer.epochs", not bayes, f"it is read by coplayer.model=gru or subgoal, got coplayer.model={cp.model!r}")
        for name in ("subgoal_select", "subgoal_latent", "kl_weight", "prior_updates"):
            check(f"coplayer.{name}", subgoal, f"it is read by coplayer.model=subgoal, got coplayer.model={cp.model!r}")
        check("coplayer.goal_evidence", cp.online_lr > 0, "it chooses between corrected and uncorrected goal "
              "policies, and coplayer.online_lr=0 corrects none")
        for name in ("prior_weight", "hazard", "event_reset", "online_lr", "goal_evidence", "floor", "observe_actions",
                     "view", "self_model", "symmetries", "member_heads", "goal_readout",
                     "replay_size", "steps", "batch_size", "hindsight_window", "hindsight_weight"):
            check(f"coplayer.{name}", bayes, f"it is read by coplayer.model=bayes, got coplayer.model={cp.model!r}")
        check("coplayer.prior_weight", not bayes or cp.memory != "episode",
              "it weighs the prior carried across episodes, and coplayer.memory=episode carries none")
        if cp.model == "gru":
            check("coplayer.subgoal_at", cp.subgoal_weight > 0, "it needs coplayer.subgoal_weight>0")
        check("coplayer.subgoal_horizon", subgoal or (cp.subgoal_weight > 0 and cp.subgoal_at == "horizon"),
              "it needs coplayer.model=subgoal, or coplayer.subgoal_weight>0 and coplayer.subgoal_at=horizon")
    check("model.rnn_hidden", cfg.actor == "rnn" or cfg.critic.recurrent == "on",
          f"it is the GRU size of actor=rnn or critic.recurrent=on, got actor={cfg.actor!r}, "
          f"critic.recurrent={cfg.critic.recurrent!r}")
    check("ppo.data_chunk_length", _recurrent(cfg),
          "nothing is recurrent (it needs actor=rnn, critic.recurrent=on, history in hyper.context or "
          "hyper.output=accumulate)")
    for name in ("hyper_hidden", "hyper_lr"):
        check(f"critic.{name}", cfg.critic.arch == "hyper", f"it needs critic.arch=hyper, got {cfg.critic.arch!r}")
    check("ppo.huber_delta", cfg.ppo.huber, "it needs ppo.huber=true")
    check("log.wandb_project", cfg.log.wandb, "it needs log.wandb=true")
    for name in ("grad_cos_samples", "snd_pool"):
        check(f"diagnostics.{name}", cfg.diagnostics.every > 0, "diagnostics are off (diagnostics.every=0)")
    # run-level algorithm keys are read when the run or any policy group (`algo:` in its entry) uses that algorithm
    algos = algos_used(cfg)
    maddpg, ppo = "maddpg" in algos, bool(algos - {"maddpg"})
    for f in dataclasses.fields(MADDPGConfig):
        check(f"maddpg.{f.name}", maddpg, f"it is read only by algo=maddpg, got algo={cfg.algo!r}")
    for f in dataclasses.fields(PPOConfig):
        check(f"ppo.{f.name}", ppo, "algo=maddpg reads maddpg.* keys, not ppo.* (PPO settings)")
    for name in ("every", "audit_updates"):  # MAPPO's diagnostics read its rollout; MADDPG has none (0 = off is fine)
        if getattr(cfg.diagnostics, name):
            check(f"diagnostics.{name}", ppo, "the diagnostics and the live-component audit are MAPPO / IPPO "
                                              "only, got algo='maddpg'")
    check("hyper.beta", ppo, "the KL alignment term is a PPO loss term, got algo='maddpg'")
    # keys whose use depends on an algorithm's own rules (ppo.micro_batch_size) are checked by that algorithm's
    # module: run_config.unused_keys adds them
    return out


def algos_used(cfg: Config) -> set[str]:
    """The algorithms of the run and of its policy groups (`algo:` in a group's entry)."""
    return {cfg.algo} | {g.get("algo", cfg.algo) for g in cfg.groups if isinstance(g, dict)}


PER_SAMPLE_CONTEXTS = ("obs", "history", "coplayer")


def resolve_hyper_defaults(h: HyperConfig) -> None:
    """The `auto` sizes of the hypernetwork, in place (idempotent). A per-sample context (obs, history, coplayer)
    costs a hypernetwork pass per sample and per step, so it gets the lean setting: a 16-wide code and rank-1
    increments of the policy head only (0.7-0.8x MAPPO's env-steps/s at E = 1024, where 64-wide full-rank
    increments of every layer are 0.27x). An agent-id context is generated once per agent and keeps 64 wide, every
    layer, full rank. Explicit values are kept."""
    per_sample = any(c in h.context for c in PER_SAMPLE_CONTEXTS)
    if h.layers == "auto":
        h.layers = "last" if per_sample else "all"
    if h.hidden == 0 and h.mlp_layers > 0:
        h.hidden = 16 if per_sample else 64
    if h.rank < 0:
        h.rank = 1 if per_sample and h.output == "increment" else 0


COPLAYER_AUTO_HIDDEN = {"bayes": 64, "gru": 128, "subgoal": 128}


def resolve_coplayer_defaults(c: CoplayerConfig) -> CoplayerConfig:
    """The `auto` width of the co-player model, in place (idempotent): 64 for the goal network of `bayes` (its cost
    is paid per env step in collection and 32 Adam steps per update; paired with 128 units, held-out action accuracy
    -0.002 in the stag hunt and the coin game, -0.012 in the snowdrift, against its frozen learners), 128 for the
    recurrent `gru` and `subgoal` models. Explicit values are kept."""
    if c.hidden == 0:
        c.hidden = COPLAYER_AUTO_HIDDEN[c.model]
    return c


DEATH_MODES = ("auto", "episode", "agent")


def resolve_death(choice: str, spec) -> str:
    """`ppo.death` as `episode` or `agent` for an env (`spec`: its EnvSpec; `auto` reads its team_reward). What the
    modes do to the learning targets is algos/death.py's; the critic reads it to death-mask its input."""
    if choice not in DEATH_MODES:
        raise UserError(f"ppo.death: expected one of {list(DEATH_MODES)}, got {choice!r}")
    if choice != "auto":
        return choice
    return "episode" if getattr(spec, "team_reward", False) else "agent"


def validate(cfg: Config) -> None:
    """Checks that involve more than one key."""
    if cfg.actor == "hyper":
        resolve_hyper_defaults(cfg.hyper)
    if cfg.coplayer.enabled:
        resolve_coplayer_defaults(cfg.coplayer)
    # policy groups' rules live with them (policies/groups.py: check_group_specs), run by run_config.check
    if cfg.algo == "ippo" and cfg.critic.input not in ("auto", "obs"):
        raise UserError(f"critic.input: ippo uses a decentralised critic, so it must be auto or obs, "
                        f"got {cfg.critic.input!r} (use algo=mappo for a centralised critic)")
    if cfg.algo == "mappo" and cfg.critic.input == "obs":
        raise UserError("critic.input: obs makes the critic decentralised; use algo=ippo for that")
    if cfg.algo == "maddpg":
        if cfg.actor != "mlp":
            raise UserError(f"actor: algo=maddpg supports actor=mlp (shared or per-agent weights), got {cfg.actor!r}")
        if cfg.critic.input == "obs":
            raise UserError("critic.input: algo=maddpg has a centralised critic; obs is not one of its inputs "
                            "(use auto, state, state_agent_id, state_obs_agent_id or obs_concat)")
        if cfg.critic.recurrent == "on":
            raise UserError("critic.recurrent: algo=maddpg has a feed-forward critic, got 'on'")
        if cfg.coplayer.enabled:
            raise UserError("coplayer.enabled: the co-player model trains next to MAPPO/IPPO learners; "
                            "algo=maddpg does not support it yet")
        if cfg.maddpg.buffer_size < cfg.num_envs:
            raise UserError(f"maddpg.buffer_size: {cfg.maddpg.buffer_size} is smaller than one step of all envs "
                            f"(num_envs={cfg.num_envs})")
    if not cfg.model.hidden_sizes:
        raise UserError("model.hidden_sizes: expected at least one hidden layer width")
    if any(h < 1 for h in cfg.model.hidden_sizes + cfg.critic.hidden_sizes):
        raise UserError(f"hidden sizes must be >= 1, got {cfg.model.hidden_sizes} / {cfg.critic.hidden_sizes}")
    batch = cfg.num_envs * cfg.rollout_length
    if cfg.ppo.num_mini_batch > cfg.num_envs * (1 if cfg.actor == "rnn" else cfg.rollout_length):
        raise UserError(f"ppo.num_mini_batch: {cfg.ppo.num_mini_batch} is more than the {batch} samples per update")
    h = cfg.hyper
    bad = [c for c in h.context if c not in ("agent_id", "obs", "history", "coplayer")]
    if bad or not h.context or len(set(h.context)) != len(h.context):
        raise UserError(f"hyper.context: expected a non-empty list from agent_id, obs, history, coplayer, "
                        f"got {h.context}")
    if cfg.actor == "hyper" and "coplayer" in h.context and not cfg.coplayer.enabled:
        raise UserError("hyper.context: coplayer needs the co-player model (coplayer.enabled=true)")
    if cfg.actor == "hyper" and "obs" in h.context and h.obs_aggregation == "attention" \
            and h.obs_embed_dim % h.attention_heads:
        raise UserError(f"hyper.attention_heads: obs_embed_dim ({h.obs_embed_dim}) must be divisible by it, "
                        f"got {h.attention_heads}")
    if cfg.actor == "hyper" and h.alpha > 0 and h.context == ["agent_id"] and h.target == "none" \
            and h.output != "accumulate":  # accumulate's smoothness term is ||delta_t||^2, not a difference
        raise UserError("hyper.alpha: with context [agent_id] delta does not change between steps, so the "
                        "smoothness term would be 0; add obs/history to hyper.context or set hyper.target")
    if cfg.actor == "hyper" and h.hidden_scale and h.layers != "last":
        raise UserError(f"hyper.hidden_scale: only meaningful with hyper.layers=last, got layers={h.layers!r}")
    if cfg.actor != "hyper" and h.alpha > 0:
        raise UserError(f"hyper.alpha: the smoothness term needs a hypernetwork (actor=hyper), got actor={cfg.actor!r}")
    if h.output == "full" and h.rank:
        raise UserError(f"hyper.rank: low-rank generation makes increments; with hyper.output=full use rank=0, "
                        f"got {h.rank}")
    check_hyper_critic(cfg)
    check_seed_batch(cfg)
    if not (cfg.device == "cpu" or cfg.device.startswith("cuda") or cfg.device == "mps"):
        raise UserError(f"device: expected cpu, cuda, cuda:N or mps, got {cfg.device!r}")


# what `seeds=` batches (seed_batch.py): envs whose random draws it can split into one stream per seed
SEED_BATCH_ENVS = ("mpe:simple_spread", "staghunt", "coingame")


def check_seed_batch(cfg: Config) -> None:
    """`seeds=`: distinct non-negative seeds, and a run of the kind the batched path trains (one MAPPO / IPPO learner
    with feed-forward networks of shared weights (mlp, or a hypernetwork without history), eager, on an env that
    splits its random draws per seed)."""
    if not cfg.seeds:
        return
    if any(s < 0 for s in cfg.seeds) or len(set(cfg.seeds)) != len(cfg.seeds):
        raise UserError(f"seeds: expected distinct seeds >= 0, got {cfg.seeds}")
    need = [("algo", cfg.algo in ("mappo", "ippo"), "mappo or ippo"),
            ("actor", cfg.actor in ("mlp", "hyper"), "mlp or hyper"),
            ("hyper.context", cfg.actor != "hyper" or "history" not in cfg.hyper.context,
             "a feed-forward context (agent_id, obs)"),
            ("env", cfg.env in SEED_BATCH_ENVS, " or ".join(SEED_BATCH_ENVS)),
            ("model.share_params", cfg.model.share_params, "true"),
            ("critic.recurrent", cfg.critic.recurrent in ("auto", "off"), "auto or off"),
            ("critic.arch", cfg.critic.arch != "hyper", "not hyper"),
            ("groups", not cfg.groups, "none"),
            ("coplayer.enabled", not cfg.coplayer.enabled, "false"),
            ("ppo.compile", cfg.ppo.compile in ("auto", "off"), "auto or off (the batched path is eager)"),
            ("ppo.minibatch_over", cfg.ppo.minibatch_over == "samples" or cfg.ppo.num_mini_batch == 1, "samples"),
            ("env_kwargs.continuous_actions", not cfg.env_kwargs.get("continuous_actions"), "false")]
    for key, ok, expected in need:
        if not ok:
            value = cfg.env_kwargs.get("continuous_actions") if key.startswith("env_kwargs") else \
                _get(cfg, key)
            raise UserError(f"seeds: the batched path trains {key}={expected}, got {key}={value!r} (train each "
                            f"seed on its own, e.g. `hypermappo sweep ... seed={','.join(map(str, cfg.seeds))}`)")


def _get(cfg, key: str):
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def check_hyper_critic(cfg: Config) -> None:
    """critic.arch=hyper generates feed-forward layers whose output PopArt could not rescale."""
    if cfg.critic.arch != "hyper":
        return
    c = cfg.critic
    if c.recurrent == "on" or (c.recurrent == "auto" and cfg.actor == "rnn"):
        raise UserError(f"critic.arch=hyper: the hypernetwork critic is feed-forward, so it needs critic.recurrent=off "
                        f"(got critic.recurrent={c.recurrent!r} with actor={cfg.actor!r})")
    if cfg.ppo.value_norm == "popart":
        raise UserError("critic.arch=hyper: ppo.value_norm=popart rescales a fixed value head, but this head's weights "
                        "are generated per agent; use ppo.value_norm=valuenorm or none")


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def save_yaml(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def from_run_dir(run_dir: Path) -> Config:
    """The effective config a run wrote to RUN_DIR/config.yaml."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        seeds = sorted(d.name for d in Path(run_dir).glob("seed_*") if (d / "config.yaml").exists())
        if seeds:  # the parent of a `seeds=` run: one run directory per seed below it
            raise UserError(f"{run_dir}: holds the runs of a seeds= batch ({', '.join(seeds)}), one run directory "
                            f"each; name one of them, e.g. {Path(run_dir) / seeds[0]}")
        raise UserError(f"{run_dir}: no config.yaml here; is this a hypermappo run directory?")
    cfg = Config()
    apply_dict(cfg, load_yaml(path))
    validate(cfg)
    return cfg
