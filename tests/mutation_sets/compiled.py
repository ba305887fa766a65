"""ppo.compile (compiled.py, the compiled policy step in policies/groups.py, MAPPO's compiled update)."""

T = "tests/test_compiled.py"
COMPILED = "src/hypermappo/compiled.py"
MAPPO = "src/hypermappo/algos/mappo.py"
GROUPS = "src/hypermappo/policies/groups.py"
EXPERIMENT = "src/hypermappo/experiment.py"
ATTENTION = "src/hypermappo/models/agent_attention.py"


def mutations(M):
    return [
        M("compile_own_random_stream", COMPILED,
          "inductor.fallback_random = True",
          "inductor.fallback_random = False",
          (f"{T}::test_compiled_run_equals_the_eager_run",),
          "Inductor's own RNG for sampling: a compiled run no longer samples what the eager run with that seed does"),
        M("compile_critic_not_clipped", MAPPO,
          "return grad_norm(self.actor.parameters(), max_norm), grad_norm(self.critic.parameters(), max_norm)",
          "return grad_norm(self.actor.parameters(), max_norm), grad_norm(self.critic.parameters(), 0.0)",
          (f"{T}::test_update_clips_each_network_and_steps_both",),
          "the factored-out clipping forgets the critic's max norm"),
        M("compile_step_skips_critic", MAPPO,
          "        self.actor_opt.step()\n        self.critic_opt.step()\n",
          "        self.actor_opt.step()\n",
          (f"{T}::test_update_clips_each_network_and_steps_both",),
          "the factored-out optimiser step drops the critic's Adam step"),
        M("compile_auto_threshold_off_by_one", COMPILED,
          'if mode == "auto" and cfg.total_env_steps < AUTO_MIN_ENV_STEPS:',
          'if mode == "auto" and cfg.total_env_steps <= AUTO_MIN_ENV_STEPS:',
          (f"{T}::test_auto_compiles_long_feed_forward_runs_only_and_says_why",),
          "auto stays off at exactly the documented threshold"),
        M("compile_recurrent_not_blocked", COMPILED,
          'if cfg.actor == "rnn" or (cfg.actor == "hyper" and "history" in cfg.hyper.context):',
          'if cfg.actor == "hyper" and "history" in cfg.hyper.context:',
          (f"{T}::test_auto_compiles_long_feed_forward_runs_only_and_says_why",
           f"{T}::test_compile_on_that_cannot_be_honoured_is_a_one_line_error"),
          "a GRU actor is compiled (graph breaks every step) instead of staying eager with a reason"),
        M("compile_attention_goes_dense", ATTENTION,
          'if self.fused and qkv.device.type == "cpu"',
          'if self.fused and not torch.compiler.is_compiling() and qkv.device.type == "cpu"',
          (f"{T}::test_policy_step_and_loss_trace_without_graph_breaks",),
          "the compiled actor silently swaps the fused C attention kernel for the dense ops (same maths, slower)"),
        M("attention_fake_wrong_shape", ATTENTION,
          "    return qkv.new_empty(b, n, e3 // 3), qkv.new_empty(b, n, heads, n)\n",
          "    return qkv.new_empty(b, n, e3 // 3), qkv.new_empty(b, n, n, heads)\n",
          (f"{T}::test_fused_attention_custom_op_is_registered_correctly",),
          "the custom op's shape-only (fake) version disagrees with the kernel: compiled graphs mis-size its output"),
        M("attention_backward_no_grad", ATTENTION,
          "    return fused_attention_backward_op(qkv, weights, grad_out, ctx.heads), None, None\n",
          "    return torch.zeros_like(qkv), None, None\n",
          ("tests/test_hyper.py::test_agent_attention_equals_torch_multihead_attention",
           f"{T}::test_fused_attention_custom_op_is_registered_correctly"),
          "the custom op's autograd formula drops the gradient: the observation encoder stops learning"),
        M("compile_flag_not_passed", GROUPS,
          "self.algo = MAPPO(self.actor, self.critic, cfg, compiled=self.compiled)",
          "self.algo = MAPPO(self.actor, self.critic, cfg)",
          (f"{T}::test_compiled_run_equals_the_eager_run",),
          "the run header says compile: on but the PPO update runs eager"),
        M("compile_time_not_recorded", EXPERIMENT,
          "            if self.compiled and len(self.first_update_s) < 2:\n",
          "            if False:\n",
          (f"{T}::test_compiled_run_equals_the_eager_run",),
          "summary.json loses compile_s"),
    ]
