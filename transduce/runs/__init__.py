"""Run directories: what `transduce train` writes and every other command reads.

    RUN/config.yaml                   the resolved configuration
    RUN/tokenizer.json, tokenizer.*   the tokenizers
    RUN/checkpoints/...               weights and training state (checkpoint.py)
    RUN/train.log, metrics.jsonl, tensorboard/

`checkpoint` writes and chooses checkpoints, `claim` gives a new run its directory without
damaging what is there, `load` reads a run's model back with its tokenizers and settings.
"""
