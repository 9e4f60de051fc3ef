"""The exit codes of every cuadv command (the README's table and `cuadv --help` list them from here)."""

EXIT_OK = 0           # everything asked for ran and passed
EXIT_FAILED = 1       # a lab, a check or a compile failed (or cuadv raised a CuadvError)
EXIT_USAGE = 2        # a usage error: argparse's own exit status
EXIT_NO_GPU = 3       # no usable CUDA GPU where the command (or --require-gpu) needs one
EXIT_NOTHING_RAN = 4  # nothing ran: every selected lab was skipped, or nothing could be checked
EXIT_CODES = {
    EXIT_OK: "ok",
    EXIT_FAILED: "a lab, check or compile failed",
    EXIT_USAGE: "usage error",
    EXIT_NO_GPU: "no usable CUDA GPU (caps, bench, check, run --require-gpu)",
    EXIT_NOTHING_RAN: "nothing ran (every selected lab skipped, or nothing to check)",
}
