"""The co-player model's model-dependent auto width (config.resolve_coplayer_defaults): 64 for the goal network of
`bayes`, 128 for the recurrent models, an explicit width kept."""

T = "tests/test_coplayer_bayes.py::test_coplayer_width_defaults_by_model"
CONFIG = "src/hypermappo/config.py"


def mutations(M):
    return [
        M("coplayer_auto_width_one_for_all", CONFIG,
          'COPLAYER_AUTO_HIDDEN = {"bayes": 64, "gru": 128, "subgoal": 128}',
          'COPLAYER_AUTO_HIDDEN = {"bayes": 128, "gru": 128, "subgoal": 128}',
          (T,), "the goal belief keeps the 128-wide network (1.3x MAPPO's time per env step against a population)"),
        M("coplayer_auto_width_overrides_explicit", CONFIG,
          "    if c.hidden == 0:\n        c.hidden = COPLAYER_AUTO_HIDDEN[c.model]\n",
          "    c.hidden = COPLAYER_AUTO_HIDDEN[c.model]\n",
          (T,), "a user's coplayer.hidden is silently replaced by the auto width"),
        M("coplayer_auto_width_not_resolved_in_validate", CONFIG,
          "    if cfg.coplayer.enabled:\n        resolve_coplayer_defaults(cfg.coplayer)\n",
          "",
          (T,), "config.yaml records hidden: 0, so what the run built is not what its config says"),
        M("coplayer_goal_policy_unresolved", "src/hypermappo/algos/coplayer_bayes.py",
          "    c = resolve_coplayer_defaults(cfg.coplayer)  # a config built without validate()\n",
          "    c = cfg.coplayer\n",
          (T,), "a config built without validate() builds a goal network of width 0"),
    ]
