"""Exceptions raised by cuadv. Each names the rule, the value seen and the limit."""

from __future__ import annotations


class CuadvError(Exception):
    """Base class of every error cuadv raises on purpose."""


class NoGpuError(CuadvError):
    """No usable CUDA GPU (no driver, no device, or the driver refused to start)."""


class UnsupportedFeatureError(CuadvError):
    """The GPU lacks a feature; the message names the capability needed and the fallback."""

    def __init__(self, feature: str, needed: str, have: str, fallback: str | None = None):
        self.feature, self.needed, self.have, self.fallback = feature, needed, have, fallback
        msg = f"{feature} needs {needed} (got {have})"
        if fallback:
            msg += f"; fallback: {fallback}"
        super().__init__(msg)


class LaunchConfigError(CuadvError, ValueError):
    """A launch configuration breaks a limit; the message names the limit and the value."""


class KernelArgumentError(CuadvError, TypeError):
    """A kernel argument cannot be converted to the parameter the kernel declares."""


class CompileError(CuadvError):
    """NVRTC rejected a program. Carries the log, the options and the source."""

    def __init__(self, name: str, log: str, options: list[str], source: str):
        self.name, self.log, self.options, self.source = name, log, list(options), source
        super().__init__(self._message())

    def _message(self) -> str:
        numbered = "\n".join(f"{i + 1:5d}  {line}" for i, line in enumerate(self.source.splitlines()))
        return (
            f"NVRTC could not compile {self.name!r}\n"
            f"options: {' '.join(self.options)}\n"
            f"--- log ---\n{self.log.strip()}\n"
            f"--- source (set CUADV_DUMP_SOURCE=1 to write it to a file) ---\n{numbered}"
        )


class CudaDriverError(CuadvError):
    """A CUDA driver call failed; the message names the call and the error."""


class ValidationError(CuadvError):
    """A lab's result did not match its reference."""


class GpuTimeoutError(CuadvError):
    """A host wait for GPU work outlasted its timeout; the message names what was waited for, the
    timeout and what to do (``cuadv.waiting``)."""

    def __init__(self, what: str, timeout_s: float, activity: str | None = None):
        self.what, self.timeout_s, self.activity = what, timeout_s, activity
        during = f" (during {activity})" if activity else ""
        super().__init__(
            f"{what}{during} did not finish within the timeout of {timeout_s:g} s. The GPU is still busy with it: a "
            "kernel that never ends (a deadlock, a spin on a flag nobody sets) or far more work than expected. "
            "This CUDA context cannot be used until that work ends; end the process (cuadv then exits without the "
            "CUDA teardown, which would wait for it). For longer work set CUADV_TIMEOUT_S (seconds; inf: no "
            "limit) or pass timeout_s=.")
