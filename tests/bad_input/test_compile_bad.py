"""Bad compilations: what NVRTC refuses carries its log, the options and the numbered source (and, with
CUADV_DUMP_SOURCE=1, a file of the source); what cuadv can tell before NVRTC runs (a target NVRTC lacks, a define
that is no macro, options given as one string) raises first. All CPU: NVRTC needs no GPU for a named target."""

from pathlib import Path

import pytest

from cuadv.compiler import compile_source, nvrtc_targets
from cuadv.errors import CompileError, CuadvError, NoGpuError

GOOD = 'extern "C" __global__ void k(int* x) { x[0] = N; }'


def test_a_syntax_error_shows_the_log_the_options_and_the_numbered_source():
    with pytest.raises(CompileError) as info:
        compile_source('extern "C" __global__ void k(int* x) {\n  x[0] = ;\n}', name="bad_syntax", arch="sm_90a")
    text = str(info.value)
    assert "NVRTC could not compile 'bad_syntax'" in text
    assert "options: -arch=sm_90a" in text
    assert "bad_syntax.cu(2): error: expected an expression" in text  # the log, with the file and line
    assert "    2    x[0] = ;" in text  # the numbered source
    assert "set CUADV_DUMP_SOURCE=1 to write it to a file" in text


def test_the_source_is_dumped_to_a_file_on_request(monkeypatch):
    monkeypatch.setenv("CUADV_DUMP_SOURCE", "1")
    source = 'extern "C" __global__ void k(int* x) { x[0] = undefined_name; }\n'
    with pytest.raises(CompileError, match=r'identifier "undefined_name" is undefined') as info:
        compile_source(source, name="bad_dumped", arch="sm_90a")
    path = Path(info.value.log.rsplit("(source written to ", 1)[1].rstrip(")"))
    try:
        assert path.name.startswith("bad_dumped-") and path.suffix == ".cu"
        assert path.read_text() == source
    finally:
        path.unlink()


def test_a_missing_header():
    with pytest.raises(CompileError, match=r'cannot open source file "cuadv/no_such_header\.cuh"'):
        compile_source('#include <cuadv/no_such_header.cuh>\n' + GOOD, name="bad_include", arch="sm_90a",
                       defines={"N": 1})


@pytest.mark.parametrize("arch, error, message", [
    ("sm90", ValueError, r"target 'sm90' is not of the form sm_XY\[a\] \(for example sm_90a, sm_100a\)"),
    (90, ValueError, r"target 90 is not of the form sm_XY\[a\]"),
    ("hopper", ValueError, r"target 'hopper' is not of the form sm_XY\[a\]"),
    ("sm_99", ValueError, r"target 'sm_99': NVRTC \d+\.\d+ compiles for sm_75, .*sm_90, .*\(with an 'a' suffix "
                          r"from sm_90 on\); got compute capability 9\.9"),
    ("sm_35", ValueError, r"target 'sm_35': NVRTC .*; got compute capability 3\.5"),
])
def test_a_target_nvrtc_does_not_compile_for(arch, error, message):
    with pytest.raises(error, match=message):
        compile_source(GOOD, name="bad_arch", arch=arch, defines={"N": 1})


def test_the_supported_targets_come_from_nvrtc():
    assert 90 in nvrtc_targets() and 99 not in nvrtc_targets()


@pytest.mark.parametrize("defines, message", [
    ({"N M": 1}, r"define 'N M' is not a macro name \(an identifier, or NAME\(args\)\), as -D takes it"),
    ({"-DN": 1}, r"define '-DN' is not a macro name"),
    ({"N": "1\n#error injected"}, r"define N='1\\n#error injected': a value is None, a number or one line of text"),
    ({"N": True}, r"define N=True: a value is None, a number or one line of text \(True/False: pass 1/0\)"),
    ({"N": [1, 2]}, r"define N=\[1, 2\]: a value is None, a number or one line of text"),
])
def test_a_define_nvrtc_would_misread(defines, message):
    with pytest.raises(ValueError, match=message):
        compile_source(GOOD, name="bad_define", arch="sm_90a", defines=defines)


def test_a_define_that_breaks_the_code_shows_in_the_options():
    with pytest.raises(CompileError, match=r"(?s)options: .*-DN=\(.*--- log ---.*error"):
        compile_source(GOOD, name="bad_define_value", arch="sm_90a", defines={"N": "("})


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(options="-G"), TypeError, r"options is a list of str, got the single str '-G': pass \['-G'\]"),
    (dict(options=[b"-G"]), TypeError, r"options is a list of str, got \(b'-G',\)"),
    (dict(name_expressions="k<int>"), TypeError, r"name_expressions is a list of str, got the single str 'k<int>'"),
    (dict(headers={"extra.h": b"#define X 1"}), TypeError, r"headers maps include names to header text \(str to "
                                                           r"str\), got 'extra\.h': bytes"),
])
def test_compile_inputs_of_the_wrong_type(kwargs, error, message):
    with pytest.raises(error, match=message):
        compile_source(GOOD, name="bad_inputs", arch="sm_90a", defines={"N": 1}, **kwargs)


def test_source_as_bytes():
    with pytest.raises(TypeError, match=r"source must be CUDA C\+\+ text \(a str\), got bytes"):
        compile_source(GOOD.encode(), name="bad_bytes", arch="sm_90a")


def test_an_option_nvrtc_does_not_know():
    with pytest.raises(CompileError, match=r"(?s)options: .* --no-such-option.*unrecognized option --no-such-option"):
        compile_source(GOOD, name="bad_option", arch="sm_90a", defines={"N": 1}, options=["--no-such-option"])


def test_a_name_expression_naming_nothing():
    with pytest.raises(CompileError, match=r'identifier "not_a_template" is undefined'):
        compile_source(GOOD, name="bad_expression", arch="sm_90a", defines={"N": 1},
                       name_expressions=["not_a_template<int>"])


def test_a_kernel_the_module_does_not_have():
    module = compile_source(GOOD, name="bad_kernel_name", arch="sm_90a", defines={"N": 1})
    with pytest.raises(CuadvError, match=r"module 'bad_kernel_name' has no kernel 'kk'; its kernels: k"):
        module.kernel("kk")


def test_no_target_and_no_gpu_names_the_way_out(monkeypatch):
    import cuadv.compiler as compiler

    def no_gpu():
        raise NoGpuError("no CUDA GPU: the driver reports 0 devices")

    monkeypatch.setattr(compiler, "current_device", no_gpu)
    with pytest.raises(NoGpuError, match=r"no CUDA GPU: the driver reports 0 devices; without a GPU, compile for a "
                                         r"named target: arch='sm_90a'"):
        compile_source(GOOD, name="bad_no_target", defines={"N": 1})
