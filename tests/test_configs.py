"""The shipped configurations load, and say what their comments say."""

from pathlib import Path

import pytest

from transduce.config import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("name, preset", [("quickstart", "tiny"), ("multi30k_en_de", "tiny"),
                                          ("multi30k_en_fr", "tiny"), ("iwslt14_de_en", "iwslt"),
                                          ("wmt14_en_de_base", "base"),
                                          ("wmt14_en_de_big", "big")])
def test_shipped_configs_load(name, preset):
    config = load_config(CONFIGS / f"{name}.yaml")
    assert config.model.preset == preset
    assert config.model.resolve(8000, 8000, shared_vocab=True)


def test_the_wmt_configs_follow_the_paper():
    for name in ("wmt14_en_de_base", "wmt14_en_de_big"):
        c = load_config(CONFIGS / f"{name}.yaml")
        assert (c.train.lr_schedule, c.train.warmup, c.train.adam_betas, c.train.adam_eps) == (
            "noam", 4000, (0.9, 0.98), 1e-9)
        assert (c.decode.beam_size, c.decode.length_penalty, c.data.vocab_size) == (4, 0.6, 37000)


def test_the_multi30k_configs_differ_only_in_the_target_language():
    de, fr = (load_config(CONFIGS / f"multi30k_en_{t}.yaml") for t in ("de", "fr"))
    assert (de.data.tgt_lang, fr.data.tgt_lang) == ("de", "fr")
    assert de.model == fr.model and de.train == fr.train and de.decode == fr.decode
    assert de.model.settings.get("norm_first") is True
