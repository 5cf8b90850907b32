"""Experiment trackers that mirror a run's metrics.jsonl: TensorBoard, Weights & Biases."""
