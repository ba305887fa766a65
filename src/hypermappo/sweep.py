"""`hypermappo sweep`: expand a grid of config overrides and train every point, locally or on Ray.

Grid syntax, one `key=VALUES` argument per key (values are given exactly as `train` takes them):
- `key=v1,v2,v3`  one run per value. Commas inside `[...]`, `{...}` or quotes do not split.
- `key=a..b`      the integers a, a+1, ..., b; mixes with commas: `seed=1..3,10`.
- `key=[64,64]`   one list value; `key=[64,64],[128,128]` is a grid over two list values.
- `key=v`         a single value: the same override for every run, not part of run names.
The grid is the Cartesian product of the keys with more than one value. Each run goes to
`OUT/<name>`, named by its varied keys in the order given, e.g. `algo=ippo,seed=3`; its output goes to
`OUT/logs/<name>.log`.

Re-invoking the same sweep skips runs that finished (`summary.json` present), resumes runs that
were interrupted after a checkpoint, and restarts those interrupted before one. A run that stopped on a
failure it would repeat (non-finite values, a dead component: summary.json says `"status": "failed: ..."`)
is listed as failed and not run again (delete its directory to retry it); the sweep then exits 1. An existing
run whose config differs from the grid's is an error, never overwritten. Every config is built and
validated before anything runs, so an unknown key or a bad value stops the sweep at once.

Runs are separate processes: `--workers N` at a time locally, or Ray tasks (`--ray` starts Ray on
this machine; `--ray-address ADDR` joins a cluster, whose nodes need hypermappo installed and OUT
on a shared filesystem, since each run writes its own directory there).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from hypermappo import config as config_mod
from hypermappo import run_config
from hypermappo.errors import UserError
from hypermappo.runtime.parent_death import die_with_parent
from hypermappo.runtime.run_lock import holder

_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
_OPEN, _CLOSE = "[{(", "]})"
# keys that change how a run executes, not what it computes, so a re-invocation may differ in them
_EXECUTION_KEYS = ("run_dir", "torch_threads", "log.progress")
_RUN_FILES = {"config.yaml", "metrics.csv", "checkpoints", "tb", "wandb_run_id", ".lock"}


@dataclass
class SweepRun:
    name: str
    overrides: list[str]  # key=value overrides of this run, run_dir last
    run_dir: Path
    log: Path
    unused_keys: bool = False  # sets keys this run does not read (but other runs of the sweep do)


def split_values(key: str, text: str) -> list[str]:
    """`v1,v2` / `a..b` / `[1,2],[3,4]` -> the list of values, splitting only on top-level commas."""
    pieces, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    pieces.append(text[start:])
    if depth or quote:
        raise UserError(f"{key}={text!r}: unbalanced brackets or quotes")
    values = []
    for piece in (p.strip() for p in pieces):
        if not piece:
            raise UserError(f"{key}={text!r}: empty value in the list")
        if len(piece) >= 2 and piece[0] == piece[-1] and piece[0] in "\"'":
            values.append(piece[1:-1])
        elif m := _RANGE.match(piece):
            lo, hi = int(m[1]), int(m[2])
            if lo > hi:
                raise UserError(f"{key}={piece}: empty range; expected a..b with a <= b")
            values.extend(str(v) for v in range(lo, hi + 1))
        else:
            values.append(piece)
    return values


def parse_grid(args: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """key=VALUES arguments -> (fixed overrides, varied axes [(key, values)]), keys in the order given."""
    fixed, axes, seen = [], [], set()
    for arg in args:
        if "=" not in arg:
            raise UserError(f"argument {arg!r}: expected key=value or key=v1,v2,...")
        key, text = (s.strip() for s in arg.split("=", 1))
        if key in seen:
            raise UserError(f"key {key!r} is given twice; list all its values in one argument: {key}=v1,v2")
        if key == "run_dir":
            raise UserError("run_dir is set per run by the sweep; choose the sweep directory with --out")
        seen.add(key)
        values = split_values(key, text)
        if len(set(values)) < len(values):
            twice = next(v for v in values if values.count(v) > 1)
            raise UserError(f"{key}: value {twice!r} is listed twice (a single list value is written "
                            f"in brackets: {key}=[{text}])")
        if len(values) == 1:
            fixed.append(f"{key}={values[0]}")
        else:
            axes.append((key, values))
    return fixed, axes


def _name_part(key: str, value: str) -> str:
    value = re.sub(r"[\[\]{}()\"' ]", "", value)
    return f"{key}={re.sub(r'[^A-Za-z0-9._+-]', '-', value)}"


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_out(preset: str) -> Path:
    return Path("runs") / f"sweep_{re.sub(r'[^A-Za-z0-9._-]', '_', Path(preset).with_suffix('').as_posix())}"


def expand(preset: str, args: list[str], out: Path, workers: int = 1) -> list[SweepRun]:
    """Every run of the grid, each config built and validated (UserError on the first bad one)."""
    fixed, axes = parse_grid(args)
    keys = [k for k, _ in axes]
    threads = []
    user_set_threads = "torch_threads" in {a.split("=", 1)[0].strip() for a in args}
    if not user_set_threads and run_config.build_config(preset, fixed, allow_unused=True).torch_threads == 0:
        threads = [f"torch_threads={max(1, _cpu_count() // max(1, workers))}"]  # no oversubscription
    runs, names, unused = [], {}, None
    for point in itertools.product(*(values for _, values in axes)):
        name = ",".join(_name_part(k, v) for k, v in zip(keys, point)) or "run"
        varied = [f"{k}={v}" for k, v in zip(keys, point)]
        if name in names:
            raise UserError(f"runs {names[name]} and {varied} would share the directory name {name!r}")
        names[name] = varied
        run_dir = out / name
        overrides = fixed + varied + threads + [f"run_dir={run_dir}"]
        found = run_config.unused_keys(run_config.build_config(preset, overrides, allow_unused=True))
        unused = found if unused is None else {k: m for k, m in unused.items() if k in found}
        runs.append(SweepRun(name, overrides, run_dir, out / "logs" / f"{name}.log", bool(found)))
    for message in (unused or {}).values():  # a key some runs read (actor=mlp,hyper hyper.lr=...) is fine
        raise UserError(f"{message} (in every run of the sweep)")
    return runs


def _comparable(cfg: dict) -> dict:
    flat = dict(_flatten(cfg))
    if flat.get("ppo.data_chunk_length") == 10:  # written before `auto`, the default since: wherever a run read 10,
        flat["ppo.data_chunk_length"] = "auto"  # auto is 10 too (10 divided its rollout_length, or nothing read it)
    return {k: v for k, v in flat.items() if k not in _EXECUTION_KEYS}


def _flatten(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and k != "env_kwargs":
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield prefix + k, v


def run_status(preset: str, run: SweepRun) -> str:
    """'done', 'failed' (stopped on a failure resuming would repeat), 'resume', 'restart' (interrupted before its
    first checkpoint) or 'new'."""
    d = run.run_dir
    if not d.exists() or not any(d.iterdir()):
        return "new"
    if not (d / "config.yaml").exists():
        if {p.name for p in d.iterdir()} <= _RUN_FILES:
            return "restart"
        raise UserError(f"{d} exists and is not a hypermappo run; move it away or choose another --out")
    want = _comparable(config_mod.to_dict(run_config.build_config(preset, run.overrides, allow_unused=True)))
    have = _comparable(yaml.safe_load((d / "config.yaml").read_text()) or {})
    if want != have:
        diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        raise UserError(f"{d} holds a run with another config (differs in {', '.join(diff[:5])}); "
                        f"choose another --out for this sweep")
    if (d / "summary.json").exists():
        return "failed" if failure(d) else "done"
    return "resume" if any((d / "checkpoints").glob("ckpt_*.pt")) else "restart"


def failure(run_dir: Path) -> str | None:
    """Why a run with a summary.json stopped ("non-finite reward ..."), or None when it finished."""
    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status", "finished")
    except (ValueError, AttributeError, OSError):
        return None
    status = str(status)
    return (status.removeprefix("failed:").strip() or "failed") if status.startswith("failed") else None


def command(preset: str, run: SweepRun, status: str) -> list[str]:
    """hypermappo CLI arguments that start or continue this run."""
    if status == "resume":
        return ["resume", str(run.run_dir), "--quiet"]
    return ["train", preset, *run.overrides, "--quiet"] + (["--allow-unused-keys"] if run.unused_keys else [])


def _report(i: int, total: int, run: SweepRun, code: int, seconds: float) -> None:
    if code == 0:
        summary = json.loads((run.run_dir / "summary.json").read_text())
        ret = summary.get("eval_return_mean")
        ret_text = f", eval return {ret:.3f}" if isinstance(ret, (int, float)) else ""
        print(f"[{i}/{total}] {run.name}: done in {seconds:.0f}s{ret_text}", flush=True)
    else:
        lines = run.log.read_text().strip().splitlines() if run.log.exists() else []
        last = lines[-1] if lines else ""
        print(f"[{i}/{total}] {run.name}: FAILED (exit {code}), see {run.log}: {last}", flush=True)


def _process_context():
    """forkserver: runs fork from one clean process that imported torch once, so a run starts in
    milliseconds and none inherits this process's thread pools; spawn where there is no fork."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # torch._dynamo: the first torch.optim optimiser imports it, which takes seconds
    ctx.set_forkserver_preload(["hypermappo.cli", "hypermappo.experiment", "torch._dynamo"])
    return ctx


