"""Pictures: training curves (and, with later issues, attention and positional encodings)."""
