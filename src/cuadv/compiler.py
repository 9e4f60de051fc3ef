"""NVRTC compilation with cuadv's headers, CCCL and cudart on the include path, and an on-disk cache.

Compiling needs no GPU when the target is given (``arch="sm_90a"``); with ``arch=None`` the target is
taken from the current device. The ptxas resource report (registers, shared memory, stack, spills) is
parsed from the NVRTC log and kept with the module.

Why NVRTC through cuda.bindings and not cuda.core's Program: one compilation here yields the cubin, the
PTX (tests and ``cuadv build`` read both), the ptxas log and the lowered names of every name expression,
and the result is cached on disk keyed on the contents of every header; cuda.core's program cache
refuses include paths, and its Program would need a second compilation for the PTX.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Iterable, Mapping

from . import cache as disk_cache
from ._cuda import check, init_driver, library_identity, nvrtc, nvrtc_version
from .arch import parse_arch
from .device import current_device
from .errors import CompileError, CuadvError, NoGpuError
from .kernel import Kernel

PACKAGE_DIR = Path(__file__).parent
INCLUDE_DIR = PACKAGE_DIR / "include"  # the public headers: #include <cuadv/...>


@dataclass(frozen=True)
class KernelResources:
    """One kernel's ptxas resource report."""

    name: str
    registers: int = 0
    static_shared_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for")
_PROPS_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_BAR_RE = re.compile(r"used (\d+) barriers")


def parse_resource_report(log: str) -> dict[str, KernelResources]:
    """Parse ptxas -v output into one KernelResources per entry function (keyed by mangled name)."""
    out: dict[str, dict] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            current = m.group(1)
            out[current] = {"name": current}
            continue
        if current is None:
            continue
        if m := _PROPS_RE.search(line):
            out[current].update(stack_bytes=int(m[1]), spill_store_bytes=int(m[2]), spill_load_bytes=int(m[3]))
        if m := _USED_RE.search(line):
            out[current]["registers"] = int(m[1])
            if s := _SMEM_RE.search(line):
                out[current]["static_shared_bytes"] = int(s[1])
            if b := _BAR_RE.search(line):
                out[current]["barriers"] = int(b[1])
    return {k: KernelResources(**v) for k, v in out.items()}


@cache
def include_dirs() -> tuple[str, ...]:
    """cuadv's headers, then CCCL, then cudart (CCCL must come first: it shadows cudart's copies)."""
    from cuda.pathfinder import find_nvidia_header_directory

    dirs = [str(INCLUDE_DIR)]
    for lib in ("cccl", "cudart"):
        path = find_nvidia_header_directory(lib)
        if path is None:
            raise CuadvError(
                f"the {lib} headers were not found; install the nvidia-cuda-{'cccl' if lib == 'cccl' else 'runtime'} "
                "wheel or a CUDA toolkit"
            )
        dirs.append(str(path))
    return tuple(dirs)


@cache
def _header_fingerprint() -> str:
    """Contents of cuadv's headers (what a source can include) plus the version files of CCCL and cudart."""
    parts = []
    for path in sorted(INCLUDE_DIR.rglob("*.cuh")):
        parts.append(f"{path.relative_to(INCLUDE_DIR)}:{disk_cache.make_key(path.read_bytes())}")
    cccl, cudart = include_dirs()[1:]
    for root, rel in ((cccl, "cuda/std/__cccl/version.h"), (cudart, "cuda_runtime_api.h")):
        p = Path(root) / rel
        parts.append(f"{p}:{disk_cache.make_key(p.read_bytes()) if p.exists() else 'missing'}")
    return "\n".join(parts)


_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def _user_include_dirs(options: tuple[str, ...]) -> list[Path]:
    """The include directories a caller's options add (``-I<dir>``, ``-I <dir>``, ``--include-path=<dir>``)."""
    dirs = []
    for i, option in enumerate(options):
        if option.startswith("--include-path="):
            dirs.append(option.split("=", 1)[1])
        elif option.startswith("-I"):
            rest = option[2:].removeprefix("=")
            if rest:
                dirs.append(rest)
            elif i + 1 < len(options):
                dirs.append(options[i + 1])
    return [Path(d) for d in dirs]


