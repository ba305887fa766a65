"""JaxMARL's IPPO-FF on MPE simple_spread at JaxMARL's own settings, timed (runs in the JaxMARL peer venv).

Written here from the facts of JaxMARL's baseline (baselines/IPPO/ippo_ff_mpe.py and config/ippo_ff_mpe.yaml; no
code copied): jaxmarl.make("MPE_simple_spread_v3"), 16 envs x 128 steps per update, 4 epochs x 4 mini-batches over
(step, env, agent) samples, one actor-critic module (two 64x64 tanh towers, orthogonal init: sqrt(2) hidden, 0.01
policy head, 1.0 value head), Adam lr 2.5e-4 linearly annealed, eps 1e-5, global-norm clipping 0.5, GAE
(0.99, 0.95), clip 0.2, value clip, entropy 0.01, value coefficient 0.5, advantages normalised per mini-batch. The
whole update (collection scanned over 128 steps, GAE, the 16 mini-batch steps) is one jitted function, as theirs;
`--updates-per-call` updates are scanned in one call. One training run (JaxMARL's script vmaps 10 seeds; one
seed compares with one run of ours).

Prints one JSON line: env-steps/s over the timed calls (compile excluded: the first call, which compiles, is timed
separately as compile_s), the end-to-end rate including that first call, and the mean episode return of the
last timed updates (so the run is seen to learn).

    /work/peers/jaxmarl/bin/python benchmarks/peers/jaxmarl_ippo.py --calls 5
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--updates-per-call", type=int, default=10)
    p.add_argument("--calls", type=int, default=5, help="timed calls after the compiling one")
    p.add_argument("--total-updates", type=int, default=4882, help="for the lr schedule (1e7 env steps, theirs)")
    p.add_argument("--seed", type=int, default=30)
    args = p.parse_args()

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import jaxmarl
    import numpy as np
    import optax
    from flax.linen.initializers import constant, orthogonal

    env = jaxmarl.make("MPE_simple_spread_v3")
    agents = env.agents
    n_agents, n_envs, n_steps = len(agents), args.num_envs, args.num_steps
    n_actions = env.action_space(agents[0]).n
    obs_dim = env.observation_space(agents[0]).shape[0]
    batch = n_steps * n_envs * n_agents
    mb = batch // args.minibatches

    class ActorCritic(nn.Module):
        @nn.compact
        def __call__(self, x):
            def tower(out: int, head_gain: float):
                h = x
                for _ in range(2):
                    h = nn.tanh(nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(h))
                return nn.Dense(out, kernel_init=orthogonal(head_gain), bias_init=constant(0.0))(h)
            return tower(n_actions, 0.01), tower(1, 1.0).squeeze(-1)

    net = ActorCritic()

    def schedule(count):
        return 2.5e-4 * (1.0 - (count // (args.minibatches * args.epochs)) / args.total_updates)

    tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(learning_rate=schedule, eps=1e-5))
    key = jax.random.PRNGKey(args.seed)
    key, k_init, k_reset = jax.random.split(key, 3)
    params = net.init(k_init, jnp.zeros((obs_dim,)))
    opt_state = tx.init(params)
    obs, env_state = jax.vmap(env.reset)(jax.random.split(k_reset, n_envs))

    def stack(d):  # {agent: [E, ...]} -> [N * E, ...], agent-major (as theirs)
        return jnp.concatenate([d[a] for a in agents], 0)

    def unstack(x):
        return {a: x[i * n_envs:(i + 1) * n_envs] for i, a in enumerate(agents)}

    def loss_fn(params, b):
        logits, value = net.apply(params, b["obs"])
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, b["action"][:, None], -1).squeeze(-1)
        v_clip = b["value"] + (value - b["value"]).clip(-0.2, 0.2)
        v_loss = 0.5 * jnp.maximum((value - b["target"]) ** 2, (v_clip - b["target"]) ** 2).mean()
        ratio = jnp.exp(logp - b["logp"])
        adv = (b["adv"] - b["adv"].mean()) / (b["adv"].std() + 1e-8)
        pg = -jnp.minimum(ratio * adv, ratio.clip(0.8, 1.2) * adv).mean()
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
        return pg + 0.5 * v_loss - 0.01 * entropy

    def update(carry, _):
        params, opt_state, obs, env_state, ep_ret, key = carry

        def env_step(c, _):
            params, obs, env_state, ep_ret, key = c
            x = stack(obs)  # [N*E, obs_dim]
            key, k_act, k_step = jax.random.split(key, 3)
            logits, value = net.apply(params, x)
            action = jax.random.categorical(k_act, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1).squeeze(-1)
            obs2, env_state, reward, done, _ = jax.vmap(env.step)(jax.random.split(k_step, n_envs), env_state,
                                                                 unstack(action))
            r, d = stack(reward), stack(done)
            ep_ret = ep_ret + jnp.stack([reward[a] for a in agents]).mean(0)  # [E] team-average return
            finished = done["__all__"]
            out = {"obs": x, "action": action, "logp": logp, "value": value, "reward": r, "done": d,
                   "ep_end": finished, "ep_ret": ep_ret}
            ep_ret = jnp.where(finished, 0.0, ep_ret)
            return (params, obs2, env_state, ep_ret, key), out

        (params, obs, env_state, ep_ret, key), traj = jax.lax.scan(
            env_step, (params, obs, env_state, ep_ret, key), None, n_steps)
        _, last_value = net.apply(params, stack(obs))

        def gae_step(c, t):
            gae, next_value = c
            delta = t["reward"] + 0.99 * next_value * (1 - t["done"]) - t["value"]
            gae = delta + 0.99 * 0.95 * (1 - t["done"]) * gae
            return (gae, t["value"]), gae

        _, adv = jax.lax.scan(gae_step, (jnp.zeros_like(last_value), last_value), traj, reverse=True, unroll=8)
        data = {"obs": traj["obs"], "action": traj["action"], "logp": traj["logp"], "value": traj["value"],
                "adv": adv, "target": adv + traj["value"]}
        data = jax.tree.map(lambda x: x.reshape((batch,) + x.shape[2:]), data)

        def epoch(c, _):
            params, opt_state, key = c
            key, k_perm = jax.random.split(key)
            perm = jax.random.permutation(k_perm, batch)
            mbs = jax.tree.map(lambda x: x[perm].reshape((args.minibatches, mb) + x.shape[1:]), data)

            def mb_step(c, b):
                params, opt_state = c
                grads = jax.grad(loss_fn)(params, b)
                updates, opt_state = tx.update(grads, opt_state)
                return (optax.apply_updates(params, updates), opt_state), None

            (params, opt_state), _ = jax.lax.scan(mb_step, (params, opt_state), mbs)
            return (params, opt_state, key), None

        (params, opt_state, key), _ = jax.lax.scan(epoch, (params, opt_state, key), None, args.epochs)
        ended = traj["ep_end"].sum()
        mean_ret = jnp.where(ended > 0, (traj["ep_ret"] * traj["ep_end"]).sum() / jnp.maximum(ended, 1), jnp.nan)
        return (params, opt_state, obs, env_state, ep_ret, key), mean_ret

    @jax.jit
    def train_calls(carry):
        return jax.lax.scan(update, carry, None, args.updates_per_call)

    carry = (params, opt_state, obs, env_state, jnp.zeros(n_envs), key)
    t0 = time.perf_counter()
    carry, rets = train_calls(carry)
    jax.block_until_ready(carry)
    first = time.perf_counter() - t0  # compiling + one call
    times = []
    for _ in range(args.calls):
        t = time.perf_counter()
        carry, rets = train_calls(carry)
        jax.block_until_ready(carry)
        times.append(time.perf_counter() - t)
    steps_per_call = n_envs * n_steps * args.updates_per_call
    med = float(np.median(times))
    print(json.dumps({
        "library": "jaxmarl", "algo": "IPPO-FF", "env": "MPE_simple_spread_v3", "num_envs": n_envs,
        "num_steps": n_steps, "epochs": args.epochs, "minibatches": args.minibatches,
        "sps": steps_per_call / med, "sps_calls": [steps_per_call / t for t in times],
        "compile_s": max(0.0, first - med), "sps_incl_compile": steps_per_call * (1 + len(times)) / (first + sum(times)),
        "episode_return_last_call": float(np.nanmean(np.asarray(rets))),
        "updates_run": args.updates_per_call * (1 + args.calls),
        "jax": jax.__version__, "devices": str(jax.devices()), "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }))


if __name__ == "__main__":
    main()
