"""Mutations of the one loader every C kernel goes through (kernels/c_kernel.py `load`)."""

C = "src/hypermappo/kernels/c_kernel.py"


def mutations(M):
    return [
        M("c_kernel_loaded_per_source", C, "key = (str(source), stem, tuple(flags))", "key = (str(source),)",
          ("tests/test_hyper.py::test_attention_vector_switch_selects_the_scalar_build",
           "tests/test_act_norm.py"),
          "one library per source file: another size's, precision's or build's kernel is handed back"),
    ]
