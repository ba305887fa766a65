"""The speed benchmarks' own arithmetic (benchmarks/throughput.py's GEMM floor, benchmarks/speed_vs_peers.py)."""

T = "tests/test_bench.py"
THROUGHPUT = "benchmarks/throughput.py"
PEERS = "benchmarks/speed_vs_peers.py"


def mutations(M):
    return [
        M("gemm_floor_forgets_addmm", THROUGHPUT,
          'GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")',
          'GEMMS = ("aten::mm", "aten::bmm")',
          (f"{T}::test_gemm_floor_replays_every_matrix_multiply_of_an_update",),
          "the GEMM floor leaves out the forward layers (addmm): the bound it gives is too optimistic"),
        M("gemm_bound_without_collection", PEERS,
          'best = steps / ((c["collect_ms"] + e["gemm_ms"]) / 1000)',
          'best = steps / (e["gemm_ms"] / 1000)',
          (f"{T}::test_speed_vs_peers_gemm_bound_is_collection_plus_gemms",),
          "the reachable rate ignores collection, overstating what compiling could reach"),
    ]
