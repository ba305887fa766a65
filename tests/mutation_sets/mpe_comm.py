"""Mutations of the batched MPE communication scenarios (envs/mpe/_comm.py, simple_speaker_listener.py,
simple_reference.py, simple_crypto.py)."""

T = "tests/test_env_mpe_comm.py"
COMM = "src/hypermappo/envs/mpe/_comm.py"
SL = "src/hypermappo/envs/mpe/simple_speaker_listener.py"
REF = "src/hypermappo/envs/mpe/simple_reference.py"
CRYPTO = "src/hypermappo/envs/mpe/simple_crypto.py"


def mutations(M):
    return [
        M("comm_no_action_clip", COMM, ".clamp(0.0, 1.0)  # [E, N, D]", "  # [E, N, D]", (T,),
          "continuous actions not clipped to [0, 1] like mpe2's ClipOutOfBoundsWrapper"),
        M("comm_integrate_new_velocity", COMM,
          "    pos.add_(vel, alpha=DT)\n    vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)\n",
          "    vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)\n    pos.add_(vel, alpha=DT)\n", (T,),
          "position moves with the new velocity (semi-implicit Euler) instead of mpe2's old one"),
        M("comm_state_from_padded_obs", COMM, "return obs.reshape(self.num_envs, -1).index_select(1, self._state_index)",
          "return obs.reshape(self.num_envs, -1)[:, : self._state_index.numel()]", (T,),
          "state taken from the padded observations instead of mpe2's unpadded concatenation"),
        M("comm_auto_reset_all_envs", COMM, "            self._respawn(ended)\n", "            self._respawn(None)\n",
          (T,), "one finished env resets every env of the batch"),
        M("comm_padding_mask_off_by_one", COMM, "available = torch.arange(max(sizes)) < torch.tensor(sizes)",
          "available = torch.arange(max(sizes)) <= torch.tensor(sizes)", (T,),
          "the first padded action is reported available"),
        M("comm_get_state_aliases", COMM, '{"world": {k: v.clone() for k, v in self.world.items()}',
          '{"world": dict(self.world)', (T,), "a saved state changes as the env steps on"),
        M("comm_set_state_keeps_rng", COMM, '        self.generator.set_state(state["rng"])\n', "", (T,),
          "restoring a state does not restore the start-position RNG"),
        M("comm_render_no_messages", COMM, "frame[top:top + cell, left:left + cell] = np.uint8(255 - 200 * value)",
          "pass", (T,), "utterances are not drawn"),
        M("speaker_listener_deaf_listener", SL, 'obs[:, 1] = torch.cat([w["listener_vel"], rel, w["comm"]], dim=1)',
          'obs[:, 1] = torch.cat([w["listener_vel"], rel, torch.zeros_like(w["comm"])], dim=1)', (T,),
          "the listener does not hear the speaker"),
        M("speaker_listener_distance_not_squared", SL, "dist2 = (w[\"listener_pos\"] - goal_pos).square().sum(1)",
          "dist2 = (w[\"listener_pos\"] - goal_pos).square().sum(1).sqrt()", (T,),
          "reward uses the distance instead of mpe2's squared distance"),
        M("speaker_listener_padded_word_clamped", SL, "actions[:, 0].masked_fill(actions[:, 0] >= DIM_C, 0)",
          "actions[:, 0].clamp(max=DIM_C - 1)", (T,), "a padded speaker action says the last word, not word 0"),
        M("reference_word_move_swapped", REF, "one_hot(actions // MOVE_ACTIONS, DIM_C)", "one_hot(actions % DIM_C, DIM_C)",
          (T,), "discrete action decoded as move-major instead of mpe2's a % 5 / a // 5"),
        M("reference_hears_itself", REF, 'heard = w["comm"].flip(1)', 'heard = w["comm"]', (T,),
          "an agent observes its own utterance instead of the other agent's"),
        M("reference_local_uses_own_position", REF, 'local = (w["agent_pos"].flip(1) - goal_pos)',
          'local = (w["agent_pos"] - goal_pos)', (T,),
          "local reward measures the agent itself instead of the agent its goal is for"),
        M("reference_local_ratio_swapped", REF, "shared * (1.0 - self.local_ratio) + local * self.local_ratio",
          "shared * self.local_ratio + local * (1.0 - self.local_ratio)", (T,),
          "local_ratio weights the global term (invisible at the default 0.5)"),
        M("crypto_counts_silence", CRYPTO, ".square().sum(2) * spoke", ".square().sum(2)", (T,),
          "an all-zero utterance is scored (mpe2 skips it)"),
        M("crypto_bob_hears_key_twice", CRYPTO, "torch.stack([torch.zeros_like(said), said, key], dim=1)",
          "torch.stack([torch.zeros_like(said), key, key], dim=1)", (T,), "Bob's observation misses Alice's utterance"),
        M("crypto_good_reward_sign", CRYPTO, "good = err[:, EVE] - err[:, BOB]", "good = err[:, BOB] - err[:, EVE]", (T,),
          "Alice/Bob rewarded for Bob's error and Eve's success"),
    ]