# what a sweep runs for each of its runs: the CLI's entry point (cli.main, passed in by its callers: the CLI sits
# above this module), given `train PRESET OVERRIDES...` or `resume RUN_DIR`, returning the exit code
Main = Callable[[list[str]], int]


def _train_in_process(main: Main, argv: list[str], log_path: str) -> None:
    """Entry point of a local sweep process: all its output, Python's or a library's, to the log.
    It dies with the sweep (SIGTERM), even when the sweep is killed with SIGKILL."""
    die_with_parent()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.exit(main(argv))  # an exception exits with 1, its traceback in the log


def run_local(preset: str, jobs: list[tuple[SweepRun, str]], workers: int, main: Main) -> int:
    """Each run in its own process, `workers` at a time; returns the number of failed runs.

    Stopped by SIGINT (Ctrl-C) or SIGTERM, the sweep passes that same signal on to its running runs, which finish
    the update under way, checkpoint it and exit (a re-run resumes them), and waits for them. Ctrl-C in a terminal
    (or `timeout`) has sent it to the runs already: the same signal again at once counts once for them
    (runtime/signals.py), where another one would abort them without their checkpoint."""
    ctx = _process_context()
    pending, running, finished, failed = list(jobs), {}, 0, 0
    stop: list[int] = []  # the signal that stopped the sweep

    def interrupt(signum, frame):
        stop.append(signum)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}  # the runs stop with it
    try:
        while pending or running:
            while pending and len(running) < workers:
                run, status = pending.pop(0)
                run.log.parent.mkdir(parents=True, exist_ok=True)
                proc = ctx.Process(target=_train_in_process, args=(main, command(preset, run, status), str(run.log)),
                                   name=f"hypermappo-sweep-{run.name}")
                proc.start()
                running[proc] = (run, time.monotonic())
            time.sleep(0.05)
            for proc in [p for p in running if p.exitcode is not None]:
                run, t0 = running.pop(proc)
                finished += 1
                failed += proc.exitcode != 0
                _report(finished, len(jobs), run, proc.exitcode, time.monotonic() - t0)
    finally:
        signum = stop[0] if stop else signal.SIGTERM  # interrupted: stop the runs this sweep started; they resume
        for proc in running:  # next time
            if proc.exitcode is None:
                with contextlib.suppress(ProcessLookupError):  # it has just ended
                    os.kill(proc.pid, signum)
        for sig, handler in previous.items():  # a second Ctrl-C while the runs finish their update: the default
            signal.signal(sig, handler)
        for proc in running:
            proc.join()
    return failed


