"""Device-dependent choices tested on the CPU (algos/adam.py, runtime/device_rng.py, storage/rollout.draw_perm)."""

T = "tests/test_device_paths.py::"


def mutations(M):
    return [
        M("cuda_adam_not_capturable", "src/hypermappo/algos/adam.py",
          'return {"fused": True, "capturable": True}', 'return {"foreach": True}',
          (T + "test_adam_is_foreach_on_cpu_and_fused_capturable_on_cuda",),
          "CUDA gets the CPU's Adam: a host scalar step count in every step, nothing a CUDA graph can capture"),
        M("step_count_always_on_host", "src/hypermappo/algos/adam.py",
          '    return torch.zeros((), dtype=torch.float32, device=p.device if on_device else "cpu")',
          "    return torch.tensor(0.0)",
          (T + "test_a_fresh_step_count_is_where_adam_itself_puts_it[cuda]",),
          "the compiled update gives a fused Adam a CPU step count it never made"),
        M("perm_from_another_stream", "src/hypermappo/storage/rollout.py",
          "    return torch.randperm(n, generator=generator, device=on).to(device)",
          "    return torch.randperm(n, device=on).to(device)",
          (T + "test_draws_on_the_cpu_are_the_cpu_generators_as_before",),
          "mini-batches drawn from the global stream, not the run's generator: a resumed run draws others"),
        M("restore_unchecked", "src/hypermappo/runtime/device_rng.py",
          "    if state.numel() != expected:", "    if False:",
          (T + "test_a_generator_state_of_another_device_type_is_a_one_line_error",),
          "a state of another device type reaches torch's set_state: a traceback, not a one-line error"),
        M("learning_rates_on_host", "src/hypermappo/algos/mappo.py",
          "for g in opt.param_groups],\n                           device=buf.advantages.device)",
          "for g in opt.param_groups])",
          (T + "test_collection_and_update_make_no_tensor_where_the_device_is_not_said[mpe/simple_spread compiled]",),
          "the compiled update's learning rates on the host: a CUDA graph's kernel launch fails ('invalid argument')"),
        M("step_count_on_default_device", "src/hypermappo/algos/adam.py",
          'device=p.device if on_device else "cpu")', "device=p.device if on_device else None)",
          (T + "test_collection_and_update_make_no_tensor_where_the_device_is_not_said[staghunt/default compiled]",),
          "a fresh CPU step count made wherever the default device points, not where Adam keeps it"),
    ]
