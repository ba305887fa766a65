import os
import shutil
from pathlib import Path


def _pin_worker_to_one_core() -> None:
    """Under pytest-xdist, each worker (and every thread and process it starts: torch's OpenMP pool, Inductor's C++
    compiles, the CLI runs of the subprocess tests) on its own core. Unpinned, each worker's runs take every core
    (`torch_threads=0`) and its compiles start a compile pool of their own: 2 workers on 2 cores then ran 4+ busy
    threads, and OpenMP's spinning barriers made eager tests 10-30x slower beside a compiling worker (a 1.2 s test
    took 42 s in CI). Done before torch starts its threads, which inherit the affinity."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if int(count) > 1 and int(count) <= len(cores):
        os.sched_setaffinity(0, {cores[int(worker.removeprefix("gw")) % len(cores)]})


def _quick_inductor_cxx() -> None:
    """Inductor's generated C++ built at -O1 instead of -O3 (tests/cxx_quick says why the values are the same): set
    through CXX, so the CLI runs and compile workers the tests start use it too. HYPERMAPPO_TEST_FULL_OPT=1 keeps -O3."""
    if os.environ.get("HYPERMAPPO_TEST_FULL_OPT") == "1" or os.environ.get("HYPERMAPPO_TEST_REAL_CXX"):
        return
    real = os.environ.get("CXX") or shutil.which("g++")
    if real and shutil.which("bash"):
        os.environ["HYPERMAPPO_TEST_REAL_CXX"] = real
        os.environ["CXX"] = str(Path(__file__).with_name("cxx_quick"))


_pin_worker_to_one_core()
_quick_inductor_cxx()
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Tests marked `compiles(weight)` (each compiles Inductor graphs from C++: a minute or more on two cores) first,
    heaviest first: with `--dist load --maxschedchunk 1` (Makefile) the workers take them one at a time from the
    start. Left in file order they came last, and one worker was still compiling minutes after the other had run out
    of tests."""
    def key(item):
        mark = item.get_closest_marker("compiles")
        return -(mark.args[0] if mark and mark.args else 1) if mark else 0

    items.sort(key=key)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _deterministic_cpu():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield


@pytest.fixture
def fresh_dynamo():
    """Dynamo keeps what it traced on the functions' code objects, whatever the backend: after a test that traced the
    library's graphs with another backend (or under another default device), a later test's Inductor compile of the
    same functions (an env's step core among them) could reuse them. Cleared after such a test."""
    yield
    import torch

    torch._dynamo.reset()
