"""Context-dependent hypernetwork sizes (config.resolve_hyper_defaults): the lean setting for per-sample contexts."""

T = "tests/test_hyper.py"
CONFIG = "src/hypermappo/config.py"


def mutations(M):
    return [
        M("hyper_auto_rank_ignores_output", CONFIG,
          'h.rank = 1 if per_sample and h.output == "increment" else 0',
          'h.rank = 1 if per_sample else 0',
          (f"{T}::test_hypernetwork_sizes_default_by_context",),
          "accumulate gets rank 1 (a 325-float weight state, 4x the cost) and full output an invalid rank"),
        M("hyper_auto_layers_swapped", CONFIG,
          'h.layers = "last" if per_sample else "all"',
          'h.layers = "all" if per_sample else "last"',
          (f"{T}::test_hypernetwork_sizes_default_by_context",),
          "observation contexts generate every layer (0.45x MAPPO) and agent-id only the head"),
        M("hyper_auto_history_not_per_sample", CONFIG,
          'PER_SAMPLE_CONTEXTS = ("obs", "history", "coplayer")',
          'PER_SAMPLE_CONTEXTS = ("obs",)',
          (f"{T}::test_hypernetwork_sizes_default_by_context",),
          "a history-only or co-player context keeps the wide per-sample setting"),
        M("hyper_auto_hidden_with_no_hidden_layer", CONFIG,
          "    if h.hidden == 0 and h.mlp_layers > 0:\n",
          "    if h.hidden == 0:\n",
          (f"{T}::test_hypernetwork_without_hidden_layer_keeps_hidden_unset",),
          "auto fills hyper.hidden with mlp_layers=0, so the dead-key check then refuses the user's config"),
    ]