def _pre_includes(options: tuple[str, ...]) -> list[str]:
    """The headers NVRTC includes before the source (--pre-include=H, -include=H, or either followed by H)."""
    names = []
    for i, option in enumerate(options):
        for flag in ("--pre-include", "-include"):
            if option.startswith(flag + "="):
                names.append(option.split("=", 1)[1])
            elif option == flag and i + 1 < len(options):
                names.append(options[i + 1])
    return names


def _user_header_fingerprint(source: str, headers: Mapping[str, str], options: tuple[str, ...]) -> str:
    """Contents of the files on disk the program may include from outside cuadv's, CCCL's and cudart's headers (which
    ``_header_fingerprint`` covers): quoted includes from the including file's directory (the working directory for
    the source itself, where NVRTC looks first) and any include from the caller's -I directories, followed through
    the files they include. #if is not evaluated, so it may name a file the program does not include: a cache key may
    say too much, never too little ('' where no such file exists, so such programs keep their keys)."""
    user_dirs = _user_include_dirs(options)
    shipped_dirs = [Path(d).resolve() for d in include_dirs()]
    parts: dict[Path, str] = {}
    try:
        cwd = Path.cwd()
    except OSError:  # the working directory was removed: NVRTC finds nothing there either
        cwd = None
    # A header given as an option (--pre-include) is part of the program as an #include of it is.
    pre = [f'#include "{name}"' for name in _pre_includes(options)]
    todo = [(text, cwd) for text in (source, *headers.values(), *pre)]
    while todo:
        text, here = todo.pop()
        for bracket, include in _INCLUDE_RE.findall(text):
            if include in headers:
                continue
            for directory in ([here] if bracket == '"' and here is not None else []) + user_dirs:
                try:
                    path = (directory / include).resolve()
                    if path in parts or not path.is_file() or any(path.is_relative_to(d) for d in shipped_dirs):
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue
                parts[path] = disk_cache.make_key(data)
                todo.append((data.decode(errors="replace"), path.parent))
    return "\n".join(f"{path}:{digest}" for path, digest in sorted(parts.items()))


@dataclass
class CompiledModule:
    """Machine code for one target plus what NVRTC said about it. Loading needs a GPU."""

    name: str
    arch: str
    cubin: bytes
    ptx: str
    log: str
    options: tuple[str, ...]
    lowered_names: dict[str, str] = field(default_factory=dict)
    resources: dict[str, KernelResources] = field(default_factory=dict)
    from_cache: bool = False
    source: str = field(default="", repr=False, compare=False)  # what was compiled: kernels' declared parameters
    _object_code: object = field(default=None, repr=False, compare=False)
    _kernels: dict = field(default_factory=dict, repr=False, compare=False)
    # Held while a kernel is loaded: threads asking at once get one module load and one Kernel object.
    _loading: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def resources_for(self, name: str) -> KernelResources:
        return self.resources[self.lowered_names.get(name, name)]

    def kernel_names(self) -> list[str]:
        """The kernels in this module: name expressions as given, extern "C" kernels by their name."""
        given = {lowered: expr for expr, lowered in self.lowered_names.items()}
        return sorted(given.get(entry, entry) for entry in self.resources)

    def kernel(self, name: str) -> Kernel:
        """Load (once) and return the named kernel as a cuadv Kernel: the same object on every call,
        because it caches what belongs to the CUDA kernel (its launchers, its shared-memory and
        cluster attributes), which two objects for one kernel would each get wrong."""
        kernel = self._kernels.get(name)
        if kernel is None:
            with self._loading:
                kernel = self._kernels.get(name) or self._load(name)
        return kernel

    def _load(self, name: str) -> Kernel:
        from cuda.core import ObjectCode

        symbol = self.lowered_names.get(name, name)
        if b"\x00" + symbol.encode() + b"\x00" not in self.cubin:  # the ELF string table names every kernel
            raise CuadvError(f"module {self.name!r} has no kernel {name!r}; its kernels: "
                             f"{', '.join(self.kernel_names()) or 'none'}")
        # NoGpuError without a usable GPU, before cuda.core's loader: its failure there surfaced as a SystemError
        # and left a lock of cuda.bindings held, so that every later driver call of the process hung
        init_driver()
        if self._object_code is None:
            self._object_code = ObjectCode.from_cubin(self.cubin)
        # Look up the lowered (mangled) name ourselves: cuda.core 1.2.0 and later differ in the type
        # they accept for symbol_mapping values.
        kernel = self._kernels[name] = Kernel(self._object_code.get_kernel(symbol), name=name, module=self)
        return kernel


