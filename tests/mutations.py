"""Mutation check of the test suite: apply small plausible bugs one at a time and see a test catch each.

    python tests/mutations.py                 # every mutation, prints a table, exits 1 if any survives
    python tests/mutations.py --list          # names only
    python tests/mutations.py gae_on_normalised_values value_clip_min   # just these
    python tests/mutations.py --out benchmarks/results/mutations.md

Each mutation is a (file, exact old text, new text) edit plus the test files that should catch it (run with
`pytest -x`, so a mutation is *killed* when any of them fails). The source tree is copied to a temporary directory
for every mutation: the working tree is never modified. The old text must occur exactly once in the file, so
a mutation whose target code moved is reported as STALE (fix its text) instead of silently passing.
A baseline run of all the listed test files without any mutation must pass first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Mutation:
    name: str
    file: str  # relative to the repo root
    old: str
    new: str
    tests: tuple[str, ...]  # pytest targets (files or node ids) expected to catch it
    why: str = ""


M = Mutation
MUTATIONS: list[Mutation] = []  # filled below


def _copy_tree(dst: Path) -> None:
    for name in ("src", "tests", "configs", "benchmarks"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "results", "*.pyc"))
    for name in ("pyproject.toml",):
        shutil.copy2(ROOT / name, dst / name)


def _pytest(workdir: Path, targets: tuple[str, ...], timeout: float) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(workdir / "src"), "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *targets],
                           cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "timeout", time.monotonic() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    failed = next((ln for ln in lines if ln.startswith("FAILED") or ln.startswith("ERROR")), lines[-1] if lines else "")
    return p.returncode, failed, time.monotonic() - t0


def run(mutations: list[Mutation], timeout: float) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory(prefix="hypermappo_mut_") as tmp:
        base = Path(tmp) / "tree"
        _copy_tree(base)
        targets = tuple(sorted({t for m in mutations for t in m.tests}))
        code, line, secs = _pytest(base, targets, timeout * 3)
        print(f"baseline ({len(targets)} targets): exit {code} in {secs:.0f}s  {line}", flush=True)
        if code != 0:
            raise SystemExit(f"baseline failed without any mutation: {line}")
        for m in mutations:
            path = base / m.file
            original = path.read_text()
            count = original.count(m.old)
            if count != 1:
                results.append({"name": m.name, "status": "STALE", "detail": f"old text found {count} times in {m.file}"})
                print(f"{m.name:45s} STALE ({count} matches)", flush=True)
                continue
            path.write_text(original.replace(m.old, m.new))
            try:
                code, line, secs = _pytest(base, m.tests, timeout)
            finally:
                path.write_text(original)
            status = "killed" if code != 0 else "SURVIVED"
            results.append({"name": m.name, "status": status, "detail": line, "seconds": round(secs, 1),
                            "file": m.file, "tests": ", ".join(m.tests)})
            print(f"{m.name:45s} {status:8s} {secs:5.0f}s  {line[:110]}", flush=True)
    return results


def table(results: list[dict]) -> str:
    rows = ["| mutation | file | status | caught by |", "|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r['name']} | {r.get('file', '')} | {r['status']} | {r['detail'].replace('|', '/')[:140]} |")
    killed = sum(r["status"] == "killed" for r in results)
    rows.append(f"\n{killed} of {len(results)} mutations killed")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="run only these mutations")
    p.add_argument("--list", action="store_true")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per mutation run")
    p.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = p.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:45s} {m.file}  <- {m.why}")
        return 0
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        p.error(f"unknown mutation(s): {', '.join(unknown)}")
    chosen = [by_name[n] for n in args.names] if args.names else MUTATIONS
    results = run(chosen, args.timeout)
    text = table(results)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# Mutation check\n\n`python tests/mutations.py`\n\n" + text + "\n")
    return 0 if all(r["status"] == "killed" for r in results) else 1


# --------------------------------------------------------------------------- the mutations

MAPPO = "src/hypermappo/algos/mappo.py"
EXP = "src/hypermappo/experiment.py"
CKPT = "src/hypermappo/checkpoint.py"
ROLL = "src/hypermappo/storage/rollout.py"
HYPER = "src/hypermappo/models/hyper.py"
ATTN = "src/hypermappo/models/agent_attention.py"
DEATH = "src/hypermappo/algos/death.py"
CONFIG = "src/hypermappo/config.py"
DIAG = "src/hypermappo/diagnostics.py"
REF = "tests/test_reference_math.py::test_one_rollout_and_update_match_scalar_reference"
MASKS = "tests/test_training_masks.py"
RESUME_ALL = "tests/test_resume.py::test_resume_from_a_checkpoint_equals_the_uninterrupted_run"
FAULTS = "tests/test_faults.py"

MUTATIONS += [
    # --- the list of plausible bugs no test used to catch
    M("bootstrap_loses_gamma", EXP, "reward = reward + L.cfg.ppo.gamma * L.algo.value_norm.denormalize(v_final) * alive",
      "reward = reward + L.algo.value_norm.denormalize(v_final) * alive", (REF,),
      "truncation bootstrap without the discount"),
    M("bootstrap_loses_alive_mask", DEATH, "        return truncated.unsqueeze(-1) & final_active",
      "        return truncated.unsqueeze(-1).expand_as(final_active)", (REF,),
      "agent mode bootstraps agents dead at the truncation"),
    M("advantage_stats_include_dead", MAPPO, "active_adv = buf.advantages[buf.active]",
      "active_adv = buf.advantages.flatten()", (REF,), "advantage mean/std over dead slots too"),
    M("value_norm_updated_on_dead", MAPPO, "self.value_norm.update(buf.returns[buf.active])",
      "self.value_norm.update(buf.returns.flatten())", (REF,), "value normaliser statistics include dead slots"),
    M("available_dropped_in_evaluate", MAPPO,
      'out = self.actor(batch["obs"], batch.get("available"), batch.get("actor_h0")',
      'out = self.actor(batch["obs"], None, batch.get("actor_h0")', (MASKS,),
      "training-time evaluate ignores the action mask"),
    M("available_never_stored", EXP, "L.buffer.insert(t, obs=actor_obs, state=s.state, available=available,",
      "L.buffer.insert(t, obs=actor_obs, state=s.state, available=None,", (MASKS,), "the action mask is not stored"),
    M("gae_on_normalised_values", MAPPO, "        values = self.value_norm.denormalize(buf.values)\n",
      "        values = buf.values\n", (REF,), "GAE computed on normalised values"),
    M("targets_not_normalised", MAPPO, 'targets = self.value_norm.normalize(batch["returns"])',
      'targets = batch["returns"]', (REF,), "value loss against unnormalised returns"),
    M("stored_values_not_reexpressed", MAPPO, "        buf.values.copy_(self.value_norm.normalize(values))\n", "",
      (REF,), "old predictions left in the previous normaliser units"),
    M("value_clip_min", MAPPO, "err_loss = torch.max(err_loss, err_c_loss)", "err_loss = torch.min(err_loss, err_c_loss)",
      (REF,), "value clipping picks the smaller loss"),
    M("lr_decay_never_applied", EXP, "g.learner.algo.set_lr_fraction(1.0 - self.update / self.updates_total)", "pass",
      ("tests/test_reference_math.py::test_lr_decay_is_applied_every_update",), "ppo.lr_decay ignored"),
    M("agent_id_context_uses_agent_0", HYPER, "return [{k: v[0] for k, v in g.items()} for g in gens]",
      "return [{k: v[0, :1].expand_as(v[0]) for k, v in g.items()} for g in gens]",
      ("tests/test_hyper.py::test_agent_id_context_gives_each_agent_its_own_policy",),
      "every agent gets agent 0's delta"),
    M("batch_generator_not_restored", EXP, '        restore(self.batch_generator, rng["batch"], "mini-batch")\n', "",
      (RESUME_ALL,), "mini-batch order differs after resume"),
    # --- the defects, each with its test
    M("target_without_alpha_accepted", CONFIG, 'if h.target != "none" and h.alpha == 0 and "hyper.target" not in out:',
      'if False:', ("tests/test_config_errors.py",), "defect 1: unread target hypernetwork accepted"),
    M("audit_counts_no_gradient", DIAG, "live = bool(self.grad_seen[name] > 0)", "live = True",
      ("tests/test_hyper.py",), "defect 1: audit calls every module live"),
    M("sync_counter_not_saved", HYPER, 'self._updates = int(state["updates"])', "self._updates = 0",
      (RESUME_ALL,), "defect 2: target sync counter lost on resume"),
    M("dead_key_accepted", CONFIG, 'check("hyper.target_interval", h.target == "hard"',
      'check("hyper.target_interval", True', ("tests/test_config_errors.py",), "defect 3: unused key accepted"),
    M("attention_dense_mask_dropped", ATTN, "scores = scores.masked_fill(hidden_key, float(\"-inf\"))\n"
      "        weights = scores.softmax(2)", "pass\n        weights = scores.softmax(2)",
      ("tests/test_hyper.py::test_agent_attention_never_attends_to_dead_agents",), "defect 4: dense path attends to dead"),
    M("attention_fused_mask_dropped", "src/hypermappo/kernels/agent_attention.c",
      "s[j][h] = (!live || live[j]) ? dot * scale : -INFINITY;", "s[j][h] = dot * scale;",
      ("tests/test_hyper.py::test_agent_attention_never_attends_to_dead_agents",), "defect 4: C kernel attends to dead"),
    M("actor_not_given_active", "src/hypermappo/policies/groups.py",
      "out = self.actor(actor_obs, available, actor_h, reset, active=active)",
      "out = self.actor(actor_obs, available, actor_h, reset)",
      (MASKS,), "defect 4: collection attends to dead agents"),
    M("nonfinite_env_data_ignored", EXP, "if not math.isfinite(float(nxt.reward.sum() + nxt.obs.sum() + nxt.state.sum())):",
      "if False:", (FAULTS,), "defect 5: NaN reward trained on"),
    M("nonfinite_loss_ignored", MAPPO,
      "if not torch.isfinite(torch.stack([x.to(actor_loss.device) for x in checked])).all():",
      "if False:", (FAULTS,), "defect 5: NaN loss reaches the weights"),
    M("checkpoint_crc_not_checked", CKPT, 'if f"{zlib.crc32(data):08x}" != crc:', "if False:",
      (FAULTS,), "defect 6: corrupt checkpoint loaded"),
    M("signal_not_handled", "src/hypermappo/runtime/signals.py", "                signal.signal(signum, self.handle)\n", "",
      (FAULTS,), "defect 7: Ctrl-C loses the work since the last checkpoint"),
    M("run_dir_not_locked", "src/hypermappo/runtime/run_lock.py", "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
      "pass", ("tests/test_run_ownership.py::test_second_train_or_resume_of_a_run_dir_in_use_is_a_one_line_error",),
      "defect 8: two processes train one run dir"),
    M("sweep_workers_outlive_parent", "src/hypermappo/sweep.py", "    die_with_parent()\n", "    pass\n",
      ("tests/test_run_ownership.py::test_sigkilled_sweep_leaves_no_worker_and_its_rerun_resumes_every_run",),
      "defect 8: killed sweep leaves workers running"),
    M("signal_repeat_counts_twice", "src/hypermappo/runtime/signals.py",
      "        if signum == self.received and now - self.received_at < REPEAT_S:", "        if False:",
      (FAULTS + "::test_one_signal_delivered_twice_at_once_counts_once",),
      "one SIGTERM from `timeout` (to the run and to its group) aborts the run without its checkpoint"),
    M("compilers_get_the_group_signal", "src/hypermappo/runtime/signals.py",
      "            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)\n", "",
      (FAULTS + "::test_sigterm_to_the_process_group_during_the_first_compiled_update_saves_it",),
      "a group SIGTERM kills the compiler of the first compiled update: its update is lost"),
    M("failure_after_signal_not_the_signal", EXP, "                    raise self._interrupted_during(e) from e\n",
      "                    raise\n", (FAULTS + "::test_a_failure_after_the_first_signal_is_reported_as_the_signal",),
      "a compile killed by the signal ends in its traceback instead of the signal's one line"),
    M("sweep_failed_run_counted_done", "src/hypermappo/sweep.py", 'return "failed" if failure(d) else "done"',
      'return "done"', ("tests/test_workflow.py::test_a_rerun_sweep_reports_a_run_that_failed_on_nan_as_failed_not_done",),
      "a re-run sweep counts a NaN-failed run as complete"),
    M("sweep_terminates_its_runs", "src/hypermappo/sweep.py", "                    os.kill(proc.pid, signum)\n",
      "                    proc.terminate()\n",
      ("tests/test_run_ownership.py::test_ctrl_c_on_a_local_sweep_saves_the_update_in_progress_of_each_run",),
      "Ctrl-C on a sweep: its SIGTERM is a second signal to the runs, which abort without their checkpoint"),
    M("chunk_auto_is_10", CONFIG, "    T = cfg.rollout_length\n    return max(", "    T = 10\n    return max(",
      ("tests/test_hyper_accumulate.py::test_the_flagship_preset_trains_accumulate_with_the_default_chunk_length",),
      "the default chunk length does not fit a 25-step rollout: the flagship preset refuses to start"),
    M("nan_config_accepted", CONFIG, "        if not math.isfinite(number):", "        if False:",
      ("tests/test_config_errors.py",), "defect 9: ppo.lr_actor=nan accepted"),
    M("duplicate_key_accepted", CONFIG, '        if "=" in o and key in seen:', "        if False:",
      ("tests/test_config_errors.py",), "defect 9: seed=1 seed=2 keeps the last"),
    # --- policy groups (issue 14)
    M("group_learns_from_all_rewards", EXP, "transition_targets(L.death, g.take(nxt.reward),",
      "transition_targets(L.death, nxt.reward.mean(-1, keepdim=True).expand_as(g.take(nxt.reward)),",
      ("tests/test_groups.py::test_a_group_learns_only_from_its_own_agents_rewards",), "a group trains on others' rewards"),
    M("group_return_sum", EXP, "g.ep_return = g.ep_return + g.take(nxt.reward).mean(-1)",
      "g.ep_return = g.ep_return + g.take(nxt.reward).sum(-1)",
      ("tests/test_groups.py::test_a_groups_return_is_the_mean_over_its_agents",), "group return summed over agents"),
    M("group_slots_sorted", "src/hypermappo/policies/groups.py", "return None if x is None else x[:, self.index]",
      "return None if x is None else x[:, self.index.sort().values]",
      ("tests/test_groups.py::test_a_learner_group_sees_its_own_slots_observations_in_its_own_order",),
      "a group reads its slots in the wrong order"),
    M("group_actions_misplaced", EXP, "for g, a in zip(self.groups, parts):", "for g, a in zip(self.groups, parts[::-1]):",
      ("tests/test_groups.py::test_each_groups_actions_reach_its_own_slots",), "actions scattered to another group"),
    M("switch_one_rollout_late", "src/hypermappo/policies/groups.py", "self.phases[self.phase + 1].at_step <= env_steps",
      "self.phases[self.phase + 1].at_step < env_steps", ("tests/test_groups.py",), "switch a rollout late"),
    M("group_generator_not_restored", "src/hypermappo/policies/groups.py",
      '        self.generator.set_state(sd["generator"].cpu())\n', "",
      ("tests/test_groups.py::test_resume_across_a_switch_equals_the_uninterrupted_run",), "scripted RNG lost on resume"),
    M("group_eval_not_loaded", "src/hypermappo/evaluate_cli.py",
      '        g.load_state_dict(sd["groups"][g.name], with_episode_state=False)\n', "",
      ("tests/test_groups.py::test_eval_of_a_run_with_groups_plays_every_group_as_training_evaluated_it",),
      "eval of a group run plays untrained learners"),
    M("dead_agents_get_no_team_reward", DEATH, "    return torch.where(acted, reward, dead_reward), ",
      "    return reward, ", (REF,), "defect 10: episode mode drops team reward after death"),
]


def _load_mutation_sets() -> None:
    """Add the mutations of every tests/mutation_sets/*.py (one file per feature area, so parallel work on
    different features never edits the same list). Each file defines `def mutations(M) -> list`, M being
    the Mutation class (name, file, old, new, tests, why)."""
    import importlib.util

    for path in sorted((ROOT / "tests" / "mutation_sets").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"mutation_sets.{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        MUTATIONS.extend(module.mutations(Mutation))


_load_mutation_sets()

if __name__ == "__main__":
    sys.exit(main())
