"""What a kernel's source declares about its parameters, so that arguments can be checked against it.

The cubin of an ``extern "C"`` kernel keeps only the size of each parameter; the types live in the source
text cuadv compiled. ``declared_signature(source, kernel)`` finds ``__global__ ... kernel(`` there and
parses its parameter list: each parameter's name, its type as written, whether it is a pointer, and, for a
type cuadv knows (``float``, ``unsigned int``, ``int64_t``, ``__half``, ``float4``, ...), the NumPy element
types and the alignment it takes (``CType``). What it cannot read is left unchecked rather than guessed:
``void*``, structs, template parameters and typedefs accept anything, and a kernel declared behind a macro,
or twice in two different ways, has no signature. A default argument (``int n = 0``) does not change the
parameter's type: it is read as ``int n``.

A pointer parameter ``p`` takes a strided (pitched) array where the kernel also declares ``p_pitch``,
``p_stride`` or ``p_strides``: it then addresses rows itself. Every other pointer takes C-contiguous arrays.

Leading parameters named ``cuadv_*`` are passed by cuadv's own wrappers (TileKernel's schedule,
PersistentKernel's queue), not by the caller: argument positions and counts in messages start after them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence


@dataclass(frozen=True)
class CType:
    """A C type cuadv checks: as a scalar parameter (``kind``, ``size``) and as what a pointer points to
    (the NumPy ``elements`` an array may hold, the ``alignment`` its address needs)."""

    spelling: str
    kind: str  # 'i' signed, 'u' unsigned, 'c' char (either sign), 'f' floating, 'b' bool, 'v' vector or bfloat16
    size: int
    alignment: int
    elements: frozenset[str]  # NumPy type names ('float32'); 'bfloat16' as ml_dtypes and torch name it


def _type_table() -> dict[str, CType]:
    table: dict[str, CType] = {}

    def add(names: Sequence[str], kind: str, size: int, elements: Sequence[str], alignment: int | None = None):
        for name in names:
            table[name] = CType(name, kind, size, alignment or size, frozenset(elements))

    add(["float"], "f", 4, ["float32"])
    add(["double"], "f", 8, ["float64"])
    add(["half", "__half"], "f", 2, ["float16"])
    add(["__nv_bfloat16", "nv_bfloat16"], "v", 2, ["bfloat16"])  # no NumPy scalar converts to it: bytes only
    add(["bool"], "b", 1, ["bool"])
    add(["char"], "c", 1, ["int8", "uint8"])
    add(["signed char", "int8_t"], "i", 1, ["int8"])
    add(["unsigned char", "uint8_t"], "u", 1, ["uint8"])
    add(["short", "int16_t"], "i", 2, ["int16"])
    add(["unsigned short", "uint16_t"], "u", 2, ["uint16"])
    add(["int", "int32_t"], "i", 4, ["int32"])
    add(["unsigned int", "uint32_t"], "u", 4, ["uint32"])
    add(["long", "long long", "int64_t", "ptrdiff_t", "intptr_t"], "i", 8, ["int64"])  # LP64: long is 8 bytes
    add(["unsigned long", "unsigned long long", "uint64_t", "size_t", "uintptr_t"], "u", 8, ["uint64"])
    add(["half2", "__half2"], "v", 4, ["float16"])
    add(["__nv_bfloat162", "nv_bfloat162"], "v", 4, ["bfloat16"])
    # CUDA's vector types (CUDA Programming Guide, "Built-in Vector Types"): a 3-vector is aligned as its
    # component, the others as their size up to 16 bytes. float2 / double2 also take complex arrays.
    components = {"char": ("int8", 1), "uchar": ("uint8", 1), "short": ("int16", 2), "ushort": ("uint16", 2),
                  "int": ("int32", 4), "uint": ("uint32", 4), "long": ("int64", 8), "ulong": ("uint64", 8),
                  "longlong": ("int64", 8), "ulonglong": ("uint64", 8), "float": ("float32", 4),
                  "double": ("float64", 8)}
    complex_pair = {"float": "complex64", "double": "complex128"}
    for base, (element, size) in components.items():
        for n in (1, 2, 3, 4):
            elements = [element] + ([complex_pair[base]] if n == 2 and base in complex_pair else [])
            add([f"{base}{n}"], "v", size * n, elements, size if n == 3 else min(size * n, 16))
    return table


TYPES = _type_table()
_QUALIFIERS = frozenset({"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__",
                         "register", "struct", "class", "typename", "enum"})
_TYPE_WORDS = frozenset({"void", "bool", "char", "short", "int", "long", "signed", "unsigned", "float", "double"})


def _canonical(words: list[str]) -> str:
    """One spelling per integer type: 'unsigned' -> 'unsigned int', 'long int' -> 'long',
    'std::int32_t' -> 'int32_t'."""
    words = [w.removeprefix("::").removeprefix("std::").removeprefix("cuda::std::") for w in words]
    if "char" in words:
        sign = "unsigned " if "unsigned" in words else "signed " if "signed" in words else ""
        return sign + "char" if len(words) == 1 + bool(sign) else " ".join(words)
    sign = "unsigned " if "unsigned" in words else ""
    rest = [w for w in words if w not in ("signed", "unsigned")]
    if not rest and words:
        rest = ["int"]
    if "int" in rest and len(rest) > 1 and set(rest) <= {"int", "short", "long"}:
        rest.remove("int")
    return sign + " ".join(rest)


@dataclass(frozen=True)
class DeclaredParam:
    """One parameter as the source declares it."""

    name: str | None
    type_name: str  # 'const float*', 'unsigned int', or the text where it could not be read
    pointer: bool  # a pointer (or array) parameter
    ctype: CType | None  # the scalar type, or what a one-level pointer points to; None: not checked
    strided: bool = False  # a pointer the kernel declares <name>_pitch / _stride / _strides for

    def describe(self) -> str:
        return f"{self.type_name} {self.name}" if self.name else self.type_name


_TOKEN = re.compile(r"(?:::)?[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*|\S")


def parse_param(text: str) -> DeclaredParam:
    """One parameter declaration; unreadable ones (function pointers, templates, macros) come back with no ctype.
    A default argument (``= ...``) is dropped: ``float* x = nullptr`` is the pointer ``float* x``."""
    text = " ".join(_without_default(text).split())
    tokens = _TOKEN.findall(re.sub(r"\s*::\s*", "::", text))
    if not tokens or any(not (t[0].isalpha() or t[0] in "_:") and t not in ("*", "[", "]") for t in tokens):
        return DeclaredParam(None, text, False, None)
    names = [t for t in tokens if t not in ("*", "[", "]")]
    words = [t for t in names if t not in _QUALIFIERS]
    last = next((t for t in reversed(tokens) if t not in ("[", "]")), None)
    name = words[-1] if len(words) >= 2 and last == words[-1] and words[-1] not in _TYPE_WORDS else None
    type_words = words[:-1] if name else words
    levels = tokens.count("*") + (1 if "[" in tokens else 0)
    spelling = _canonical(type_words)
    star = tokens.index("*") if "*" in tokens else len(tokens)
    const = "const " if "const" in tokens[:star] else ""
    type_name = f"{const}{spelling}{'*' * levels}" if levels else spelling
    ctype = TYPES.get(spelling) if levels <= 1 else None
    return DeclaredParam(name, type_name, levels > 0, ctype)


def _without_default(text: str) -> str:
    """A parameter declaration without its default argument: the text before its first top-level ``=``."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "=" and depth == 0:
            return text[:i]
    return text


