"""The pre-groups reference runs (tests/test_groups.py): bit for bit on the reference's CPU vendor, to float
tolerance on another; either way a small change to the maths must fail them."""

REF = "tests/test_groups.py::test_no_groups_reproduces_the_pre_groups_metrics_and_checkpoint[staghunt_mlp]"


def mutations(M):
    return [
        M("reference_run_entropy_bonus_sign", "src/hypermappo/algos/mappo.py",
          "        actor_loss = policy_loss - p.entropy_coef * entropy + sum(aux.values())",
          "        actor_loss = policy_loss + p.entropy_coef * entropy + sum(aux.values())",
          (REF,),
          "the entropy bonus as a penalty: the logged losses move (by far more than another CPU's rounding)"),
    ]
