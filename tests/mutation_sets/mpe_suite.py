"""Mutations of the batched MPE suite (envs/mpe/_world.py, _scenario.py and the five scenarios)."""

W = "src/hypermappo/envs/mpe/_world.py"
S = "src/hypermappo/envs/mpe/_scenario.py"
MPE = "src/hypermappo/envs/mpe/"
T = "tests/test_env_mpe_suite.py"
EQ = f"{T}::test_matches_mpe2_step_for_step"


def mutations(M):
    return [
        M("mpe_contact_force_sign", W, "force.index_add_(0, self.pair_b, on_a.neg())",
          "force.index_add_(0, self.pair_b, on_a)", (EQ,), "both sides of a contact pushed the same way"),
        M("mpe_max_speed_clamp_dropped", W, "self.vel.mul_(scale.unsqueeze(1))", "scale = scale", (EQ,),
          "agents faster than their max_speed"),
        M("mpe_integration_order", W, "self.pos.add_(self.vel, alpha=DT)  # old velocity first, as mpe2\n"
          "        self.vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)",
          "self.vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)\n        self.pos.add_(self.vel, alpha=DT)", (EQ,),
          "semi-implicit Euler instead of mpe2's move-then-accelerate"),
        M("mpe_accel_ignored", W, "force[:A].addcmul_(u, self.accel)", "force[:A].add_(u, alpha=5.0)", (EQ,),
          "per-agent accel (tag: 3 / 4) replaced by the default sensitivity"),
        M("mpe_immovable_pushed", W, "force.mul_(self.movable).mul_(self.inv_mass)", "force.mul_(self.inv_mass)",
          (EQ,), "obstacles drift when agents bump into them"),
        M("mpe_continuous_not_clipped", W, ".clamp(0.0, 1.0).permute(1, 2, 0)", ".permute(1, 2, 0)", (EQ,),
          "continuous actions outside [0, 1] not clipped like mpe2's wrapper"),
        M("mpe_message_index", W, "a.index_select(0, self.speakers) // MOVE_ACTIONS",
          "a.index_select(0, self.speakers) % self.dim_c", (EQ,), "the leader's message decoded from the wrong digit"),
        M("mpe_padded_action_not_noop", W, "a = torch.where(a < action_sizes.view(A, 1), a, 0)", "a = a",
          (f"{T}::test_padded_discrete_action_matches_the_adapter_rule",),
          "a masked action reaching a silent slot moves it (a % 5) instead of the adapter's no-op"),
        M("mpe_obstacles_never_collide", W, "(entities[a].movable or entities[b].movable)",
          "(entities[a].movable and entities[b].movable)", (EQ,), "agents pass through obstacles"),
        M("mpe_state_keeps_padding", S, "for i, d in enumerate(obs_sizes) for k in range(d)]",
          "for i, d in enumerate(obs_sizes) for k in range(D)]", (f"{T}::test_spec_matches_the_mpe2_adapter",),
          "state includes the padding, not mpe2's state()"),
        M("mpe_auto_reset_restarts_all", S, "            self._spawn(ended)\n", "            self._spawn(None)\n",
          (f"{T}::test_auto_reset_is_per_env",), "one finished env restarts every env"),
        M("mpe_set_state_keeps_rng", S, "        self.generator.set_state(state[\"rng\"])\n", "",
          (f"{T}::test_state_round_trip_and_seeding",), "restored env draws different start positions"),
        M("mpe_simple_reward_not_squared", MPE + "simple.py", "-(delta * delta).sum(0, keepdim=True)",
          "-(delta * delta).sum(0, keepdim=True).sqrt()", (EQ,), "distance instead of mpe2's squared distance"),
        M("mpe_adversary_reward_term_missing", MPE + "simple_adversary.py",
          "good = adversary - goal_dist[1:].amin(0, keepdim=True)", "good = -goal_dist[1:].amin(0, keepdim=True)",
          (EQ,), "good agents not rewarded for the adversary's distance to the goal"),
        M("mpe_push_obs_order", MPE + "simple_push.py", "self._goal_rel()[1:], own_color,",
          "own_color[:, :2], self._goal_rel()[1:], own_color[:, 2:],", (EQ,), "good agent's obs fields swapped"),
        M("mpe_tag_boundary_wall", MPE + "simple_tag.py", "torch.where(x < 1.0, ramp, wall)",
          "torch.where(x < 1.0, ramp, ramp)", (EQ,), "the exp wall beyond |x| = 1 replaced by the ramp"),
        M("mpe_tag_touch_distance", MPE + "simple_tag.py", "torch.tensor([[0.075 + 0.05]]",
          "torch.tensor([[0.075 + 0.075]]", (EQ,), "capture distance from the wrong sizes"),
        M("mpe_tag_no_prey_velocity", MPE + "simple_tag.py", "good_vel.expand(V, -1, -1)",
          "torch.zeros_like(good_vel).expand(V, -1, -1)", (EQ,), "adversaries do not see the prey's velocity"),
        M("mpe_world_comm_leader_not_omniscient", MPE + "simple_world_comm.py",
          " | self._is_leader\n", "\n", (EQ,), "forests hide agents from the leader too"),
        M("mpe_world_comm_forest_rule", MPE + "simple_world_comm.py",
          "(outside.unsqueeze(1) & outside.unsqueeze(0))", "outside.unsqueeze(1)", (EQ,),
          "an agent outside every forest sees agents hidden in one"),
        M("mpe_world_comm_food_reward", MPE + "simple_world_comm.py", "+ 2 * (food_dist < GOOD_SIZE + FOOD_SIZE)",
          "+ 0 * (food_dist < GOOD_SIZE + FOOD_SIZE)", (EQ,), "eating food earns nothing"),
        M("mpe_world_comm_good_obs_order", MPE + "simple_world_comm.py",
          "good = torch.cat([own[V:], forest_flags[V:], good_vel(slice(V, A), self._good_of_good)], 1)",
          "good = torch.cat([own[V:], good_vel(slice(V, A), self._good_of_good), forest_flags[V:]], 1)", (EQ,),
          "good agents' forest flags and velocities swapped (mpe2 orders them unlike the adversaries')"),
    ]
