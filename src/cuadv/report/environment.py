"""The environment of a run, as the report shows it.

The runner records it (``cuadv.app.runner.collect_environment``: GPU, driver, clocks from
nvidia-smi, Python and package versions, NVRTC, whether CuPy has CUB) as a plain dict in
``Report.environment``; this module only renders that dict, whatever keys it holds.
"""

from __future__ import annotations

from .results import Table

# Shown first, in this order, with these labels; any other key follows under its own name.
_LABELS = {
    "gpu": "GPU", "driver_version": "NVIDIA driver", "cuda_driver_api": "CUDA driver API",
    "clocks": "clocks (nvidia-smi, at report time)", "nvidia_smi": "nvidia-smi",
    "python": "Python", "platform": "platform", "nvrtc": "NVRTC", "packages": "packages",
    "cupy_cub": "CuPy CUB",
}


def _text(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value) or "none"
    return str(value)


def environment_table(env: dict | None) -> Table:
    columns = ["what", "value"]
    if not env:
        return Table("Environment", columns, [["(not recorded)", "this report was made without the runner's record"]])
    keys = [k for k in _LABELS if k in env] + [k for k in env if k not in _LABELS]
    rows = []
    for k in keys:
        if k == "packages" and isinstance(env[k], dict):
            rows += [[name, _text(version) if version else "not installed"] for name, version in env[k].items()]
        else:
            rows.append([_LABELS.get(k, k.replace("_", " ")), _text(env[k])])
    return Table("Environment", columns, rows, note="recorded by the runner at the start of the run (best effort: "
                                                    "what could not be read says so)")


def environment_line(env: dict | None) -> str:
    """One line: GPU, driver, Python, cuda-core, CuPy (the rest is in the table)."""
    if not env:
        return ""
    pk = env.get("packages")
    pk = pk if isinstance(pk, dict) else {}  # as environment_table reads it: whatever keys the record holds
    bits = [env.get("gpu"), env.get("driver_version") and f"driver {env['driver_version']}",
            env.get("python") and f"Python {env['python']}",
            pk.get("cuda-core") and f"cuda-core {pk['cuda-core']}", env.get("nvrtc") and f"NVRTC {env['nvrtc']}",
            pk.get("cupy") and f"CuPy {pk['cupy']}", pk.get("torch") and f"torch {pk['torch']}"]
    return ", ".join(b for b in bits if b)
