"""ARC plugin: ARC-AGI-1 / ARC-AGI-2 tasks, the reference's augmentations and encoding."""
