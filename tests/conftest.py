import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _deterministic_cpu():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
