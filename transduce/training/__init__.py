"""Training: loss, learning-rate schedules, checkpoints, the training loop."""
