"""cuadv.signature: a kernel's declared parameters read from the source text, and left unchecked where they
cannot be read for sure."""

import re

import pytest

from cuadv.compiler import PACKAGE_DIR
from cuadv.signature import declared_signature, parse_param, split_params


@pytest.mark.parametrize("text, name, type_name, pointer, element", [
    ("float* x", "x", "float*", True, "float"),
    ("const float* __restrict__ in", "in", "const float*", True, "float"),
    ("float * const p", "p", "float*", True, "float"),
    ("const int x[]", "x", "const int*", True, "int"),
    ("unsigned n", "n", "unsigned int", False, "unsigned int"),
    ("long long int q", "q", "long long", False, "long long"),
    ("signed char* s", "s", "signed char*", True, "signed char"),
    ("std::uint32_t* w", "w", "uint32_t*", True, "uint32_t"),
    ("const float4* v", "v", "const float4*", True, "float4"),
    ("unsigned int", None, "unsigned int", False, "unsigned int"),  # unnamed
    ("void* any", "any", "void*", True, None),
    ("float** rows", "rows", "float**", True, None),
    ("T* __restrict__ out", "out", "T*", True, None),  # a template parameter: unchecked
    ("u32 n", "n", "u32", False, None),  # a typedef: unchecked
    ("const __grid_constant__ cuadv::ws::Schedule cuadv_schedule", "cuadv_schedule", "cuadv::ws::Schedule", False,
     None),
    ("Pair<int, int> p", None, "Pair<int, int> p", False, None),  # unreadable: unchecked, not a pointer
    ("float (*f)(int, int)", None, "float (*f)(int, int)", False, None),
    ("int n = 4", "n", "int", False, "int"),  # a default argument: the type is still int
    ("float* __restrict__ out = nullptr", "out", "float*", True, "float"),  # still a pointer
    ("const T* const in = nullptr", "in", "const T*", True, None),
    ("unsigned long long seed = (1ull << 32) + 7", "seed", "unsigned long long", False, "unsigned long long"),
])
def test_a_parameter_declaration(text, name, type_name, pointer, element):
    p = parse_param(text)
    assert (p.name, p.type_name, p.pointer) == (name, type_name, pointer)
    assert (p.ctype.spelling if p.ctype else None) == element


def test_element_types_and_alignment():
    def of(text):
        return parse_param(text).ctype

    assert of("float4* v").elements == {"float32"} and of("float4* v").alignment == 16
    assert of("float3* v").alignment == 4 and of("int2* v").alignment == 8 and of("double2* v").alignment == 16
    assert of("double2* v").elements == {"float64", "complex128"}
    assert of("char* c").elements == {"int8", "uint8"} and of("__half* h").elements == {"float16"}
    assert of("__nv_bfloat16* b").elements == {"bfloat16"}


def test_split_params_nests_templates_and_parentheses():
    assert split_params("") == [] and split_params("int a") == ["int a"]
    assert split_params("Pair<int, int> p, float (*f)(int, int), int a[2]") == [
        "Pair<int, int> p", "float (*f)(int, int)", "int a[2]"]


def test_default_arguments_keep_their_parameters_types():
    """A default argument neither hides a parameter's type nor, with a shift in it, swallows the next parameter."""
    assert split_params("float* x, int n = 1 << 10, float a = 2.0f") == ["float* x", "int n = 1 << 10",
                                                                        "float a = 2.0f"]
    sig = declared_signature('extern "C" __global__ void d(const float* x, float* y = nullptr, int n = 1 << 10, '
                             'float a = 2.0f) {}', "d")
    assert [p.describe() for p in sig.params] == ["const float* x", "float* y", "int n", "float a"]
    assert [p.pointer for p in sig.params] == [True, True, False, False]
    assert sig.fits((8, 8, 4, 4))


def test_names_come_from_any_declaration():
    """A prototype without names, then the definition: the names (and so a pitch's strided pointer) are read."""
    src = 'extern "C" __global__ void p(float*, size_t);\nextern "C" __global__ void p(float* a, size_t a_pitch) {}'
    sig = declared_signature(src, "p")
    assert [p.describe() for p in sig.params] == ["float* a", "size_t a_pitch"]
    assert [p.strided for p in sig.params] == [True, False]


SOURCE = r"""
// __global__ void k(double* commented_out);
/* __global__ void k(char* also_commented); */
#define DECLARE __global__ void k(long* in_a_macro)
template <typename T> __global__ void __launch_bounds__(256, 2) t(const T* in, int* idx, T lo) {}
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(const float* x, float* out, long long out_pitch) {}
extern "C" __global__ void kk(int n);
extern "C" __global__ void kk(int n) {}
__global__ void twice(int a);
__global__ void twice(float a) {}
extern "C" __global__ void none(void) {}
"""


def test_a_kernel_among_comments_macros_and_other_kernels():
    sig = declared_signature(SOURCE, "k")
    assert [p.describe() for p in sig.params] == ["const float* x", "float* out", "long long out_pitch"]
    assert [p.strided for p in sig.params] == [False, True, False]  # out_pitch: out addresses its rows itself
    assert [p.describe() for p in declared_signature(SOURCE, "kk").params] == ["int n"]  # declared, then defined
    assert [p.describe() for p in declared_signature(SOURCE, "t<float>").params] == ["const T* in", "int* idx",
                                                                                      "T lo"]
    assert declared_signature(SOURCE, "none").params == ()


def test_what_cannot_be_read_for_sure_has_no_signature():
    assert declared_signature(SOURCE, "twice") is None  # two declarations that differ
    assert declared_signature(SOURCE, "missing") is None
    assert declared_signature("#define K __global__ void\nK k(int n) {}", "k") is None


def test_cuadvs_own_leading_parameters_are_hidden():
    src = 'extern "C" __global__ void q(const __grid_constant__ Q cuadv_queue, float* y, int n) {}'
    sig = declared_signature(src, "q")
    assert sig.hidden == 1
    assert sig.where(1) == "kernel 'q', argument 0 (float* y)"


def test_fits_the_compiled_sizes():
    sig = declared_signature(SOURCE, "k")
    assert sig.fits((8, 8, 8))
    assert not sig.fits((8, 8))  # another parameter count
    assert not sig.fits((8, 4, 8))  # a pointer is 8 bytes
    assert not sig.fits((8, 8, 4))  # long long is 8 bytes


def test_every_shipped_kernel_is_read():
    for path in PACKAGE_DIR.rglob("*.cu"):
        source = path.read_text()
        names = set(re.findall(r"__global__\s+void\s+(?:__\w+__\([^)]*\)\s*)*(\w+)\s*\(", source))
        for name in names:
            assert declared_signature(source, name) is not None, (path.name, name)
