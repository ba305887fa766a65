import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")


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
