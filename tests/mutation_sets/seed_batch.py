"""`seeds=` (seed_batch.py): each seed of a batched run keeps its own env stream, action noise, value normaliser,
gradients and config, so that it is its run alone."""

T = "tests/test_seed_batch.py::test_on_a_cpu_each_seed_of_a_batched_run_is_its_run_alone_to_the_bit"
B = "tests/test_seed_batch.py::test_batched_networks_train_each_seed_as_alone_up_to_float_rounding"
ENV = "tests/test_seed_batch.py::test_seed_blocks_of_one_env_draw_what_each_seed_alone_draws"
SB = "src/hypermappo/seed_batch.py"
MPE = "src/hypermappo/envs/mpe_torch.py"
CKPT = "tests/test_seed_batch.py::test_a_batched_seed_checkpoints_what_its_run_alone_holds_and_resumes_alone"
FAULT = "tests/test_seed_batch.py::test_a_non_finite_reward_stops_every_seed_and_fails_the_seed_it_came_from"
KERNEL = "tests/test_seed_batch.py::test_a_batched_run_trains_where_the_run_alone_takes_the_layernorm_kernel"


def mutations(M):
    return [
        M("seed_noise_shared", SB,
          "torch.rand(shape, generator=g, device=self.device) for g in self.noise",
          "torch.rand(shape, generator=self.noise[0], device=self.device) for g in self.noise",
          (T, B), "every seed's actions sampled from one seed's noise stream"),
        M("seed_blocks_share_a_generator", MPE,
          "torch.rand(*shape, c, generator=g, device=self.device)",
          "torch.rand(*shape, c, generator=self.blocks[0], device=self.device)",
          (ENV, T), "the env's blocks draw their starts from one seed's generator"),
        M("seed_value_norm_shared", SB,
          "self.value_norm = algo.value_norm if isinstance(algo.value_norm, nn.Module) else None",
          "self.value_norm = None",
          (B,), "the batched loss reads the first seed's value normaliser for every seed"),
        M("seed_gradients_crossed", SB,
          "param.grad = params[name].grad[b]",
          "param.grad = params[name].grad[0].clone()",
          (B,), "each seed steps with the first seed's gradients"),
        M("seed_config_not_alone", SB,
          "dataclasses.replace(cfg, seed=s, seeds=[], run_dir=str(run_dir),",
          "dataclasses.replace(cfg, seed=s, run_dir=str(run_dir),",
          (T,), "a seed's config.yaml is the batch's, not its run alone"),
        M("seed_block_state_main_rng", MPE,
          '"rng": self.blocks[block].get_state(),',
          '"rng": self.generator.get_state(),',
          (ENV,), "a seed's checkpoint holds the env's own generator, not its block's"),
        M("seed_forwards_crossed", SB,
          "out = exp.actor(obs, None, None, reset, active=active)",
          "out = self.exps[0].actor(obs, None, None, reset, active=active)",
          (T,), "every seed's actions come from the first seed's actor"),
        M("seed_prev_obs_not_stored", SB,
          "prev_obs=self.prev_obs if self.buffer.prev_obs is not None else None)",
          "prev_obs=None)",
          (T,), "Hyper-MAPPO's smoothness term reads zeros for every seed's previous observation"),
        M("seed_prev_obs_is_the_next_obs", SB,
          "self.reset_mask[rows].clone(), self.prev_obs[rows].clone()",
          "self.reset_mask[rows].clone(), s.obs[rows].clone()",
          (CKPT,), "a seed's checkpoint holds the next observation as the one acted on last"),
        M("seed_fault_blamed_on_the_first_seed", SB,
          "            if b == self.failed:",
          "            if b == 0:",
          (FAULT,), "a non-finite value of seed 1's envs fails seed 0's run"),
        M("seed_stream_blocks_lose_the_env_offset", "src/hypermappo/envs/vec.py",
          "index = torch.arange(size, device=self.device) + self.env_offset",
          "index = torch.arange(size, device=self.device)",
          (ENV,), "a stag hunt's seed blocks number their envs from 0 whatever env_offset says"),
        M("seed_stream_blocks_share_a_seed", "src/hypermappo/envs/vec.py",
          "self._stream_keys(int(seed), index) for seed in seeds",
          "self._stream_keys(int(seeds[0]), index) for seed in seeds",
          (ENV,), "every stag hunt or coin game block keyed by the first seed"),
        M("seed_batch_takes_the_kernel", "src/hypermappo/kernels/act_norm.py",
          " and not torch._C._functorch.is_batchedtensor(z))", ")",
          (KERNEL,), "the vmapped networks call the LayerNorm kernel, which has no batching rule"),
    ]
