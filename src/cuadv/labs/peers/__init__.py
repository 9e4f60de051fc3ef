"""Benchmark peers that the labs time cuadv against (CUB built with nvcc, ...). Benchmark-only: the
library layer never imports this package."""
