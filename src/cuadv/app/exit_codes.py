"""The exit codes of every cuadv command (the README's table and `cuadv --help` list them from here)."""

EXIT_OK = 0           # everything asked for ran and passed
EXIT_FAILED = 1       # a lab, a check or a compile failed (or cuadv raised a CuadvError)
EXIT_USAGE = 2        # a usage error: argparse's own exit status
EXIT_NO_GPU = 3       # no usable CUDA GPU where the command (or --require-gpu) needs one
EXIT_NOTHING_RAN = 4  # nothing ran: every selected lab was skipped, or nothing could be checked
EXIT_CODES = {  # the README's table says the same, word for word (tests/test_cli.py)
    EXIT_OK: "ok",
    EXIT_FAILED: "a lab, a check or a compile failed, or a lab name that does not exist (bench nosuch, run --only "
                 "nosuch, bench LAB --peer for a lab other than domains)",
    EXIT_USAGE: "usage error: the command line (argparse), or a value given that the command cannot use: a build "
                "target NVRTC does not take, an --out it cannot write into, a simulate workload or model parameter "
                "it cannot use, or a CUADV_CACHE_MAX_BYTES that cache cannot read",
    EXIT_NO_GPU: "no usable CUDA GPU (caps, bench, check, run --require-gpu)",
    EXIT_NOTHING_RAN: "nothing ran: every selected lab was skipped on this GPU (run, bench), or check found no "
                      "compute-sanitizer or no lab to check",
}