def split_params(params: str) -> list[str]:
    """The parameters of a C++ parameter list (split at top-level commas: templates and parentheses nest; in a
    default argument, after a top-level ``=``, ``<`` and ``>`` are operators, as in ``int n = 1 << 10``)."""
    if not params.strip():
        return []
    parts, depth, start, default = [], 0, 0, False
    for i, ch in enumerate(params):
        if ch in "([{" or ch == "<" and not default:
            depth += 1
        elif ch in ")]}" or ch == ">" and not default:
            depth -= 1
        elif ch == "=" and depth == 0:
            default = True
        elif ch == "," and depth == 0:
            parts.append(params[start:i])
            start, default = i + 1, False
    parts.append(params[start:])
    return [p.strip() for p in parts]


@dataclass(frozen=True)
class Signature:
    """A kernel's declared parameters; ``hidden`` leading ones (``cuadv_*``) are passed by cuadv itself."""

    kernel: str
    params: tuple[DeclaredParam, ...]
    hidden: int = 0

    def where(self, index: int) -> str:
        """How a message names parameter ``index``: the kernel, the caller's argument position, the declaration."""
        param = self.params[index]
        if index < self.hidden:
            return f"kernel {self.kernel!r}, its own parameter {param.describe()}"
        return f"kernel {self.kernel!r}, argument {index - self.hidden} ({param.describe()})"

    def fits(self, sizes: Sequence[int]) -> bool:
        """True when the declaration agrees with the parameter sizes the compiled kernel reports (a misread
        declaration, or one that #if chose differently, is then dropped)."""
        if len(sizes) != len(self.params):
            return False
        for param, size in zip(self.params, sizes):
            if param.pointer and size != 8:
                return False
            if not param.pointer and param.ctype is not None and param.ctype.size != size:
                return False
        return True


STRIDE_SUFFIXES = ("_pitch", "_stride", "_strides")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)  # preprocessor lines, with their continuations
_GLOBAL = re.compile(r"\b__global__\b")


def declared_signature(source: str, kernel: str) -> Signature | None:
    """The signature of ``kernel`` (a name, or a name expression such as ``"ns::k<float>"``) in ``source``;
    None where it is not declared there readably, or declared twice in two different ways."""
    base = kernel.split("<", 1)[0].strip().rsplit("::", 1)[-1]
    if not base.isidentifier():
        return None
    text = _DIRECTIVE.sub(" ", _COMMENT.sub(" ", source))
    name_re = re.compile(rf"\b{re.escape(base)}\s*\(")
    found: list[tuple[DeclaredParam, ...]] = []
    for g in _GLOBAL.finditer(text):
        m = name_re.search(text, g.end())
        if m is None or re.search(r"[;{}]|\b__global__\b", text[g.end():m.start()]):
            continue
        inner = _balanced(text, m.end() - 1)
        if inner is None:
            continue
        parts = split_params(inner)
        found.append(() if parts in ([], ["void"]) else tuple(parse_param(p) for p in parts))
    if not found or any([p.type_name for p in f] != [p.type_name for p in found[0]] for f in found):
        return None
    # Each parameter's name from the first declaration that gives one (a prototype may leave them out).
    params = tuple(replace(p, name=next((f[i].name for f in found if f[i].name), None)) for i, p in enumerate(found[0]))
    names = {p.name for p in params}
    params = tuple(replace(p, strided=True)
                   if p.pointer and p.name and names & {f"{p.name}{s}" for s in STRIDE_SUFFIXES}
                   else p for p in params)
    hidden = 0
    while hidden < len(params) and (params[hidden].name or "").startswith("cuadv_"):
        hidden += 1
    return Signature(kernel, params, hidden)


def _balanced(text: str, open_at: int) -> str | None:
    """The text between the parenthesis at ``open_at`` and its match."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    return None
