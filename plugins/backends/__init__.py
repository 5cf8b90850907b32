"""Device backends (cpu, cuda, mps, xla) and the host math libraries (mkl): each implements
the device contract (``trm.device.contract``) or tunes the CPU's libraries."""