@cache
def nvrtc_targets() -> tuple[int, ...]:
    """The compute capabilities this NVRTC compiles for, as 90, 100, ... (nvrtcGetSupportedArchs)."""
    return tuple(int(a) for a in check(nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def check_target(arch: str) -> None:
    """Raise ValueError unless ``arch`` is sm_XY[a|f] and this NVRTC compiles for compute capability X.Y."""
    major, minor = parse_arch(arch)
    targets = nvrtc_targets()
    if major * 10 + minor not in targets:
        major_v, minor_v = nvrtc_version()
        raise ValueError(f"target {arch!r}: NVRTC {major_v}.{minor_v} compiles for "
                         f"{', '.join(f'sm_{t}' for t in targets)} (with an 'a' suffix from sm_90 on); got compute "
                         f"capability {major}.{minor}")


_MACRO = re.compile(r"^[A-Za-z_]\w*(\([\w\s,.]*\))?$")  # NAME or NAME(args)


def check_inputs(defines: Mapping[str, object], options: Iterable[str], name_expressions: Iterable[str],
                 headers: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The compile inputs NVRTC would refuse with a less direct message (or misread: a str of options is
    iterated character by character). Returns the options and name expressions as tuples."""
    for key, value in defines.items():
        if not isinstance(key, str) or not _MACRO.match(key):
            raise ValueError(f"define {key!r} is not a macro name (an identifier, or NAME(args)), as -D takes it")
        if isinstance(value, bool) or not (value is None or isinstance(value, (int, float, str))) \
                or "\n" in str(value):
            raise ValueError(f"define {key}={value!r}: a value is None, a number or one line of text (True/False: "
                             "pass 1/0)")
    lists = []
    for what, items in (("options", options), ("name_expressions", name_expressions)):
        if isinstance(items, (str, bytes)):
            raise TypeError(f"{what} is a list of str, got the single {type(items).__name__} {items!r}: pass "
                            f"[{items!r}]")
        items = tuple(items)
        if not all(isinstance(item, str) for item in items):
            raise TypeError(f"{what} is a list of str, got {items!r}")
        lists.append(items)
    for include, text in headers.items():
        if not isinstance(include, str) or not isinstance(text, str):
            raise TypeError(f"headers maps include names to header text (str to str), got {include!r}: "
                            f"{type(text).__name__}")
    return lists[0], lists[1]


def _options(arch: str, defines: Mapping[str, object], extra: Iterable[str], rdc: bool) -> list[str]:
    opts = [
        f"-arch={arch}",
        "-std=c++17",
        "-default-device",  # plain helper functions are device functions
        "-lineinfo",  # compute-sanitizer and ncu report source lines
        "--ptxas-options=-v",  # resource report, parsed into KernelResources
        "-DCUADV=1",
    ]
    if rdc:
        opts.append("-rdc=true")
    opts += [f"-I{d}" for d in include_dirs()]
    for key, value in sorted(defines.items()):
        opts.append(f"-D{key}" if value is None else f"-D{key}={value}")
    opts += list(extra)
    return opts


def compile_source(
    source: str,
    *,
    name: str = "cuadv_program",
    arch: str | None = None,
    defines: Mapping[str, object] | None = None,
    options: Iterable[str] = (),
    name_expressions: Iterable[str] = (),
    headers: Mapping[str, str] | None = None,
    rdc: bool = False,
) -> CompiledModule:
    """Compile CUDA C++ with NVRTC for one target, through the on-disk cache.

    ``name_expressions`` are C++ names (template instantiations such as ``"kern<float, 4>"``) whose
    lowered names are recorded so ``module.kernel(expr)`` finds them. ``headers`` maps include names
    to contents for headers that live only in memory.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be CUDA C++ text (a str), got {type(source).__name__}")
    if arch is None:
        try:
            arch = current_device().caps.arch
        except NoGpuError as exc:
            raise NoGpuError(f"{exc}; without a GPU, compile for a named target: arch='sm_90a'") from None
    check_target(arch)
    options, exprs = check_inputs(defines or {}, options, name_expressions, headers or {})
    opts = _options(arch, defines or {}, options, rdc)
    headers = dict(headers or {})
    # Headers of the caller's own on disk (the working directory, -I directories): their contents decide the code
    # too, and a key without them returned the module built from an older version of one.
    user_headers = _user_header_fingerprint(source, headers, options)
    key = disk_cache.make_key(
        arch, "\x00".join(opts), repr(nvrtc_version()) + library_identity("nvrtc"), source, _header_fingerprint(),
        json.dumps(sorted(headers.items())), "\x00".join(exprs), name, *([user_headers] if user_headers else []),
    )
    hit = disk_cache.load(key)
    if hit is not None:
        meta, payload = hit
        ptx_len = meta["ptx_len"]
        return CompiledModule(
            name=name, arch=arch, ptx=payload[:ptx_len].decode(), cubin=payload[ptx_len:], log=meta["log"],
            options=tuple(opts), lowered_names=meta["lowered"],
            resources={k: KernelResources(**v) for k, v in meta["resources"].items()}, from_cache=True,
            source=source,
        )
    module = _nvrtc_compile(source, name, arch, opts, exprs, headers)
    ptx_bytes = module.ptx.encode()
    disk_cache.store(
        key,
        {"ptx_len": len(ptx_bytes), "log": module.log, "lowered": module.lowered_names,
         "resources": {k: asdict(v) for k, v in module.resources.items()}},
        ptx_bytes + module.cubin,
    )
    return module


def _nvrtc_compile(source, name, arch, opts, exprs, headers) -> CompiledModule:
    rtc = nvrtc()
    prog = check(rtc.nvrtcCreateProgram(
        source.encode(), f"{name}.cu".encode(), len(headers),
        [v.encode() for v in headers.values()], [k.encode() for k in headers.keys()],
    ), "nvrtcCreateProgram")
    try:
        for expr in exprs:
            check(rtc.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression")
        status, = rtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = check(rtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        # NVRTC writes into the buffers it is given: bytearrays, never bytes (b" " * 1 is the interpreter's shared
        # b" ", which an empty log of one NUL would overwrite for the whole process)
        buf = bytearray(size)
        check(rtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\x00").decode(errors="replace")
        if int(status) != 0:
            if os.environ.get("CUADV_DUMP_SOURCE") == "1":
                fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".cu")
                with os.fdopen(fd, "w") as f:
                    f.write(source)
                log += f"\n(source written to {path})"
            raise CompileError(name, log, opts, source)
        lowered = {e: check(rtc.nvrtcGetLoweredName(prog, e.encode()), "nvrtcGetLoweredName").decode() for e in exprs}
        size = check(rtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = bytearray(size)
        check(rtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        size = check(rtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        ptx = bytearray(size)
        check(rtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    finally:
        rtc.nvrtcDestroyProgram(prog)
    return CompiledModule(
        name=name, arch=arch, cubin=bytes(cubin), ptx=ptx.rstrip(b"\x00").decode(), log=log, options=tuple(opts),
        lowered_names=lowered, resources=parse_resource_report(log), source=source,
    )


def kernel_source(filename: str) -> str:
    """The text of a .cu file shipped with cuadv (beside the Python that uses it), found by file name."""
    return shipped_path(filename).read_text()


@cache
def shipped_path(filename: str) -> Path:
    found = [p for p in PACKAGE_DIR.rglob(filename) if p.is_file()]
    if len(found) != 1:
        raise CuadvError(f"cuadv ships {len(found)} files named {filename!r}; expected exactly one")
    return found[0]


_shipped: dict[tuple, CompiledModule] = {}


def shipped(filename: str, *, arch: str | None = None, defines: Mapping[str, object] | None = None,
            name_expressions: Iterable[str] = (), name: str | None = None, rdc: bool = False) -> CompiledModule:
    """The one cached build of a .cu file shipped with cuadv, per target, defines and name expressions:
    every user of the file in this process shares one CompiledModule (and so one loaded Kernel each)."""
    if arch is None:
        arch = current_device().caps.arch
    exprs = tuple(name_expressions)
    key = (filename, arch, tuple(sorted((defines or {}).items())), exprs, name, rdc)
    module = _shipped.get(key)
    if module is None:
        module = compile_source(kernel_source(filename), name=name or filename.rsplit(".", 1)[0], arch=arch,
                                defines=defines, name_expressions=exprs, rdc=rdc)
        module = _shipped.setdefault(key, module)
    return module
