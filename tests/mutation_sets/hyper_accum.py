"""Issue 18 part 1: accumulated increments (hyper.output=accumulate) and hypernetwork warm starts (hyper.init_from)."""

HYPER = "src/hypermappo/models/hyper.py"
CONFIG = "src/hypermappo/config.py"
WARM = "src/hypermappo/warm_start.py"
EXPERIMENT = "src/hypermappo/experiment.py"
ACC = "tests/test_hyper_accumulate.py"
WS = "tests/test_hyper_warmstart.py"


def mutations(M):
    return [
        M("accum_no_reset_at_episode_start", HYPER,
          "            state = state * (~reset).unsqueeze(-1).to(state.dtype)\n        if self.cfg_h.decay:",
          "            pass\n        if self.cfg_h.decay:", (ACC,),
          "the weight state carried over from the previous episode"),
        M("accum_no_reset_on_death", HYPER,
          "            state = state * active.unsqueeze(-1).to(state.dtype)\n        return state",
          "            pass\n        return state", (ACC,), "a dead agent keeps (and grows) its weights"),
        M("accum_decay_inverted", HYPER, "state = state * (1.0 - self.cfg_h.decay)",
          "state = state * self.cfg_h.decay", (ACC,), "decay read as the kept fraction"),
        M("accum_chunk_reuses_first_step", HYPER, "state = self._accumulate_step(state, delta if static else delta[t],",
          "state = self._accumulate_step(state, delta if static else delta[0],", (ACC,),
          "chunked re-evaluation adds step 0's increment at every step"),
        M("accum_chunk_state_not_carried", HYPER, "                states.append(state)\n",
          "                states.append(state)\n                state = state.detach() * 0\n", (ACC,),
          "the state is not carried between the steps of a chunk"),
        M("accum_code_bias_not_accumulated", HYPER,
          'delta = self._flat_increment(gens) if kind == "weights" else gens[0]["code"]',
          'delta = self._flat_increment(gens) if kind == "weights" else gens[0]["code"] * (gens[0]["code"] != 1)',
          (ACC,), "the generator's bias column (code entry 1) left out of the accumulated code"),
        M("accum_count_ignored", HYPER, "return lin(x) + count * (torch.einsum(", "return lin(x) + (torch.einsum(",
          (ACC,), "agent-id context: the constant increment applied once instead of n_t times"),
        M("accum_history_state_swapped", HYPER, "state = hidden[..., hs:] if hidden is not None else None",
          "state = hidden[..., :self.state_size] if hidden is not None else None", (ACC,),
          "history GRU state read as the weight state"),
        M("accum_smooth_unmasked", HYPER, "            terms.append((sq * active).sum() / active.sum().clamp(min=1.0))\n"
                                          "        elif not out.aux",
          "            terms.append(sq.mean())\n        elif not out.aux", (ACC,),
          "dead agents' increments enter the smoothness term"),
        M("accum_not_recurrent", CONFIG,
          'or (cfg.actor == "hyper" and ("history" in cfg.hyper.context or cfg.hyper.output == "accumulate")))',
          'or (cfg.actor == "hyper" and "history" in cfg.hyper.context))', (ACC,),
          "ppo.data_chunk_length called dead for an accumulated (recurrent) actor"),
        M("accum_decay_dead_key_unchecked", CONFIG,
          'check("hyper.decay", h.output == "accumulate",', 'check("hyper.decay", True,', (ACC,),
          "hyper.decay without accumulate silently ignored"),
        M("init_base_dead_key_unchecked", CONFIG, 'check("hyper.init_base", bool(h.init_from),',
          'check("hyper.init_base", True,', (ACC,), "hyper.init_base without init_from silently ignored"),
        M("accum_memory_check_off", HYPER, "    if need > available / 2:", "    if need > available * 1000:", (ACC,),
          "a weight state that cannot fit is not refused"),
        M("warm_base_never_loaded", WARM, "        elif init_base and not k.startswith",
          "        elif False and not k.startswith", (WS,), "hyper.init_base=true loads nothing more"),
        M("warm_target_not_synced", WARM, "        actor.target.load_state_dict(actor.hyper.state_dict())",
          "        pass", (WS,), "the target hypernetwork keeps its fresh init after a warm start"),
        M("warm_shapes_unchecked", WARM,
          "mismatched = [k for k in keys if tuple(source[k].shape) != tuple(own[k].shape)]", "mismatched = []",
          (WS,), "a mismatched network fails with a traceback from load_state_dict"),
        M("warm_oldest_checkpoint", "src/hypermappo/checkpoint.py", "checkpoint_files(run_dir, newest_first=True)",
          "checkpoint_files(run_dir)", (WS,),
          "the oldest checkpoint loaded instead of the newest"),
        M("warm_audit_not_rebuilt", EXPERIMENT,
          "                L.audit = LiveComponentAudit(L.actor, L.critic, L.cfg)\n", "                pass\n", (WS,),
          "the audit's target snapshot is the fresh init, not the loaded target"),
        M("warm_start_on_resume", EXPERIMENT, "            self._load_checkpoint()\n        else:",
          "            self._warm_start()\n            self._load_checkpoint()\n        else:", (WS,),
          "a resumed run needs (and reloads) the source run"),
    ]
