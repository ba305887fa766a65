"""ppo.compile's mask pass (bool_masks.py)."""

T = "tests/test_bool_masks.py::test_masks_are_recomputed_not_saved_as_bool_and_the_values_stay"
MASKS = "src/hypermappo/compile/bool_masks.py"
COMPILED = "src/hypermappo/compile/decision.py"


def mutations(M):
    return [
        M("masks_pass_not_installed", COMPILED,
          "inductor.joint_custom_post_pass = GraphPasses([bool_masks.PASS]) if cpu and bool_masks.enabled() else None",
          "inductor.joint_custom_post_pass = None",
          (T,),
          "the pass is written but never given to Inductor: ReLU masks are saved as bool again"),
        M("masks_saved_not_recomputed", MASKS,
          'node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE',
          'node.meta["recompute"] = CheckpointPolicy.PREFER_SAVE',
          (T,),
          "the comparisons are tagged, but with a policy that lets the partitioner save them"),
        M("masks_only_integer_comparisons", MASKS,
          "and src.dtype.is_floating_point",
          "and not src.dtype.is_floating_point",
          (T,),
          "the float test inverted: the masks of float activations are no longer marked"),
    ]
