"""The compiled collection step (collect_step.py: policy forward, sampling, buffer writes and the env's step core as
one graph), its place in Experiment.collect, and the env split it relies on (mpe_torch.py)."""

CS = "src/hypermappo/collect_step.py"
EXP = "src/hypermappo/experiment.py"
MPE = "src/hypermappo/envs/mpe_torch.py"
T = "tests/test_compiled.py"
EQUAL_MLP = f"{T}::test_collection_graph_run_equals_the_eager_run[mlp]"
EQUAL_SMOOTH = f"{T}::test_collection_graph_run_equals_the_eager_run[hyper-obs-smooth]"
WHY_NOT = f"{T}::test_collection_graph_says_why_not"
HEADER = f"{T}::test_run_header_says_how_collection_runs"


def mutations(M):
    return [
        M("collect_graph_logp_row_not_written", CS,
          '"actions", "logp", "values", "dist_params")',
          '"actions", "values", "dist_params")',
          (EQUAL_MLP,),
          "a buffer row the policy produces left out of the graph's writes (the update reads a stale log-prob)"),
        M("collect_graph_row_off_by_one", CS,
          "return self.graph(self.index[t], s.obs,",
          "return self.graph(self.index[t - 1], s.obs,",
          (EQUAL_MLP,),
          "step t's rows written at t - 1"),
        M("collect_graph_prev_obs_not_given", CS,
          "L.prev_obs if L.store_prev_obs else None)",
          "None)",
          (EQUAL_SMOOTH,),
          "the smoothness term's previous observation not written by the graph"),
        M("collect_graph_prev_obs_not_advanced", EXP,
          "                g.learner.prev_obs = s.obs\n",
          "",
          (EQUAL_SMOOTH,),
          "the learner's previous observation never moved on (every row would hold the first one)"),
        M("collect_graph_taken_by_any_group_count", CS,
          "if len(groups) != 1 or groups[0].learner is None",
          "if len(groups) > 2 or groups[0].learner is None",
          (WHY_NOT,),
          "one group's graph taken in a run of two groups (the other group would never act)"),
        M("collect_graph_taken_by_a_switching_group", CS,
          "    if len(g.phases) > 1:",
          "    if len(g.phases) > 9:",
          (WHY_NOT,),
          "the graph taken by a group that later stops learning (it would go on writing its buffer and acting)"),
        M("collect_note_not_in_the_header", "src/hypermappo/cli.py",
          "*([exp.collect_note] if exp.collect_note else [])",
          "*[]",
          (HEADER,),
          "the run header silent about which path collection takes"),
        M("mpe_geometry_cached_as_views", MPE,
          "rel[:, L:].contiguous(), dist[:, L:].contiguous()",
          "rel[:, L:], dist[:, L:]",
          (EQUAL_MLP,),
          "the cached geometry keeps a graph's strides, so the next collection call recompiles (a third graph)"),
    ]
