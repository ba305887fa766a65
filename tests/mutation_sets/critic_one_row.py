"""The critic's one forward per env when every agent slot reads the same input (models/critic.py)."""

T = ("tests/test_reference_math.py::"
     "test_critic_with_one_input_for_all_agents_runs_once_per_env_with_the_same_values_and_gradients")
CRITIC = "src/hypermappo/models/critic.py"


def mutations(M):
    return [
        M("critic_one_row_despite_death_mask", CRITIC,
          "                                and not self.death_masked)",
          "                                )",
          (T,),
          "death-masked inputs differ per agent: one row per env gives a dead agent the live agents' value"),
        M("critic_one_row_with_agent_id", CRITIC,
          'self.one_row_per_env = (self.mode in ("state", "obs_concat") and groups == 1',
          'self.one_row_per_env = (self.mode in ("state", "obs_concat", "state_agent_id") and groups == 1',
          (T,),
          "the agent id makes the rows differ: every agent would get agent 0's value"),
        M("critic_one_row_with_separate_weights", CRITIC,
          'self.one_row_per_env = (self.mode in ("state", "obs_concat") and groups == 1',
          'self.one_row_per_env = (self.mode in ("state", "obs_concat")',
          (T,),
          "separate critics per agent: one row through one agent's weights is not every agent's value"),
    ]
