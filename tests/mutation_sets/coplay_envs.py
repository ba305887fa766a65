"""Mutations of the co-play envs: coin game, staghunt goal labels and snowdrift payoffs, scripted partners' goals,
goal events through PettingZoo infos and the adapter."""

SH = "src/hypermappo/envs/staghunt.py"
CG = "src/hypermappo/envs/coingame.py"
RULES = "src/hypermappo/policies/scripted_rules.py"
PZ = "src/hypermappo/envs/pettingzoo.py"
VIEW = "src/hypermappo/envs/parallel_view.py"
T_SH = "tests/test_env_staghunt.py"
T_CG = "tests/test_env_coingame.py"
T_SC = "tests/test_scripted.py"


def mutations(M):
    return [
        M("staghunt_goal_kinds_swapped", SH,
          "goal_event = torch.where(catchers[..., :self.n_stags].any(-1), STAG_GOAL,",
          "goal_event = torch.where(catchers[..., :self.n_stags].any(-1), HARE_GOAL,",
          (T_SH,), "stag captures labelled as hares"),
        M("staghunt_goal_on_prey_not_caught", SH,
          "goal_event = torch.where(catchers[..., :self.n_stags].any(-1), STAG_GOAL,",
          "goal_event = torch.where(on_prey[..., :self.n_stags].any(-1), STAG_GOAL,",
          (T_SH,), "a hunter alone on a stag counts as a completed goal although nothing was caught"),
        M("snowdrift_cost_not_shared", SH,
          "cost_share = (stags / stags.sum(1, keepdim=True).clamp(min=1)).sum(-1)",
          "cost_share = stags.sum(-1)",
          (T_SH,), "every catcher pays the whole stag cost: R = b - c, the ordering T > R > S > P breaks"),
        M("snowdrift_needs_two_hunters", SH,
          "stag_min_hunters = 1 if snowdrift else 2", "stag_min_hunters = 2",
          (T_SH,), "a lone hunter cannot clear the snowdrift: no S outcome"),
        M("coin_penalty_to_picker", CG,
          "owner_hit = (foreign.unsqueeze(-1) * self._colour_one_hot[self.coin_colour]).sum(1)",
          "owner_hit = (foreign.unsqueeze(-1) * self._colour_one_hot[1 - self.coin_colour]).sum(1)",
          (T_CG,), "the -2 goes to the picker instead of the coin's owner"),
        M("coin_goal_own_other_swapped", CG,
          "goal_event = torch.where((on & own).any(-1), OWN_GOAL,",
          "goal_event = torch.where((on & own).any(-1), OTHER_GOAL,",
          (T_CG,), "own-coin picks labelled as the other's"),
        M("coin_respawn_under_players", CG,
          "        occupied.scatter_(1, self._cells(self.players), True)\n",
          "", (T_CG,), "a new coin can appear under a player"),
        M("coin_obs_not_egocentric", CG,
          "torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]], device=dev)",
          "torch.tensor([[0, 1, 2, 3], [1, 0, 2, 3]], device=dev)",
          (T_CG,), "blue sees red's coins as its own"),
        M("coin_cooperative_takes_any_coin", RULES,
          "valid = own if own_only else torch.ones_like(own)",
          "valid = torch.ones_like(own)",
          (T_SC,), "the cooperative partner also takes the other's coins"),
        M("stag_rule_writes_hare_goal", RULES,
          "torch.full_like(actions, STAG_GOAL if stags else HARE_GOAL)",
          "torch.full_like(actions, HARE_GOAL if stags else STAG_GOAL)",
          (T_SC,), "scripted goal labels name the wrong prey kind"),
        M("scripted_goal_without_target", RULES,
          "ctx.goal = torch.where(has_target & step.active[:, ctx.slots], goal, -1).long()",
          "ctx.goal = torch.where(step.active[:, ctx.slots], goal, -1).long()",
          (T_SC,), "a rule with nothing to go for still claims a goal"),
        M("adapter_drops_goal_event", PZ,
          "v[\"goal_event\"][:] = adapter.goal_event", "v[\"goal_event\"][:] = -1",
          (T_CG,), "the PettingZoo adapter never reports goal events"),
        M("adapter_goal_event_sticks", PZ,
          "            self.goal_event.fill(-1)\n            for name, info",
          "            for name, info",
          (T_CG,), "a goal event of one step is reported again on later steps"),
        M("parallel_view_goal_of_first_agent", VIEW,
          "infos[a][\"goal_event\"] = int(extras[\"goal_event\"][0, i])",
          "infos[a][\"goal_event\"] = int(extras[\"goal_event\"][0, 0])",
          (T_SH,), "every agent's info carries the first agent's goal event"),
        M("eval_averages_goal_events", "src/hypermappo/evaluation.py",
          "                if v.dim() != 1:  # per-agent extras such as goal_event [E, N] are no episode statistics\n"
          "                    continue\n", "",
          (T_CG,), "evaluation broadcasts [E, N] goal events against [E] episode masks"),
        M("contract_ignores_goal_range", "src/hypermappo/envs/contract.py",
          "assert ((g >= -1) & (g < len(spec.goal_names))).all()", "assert ((g >= -1)).all()",
          (T_CG,), "the contract check lets goal indices beyond goal_names through"),
    ]
