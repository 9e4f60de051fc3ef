"""PDL without a GPU: the kernels compile for sm_90a and sm_100a, the header's guard, the demo's
size rule and the facts the demo checks."""

import pytest

from cuadv.compiler import compile_source, kernel_source
from cuadv.errors import CompileError, LaunchConfigError
from cuadv.labs.pdl import (DEMO_MAX_CONSUMER_BLOCKS, MODES, PDL_MODES, THREADS, DemoOutcome, PdlLab, build_module,
                            check_demo, check_demo_size, saved_per_boundary)

KERNELS = {"pdl_demo_producer", "pdl_demo_consumer_correct", "pdl_demo_consumer_misplaced", "pdl_chain_step",
           "pdl_spin"}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_kernels_compile(arch):
    module = build_module(arch)
    assert KERNELS <= set(module.resources)
    assert all(r.spill_store_bytes == 0 for r in module.resources.values())


def _entry_ptx(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:end if end > 0 else len(ptx)]


def test_misplaced_consumer_reads_before_the_wait_and_the_correct_one_after():
    ptx = build_module("sm_90a").ptx
    misplaced = _entry_ptx(ptx, "pdl_demo_consumer_misplaced")
    correct = _entry_ptx(ptx, "pdl_demo_consumer_correct")
    assert misplaced.index("ld.global") < misplaced.index("griddepcontrol.wait")
    assert correct.index("griddepcontrol.wait") < correct.index("ld.global")
    producer = _entry_ptx(ptx, "pdl_demo_producer")
    assert producer.index("griddepcontrol.launch_dependents") < producer.index("st.global")


def test_chain_step_triggers_before_the_wait_or_after_it():
    """pdl_chain_step's three trigger places: one launch_dependents before the wait (trigger at start, ahead of
    the setup's %globaltimer spin), one after it (after wait), none for trigger at exit (the implicit one)."""
    step = _entry_ptx(build_module("sm_90a").ptx, "pdl_chain_step")
    wait = step.index("griddepcontrol.wait")
    assert step.index("griddepcontrol.launch_dependents") < step.index("%globaltimer")
    assert step.count("griddepcontrol.wait") == 1
    assert step.count("griddepcontrol.launch_dependents") == 2
    assert step.index("griddepcontrol.launch_dependents") < wait < step.rindex("griddepcontrol.launch_dependents")
    assert [m.trigger for m in MODES] == [0, 0, 1, 2] and not MODES[0].pdl and all(m.pdl for m in MODES[1:])
    assert [m.place for m in PDL_MODES] == ["trigger at exit", "trigger at start", "trigger after wait"]
    assert saved_per_boundary(2.0, 1.0, 101) == pytest.approx(1.01)


def test_pdl_header_names_the_sm_below_sm90():
    src = '#include <cuadv/pdl.cuh>\nextern "C" __global__ void k() { cuadv::pdl::wait(); }\n'
    with pytest.raises(CompileError, match="griddepcontrol.wait \\(PDL\\) needs sm_90"):
        compile_source(src, name="pdl_guard", arch="sm_80")
    compile_source(src, name="pdl_guard", arch="sm_90a")


def test_demo_size_rule():
    assert check_demo_size(1) == 1
    assert check_demo_size(THREADS + 1) == 2
    assert check_demo_size(DEMO_MAX_CONSUMER_BLOCKS * THREADS) == DEMO_MAX_CONSUMER_BLOCKS
    with pytest.raises(LaunchConfigError, match="at least 1 element"):
        check_demo_size(0)
    with pytest.raises(LaunchConfigError, match=f"65 blocks exceeds {DEMO_MAX_CONSUMER_BLOCKS} blocks"):
        check_demo_size(DEMO_MAX_CONSUMER_BLOCKS * THREADS + 1)


def _outcome(consumer, pdl, observed, right, stale, n=100, producers=4):
    return DemoOutcome(consumer, pdl, n, producers, observed, right, stale, None)


def test_check_demo_accepts_the_guaranteed_outcomes():
    assert check_demo(_outcome("correct", True, 4, 100, 0)) is None
    assert check_demo(_outcome("correct", False, 0, 100, 0)) is None
    assert check_demo(_outcome("misplaced", False, 0, 100, 0)) is None
    assert check_demo(_outcome("misplaced", True, 4, 0, 100)) is None
    # PDL permits overlap without forcing it: a misplaced consumer that did not overlap may be right.
    assert check_demo(_outcome("misplaced", True, 0, 100, 0)) is None


def test_check_demo_rejects_what_cannot_happen():
    assert "saw the consumer start early" in check_demo(_outcome("misplaced", False, 1, 100, 0))
    assert "outputs are wrong" in check_demo(_outcome("correct", True, 4, 99, 1))
    assert "only 50 of 100 outputs are stale" in check_demo(_outcome("misplaced", True, 4, 50, 50))


def test_supported_names_capability_and_fallback():
    class Caps:
        compute_capability = (8, 0)

        def cc_string(self):
            return "8.0"

    reason = PdlLab().supported(Caps())
    assert "compute capability >= 9.0 (got 8.0)" in reason and "fallback" in reason


def test_kernel_source_documents_every_barrier():
    src = kernel_source("pdl.cu")
    for line in src.splitlines():
        if "__syncthreads()" in line or "griddepcontrol" in line and "asm" in line:
            assert "//" in line, line
