"""While the loop runs: checkpoints, progress, memory guard, thermal, faults, the streaming
reader, data parallelism under torchrun."""
