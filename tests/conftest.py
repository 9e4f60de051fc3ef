import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpu_presence import GPU_REASON  # noqa: E402  (after the path to src/ is set)


def pytest_collection_modifyitems(config, items):
    if GPU_REASON is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {GPU_REASON}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    # Tests compile into their own cache unless CUADV_CACHE_DIR is set by the caller.
    if "CUADV_CACHE_DIR" not in os.environ:
        os.environ["CUADV_CACHE_DIR"] = str(tmp_path_factory.mktemp("cuadv-cache"))
    yield


@pytest.fixture
def cp():
    return pytest.importorskip("cupy")
