"""Micro-batch row blocks (algos/micro_batch.py), their eager / three-graph loop (MAPPO._backward) and the compiled
block graphs (FusedMinibatchStep)."""

EQ = "tests/test_micro_batch.py::test_micro_batched_update_equals_the_one_pass_update"
BLOCKS = "tests/test_micro_batch.py::test_row_blocks_split_evenly_where_they_can_and_cover_every_row_once"
COMPILED = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[hyper-obs-micro-act-norm-weight-grad]"
MB = "src/hypermappo/algos/micro_batch.py"
MAPPO = "src/hypermappo/algos/mappo.py"
FUSED = "src/hypermappo/algos/fused_step.py"


def mutations(M):
    return [
        M("micro_weight_by_rows", MB,
          "    return [mask[b].sum().float() / total for b in blocks]",
          "    return [torch.tensor(len(range(mask.shape[0])[b]) / mask.shape[0]) for b in blocks]",
          (EQ,),
          "weighting a block by its share of rows, not of alive agents: blocks with more deaths count too much"),
        M("micro_blocks_drop_last_rows", MB,
          "    return [slice(i, min(i + per, rows)) for i in range(0, rows, per)]",
          "    return [slice(i, i + per) for i in range(0, rows - per + 1, per)]",
          (BLOCKS,),
          "an uneven last block dropped: its rows never train"),
        M("micro_unweighted_block_backward", MAPPO,
          "            (weight * (actor_loss + p.value_coef * value_loss)).backward()",
          "            (actor_loss + p.value_coef * value_loss).backward()",
          (EQ,),
          "each block's mean loss at full weight: K times the gradient"),
        M("micro_stats_unweighted", MAPPO,
          "                stat_sums[k] = stat_sums.get(k, 0.0) + weight * v.detach()",
          "                stat_sums[k] = stat_sums.get(k, 0.0) + v.detach()",
          (EQ,),
          "logged losses summed over blocks instead of averaged"),
        M("micro_fused_grads_not_accumulated", FUSED,
          "        return {n: g + block_grads[n] for n, g in grads.items()}, losses + weight * block_losses",
          "        return block_grads, losses + weight * block_losses",
          (COMPILED,),
          "the compiled block graph keeps only the last block's gradients"),
        M("guards_skipped_for_a_new_shape", MAPPO,
          "skip_guard_eval_unsafe=(unroll, sizes) in guarded\n",
          "skip_guard_eval_unsafe=n > 0\n",
          ("tests/test_compiled.py::test_compiled_run_equals_the_eager_run[mlp]",),
          "guards skipped on a mini-batch of a shape not yet seen: the graph of another shape runs on it"),
    ]
