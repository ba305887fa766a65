"""The goal model's compiled gradient: the same sum whatever the threads (models/coplayer_goal.py, `_first_layer`)."""

T = "tests/test_compiled.py"
GOAL = "src/hypermappo/models/coplayer_goal.py"
SAME_SUM = f"{T}::test_the_goal_models_compiled_gradient_is_the_same_sum_whatever_the_threads"


def mutations(M):
    return [
        M("goal_table_rows_by_scatter_in_graphs", GOAL,
          "        if torch.compiler.is_compiling():\n",
          "        if False:\n",
          (SAME_SUM,),
          "the compiled goal model's table gradient a scatter-add again (parallel atomic adds: not the same run "
          "twice with two threads)"),
    ]
