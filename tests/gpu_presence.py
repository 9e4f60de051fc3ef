"""Whether this machine has a usable CUDA GPU, read once: None, or why not. A module of its own so that test
files can import it (``from conftest import ...`` finds whichever conftest.py pytest imported last)."""

from cuadv._cuda import init_driver
from cuadv.errors import NoGpuError


def _gpu_reason() -> str | None:
    try:
        init_driver()
    except NoGpuError as exc:
        return str(exc)
    return None


GPU_REASON = _gpu_reason()
