"""CUDA graphs of the compiled path (compile/cuda_graphs.py): the switch, the option, the static marks."""

T = "tests/test_cuda_graphs.py::"
MARKS = T + "test_every_tensor_a_graph_writes_in_place_is_static_with_cuda_graphs_on[mpe/simple_spread]"


def mutations(M):
    return [
        M("cuda_graphs_on_by_default", "src/hypermappo/compile/cuda_graphs.py",
          '    if flag == "auto":\n        return False,', '    if flag == "auto":\n        return True,',
          (T + "test_the_switch_is_off_by_default_on_only_for_cuda_and_checked",),
          "CUDA graphs taken by default before they were measured with the marks on a GPU"),
        M("cuda_graphs_option_dropped", "src/hypermappo/compile/cuda_graphs.py",
          'return {"triton.cudagraphs": True} if "cuda" in _ON else {}', "return {}",
          (T + "test_every_graph_gets_inductors_cuda_graphs_once_a_cuda_learner_asked",),
          "the switch says on, but no graph is compiled with Inductor's CUDA graphs"),
        M("buffer_and_env_not_marked", "src/hypermappo/experiment.py",
          "            cuda_graphs.mark_static([*cuda_graphs.tensors_of(L.buffer), *cuda_graphs.tensors_of(self.env)])",
          "            pass",
          (MARKS,),
          "collection's graphs write the rollout buffer and the env's state unmarked: Inductor skips their CUDA graphs"),
        M("adam_state_not_marked", "src/hypermappo/algos/fused_step.py",
          "                cuda_graphs.mark_static(opt.state[p].values())", "                pass",
          (MARKS,),
          "the update's graph writes Adam's moments unmarked: Inductor skips its CUDA graph"),
        M("nested_state_not_walked", "src/hypermappo/compile/cuda_graphs.py",
          "            elif depth > 1 and hasattr(v, \"__dict__\")", "            elif False",
          (MARKS,),
          "the env's episode tracker (an object inside the env) is left unmarked"),
    ]
