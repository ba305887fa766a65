"""The test suite's C++ compiler for Inductor (tests/cxx_quick): -O1 over Inductor's kernels, nothing else changed."""

TEST = "tests/test_suite_compiler.py"
QUICK = "tests/cxx_quick"


def mutations(M):
    return [
        M("suite_compiler_keeps_o3", QUICK,
          "args+=(-O1)",
          "args+=(-O3)",
          (TEST,),
          "Inductor's kernels still built at -O3: the wrapper does nothing"),
        M("suite_compiler_rewrites_every_command", QUICK,
          "if (( inductor )); then",
          "if true; then",
          (TEST,),
          "the library's own C kernels would be built at -O1 too"),
    ]