def train_in_worker(main: Main, argv: list[str], log_path: str) -> int:
    """One run inside a Ray worker process (which outlives it), its output going to the run's log."""
    die_with_parent()  # a worker of a Ray instance this sweep started goes when its raylet does
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return main(argv)


def run_ray(preset: str, jobs: list[tuple[SweepRun, str]], address: str | None, workers: int | None,
            threads: int, main: Main) -> int:
    """Each run as a Ray task (threads CPUs each); starts Ray here unless one is running or ADDR is given."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray / --ray-address need Ray: pip install 'hypermappo[ray]'") from None
    started = not ray.is_initialized()
    if started and address:
        _check_reachable(address)
    if started:
        kwargs = {"address": address} if address else {"num_cpus": workers or _cpu_count()}
        ray.init(include_dashboard=False, log_to_driver=False, **kwargs)
    try:
        task = ray.remote(train_in_worker).options(num_cpus=threads, max_retries=0)
        refs = {task.remote(main, command(preset, run, status), str(run.log)): (run, time.monotonic())
                for run, status in jobs}
        finished = failed = 0
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            run, t0 = refs.pop(done[0])
            try:
                code = ray.get(done[0])
            except ray.exceptions.RayError as e:  # the run raised, or its worker died
                run.log.parent.mkdir(parents=True, exist_ok=True)
                with run.log.open("a") as log:
                    log.write(f"{e}\n")
                code = 1
            finished += 1
            failed += code != 0
            _report(finished, len(jobs), run, code, time.monotonic() - t0)
        return failed
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """Fail in seconds on a wrong ADDR (ray.init would keep retrying for minutes)."""
    host_port = address.removeprefix("ray://")
    host, _, port = host_port.rpartition(":")
    if address == "auto" or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as e:
        raise UserError(f"--ray-address {address}: cannot reach a Ray head there ({e.strerror or e})") from None


def sweep(preset: str, args: list[str], out: Path | None = None, workers: int | None = None, use_ray: bool = False,
          ray_address: str | None = None, dry_run: bool = False, *, main: Main) -> int:
    """Expand, check, skip finished runs, run the rest; exit code 0 when every run completed. `main` runs one run's
    command line (`hypermappo.cli.main`)."""
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    out = Path(out) if out else default_out(preset)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file; expected a sweep directory")
    n_workers = workers or _cpu_count()
    runs = expand(preset, args, out, n_workers)
    statuses = [(run, run_status(preset, run)) for run in runs]
    todo = [(run, s) for run, s in statuses if s not in ("done", "failed")]
    failed_before = [run for run, s in statuses if s == "failed"]
    done_before = len(runs) - len(todo) - len(failed_before)
    print(f"sweep {preset}: {len(runs)} runs in {out}; {done_before} complete (skipped), "
          + (f"{len(failed_before)} failed (skipped), " if failed_before else "")
          + f"{sum(s == 'resume' for _, s in todo)} to resume, {sum(s != 'resume' for _, s in todo)} to start",
          flush=True)
    for run, status in statuses:
        if dry_run:
            what = f"failed: {failure(run.run_dir)}" if status == "failed" else " ".join(command(preset, run, status))
            print(f"  {status:8s} {run.name}: {what}")
    if dry_run:
        return 0
    for run in failed_before:
        print(f"{run.name}: FAILED before: {failure(run.run_dir)} (see {run.run_dir / 'summary.json'}; delete "
              f"{run.run_dir} to run it again)", flush=True)
    if not todo:
        if failed_before:
            print(f"sweep done: 0 runs completed now, {done_before} before, {len(failed_before)} failed", flush=True)
        return 1 if failed_before else 0
    for run, _ in todo:
        if run.run_dir.is_dir() and (pid := holder(run.run_dir)):
            raise UserError(f"run_dir {run.run_dir} is being trained by another process (pid {pid}); "
                            f"stop it or wait for it before re-running this sweep")
    for run, status in todo:
        if status == "restart":  # interrupted before its first checkpoint: nothing to keep
            print(f"restarting {run.name}: interrupted before its first checkpoint", flush=True)
            shutil.rmtree(run.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"preset": preset, "args": args,
                                                "runs": {r.name: r.overrides for r in runs}}, indent=2))
    threads = run_config.build_config(preset, runs[0].overrides, allow_unused=True).torch_threads or 1
    if use_ray or ray_address:
        failed = run_ray(preset, todo, ray_address, workers, threads, main)
    else:
        failed = run_local(preset, todo, n_workers, main)
    print(f"sweep done: {len(todo) - failed} runs completed now, {done_before} before, "
          f"{failed + len(failed_before)} failed; compare them with: hypermappo compare {out}", flush=True)
    return 1 if failed or failed_before else 0
