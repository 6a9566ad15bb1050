"""The shipped configurations load, and say what their comments say."""

from pathlib import Path

import pytest

from transduce.config import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("name, preset", [("quickstart", "tiny"), ("multi30k_en_de", "tiny"),
                                          ("multi30k_en_fr", "tiny"), ("multi30k_en_xx", "tiny"),
                                          ("iwslt14_de_en", "iwslt"),
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


def test_the_multilingual_multi30k_config_is_the_bilingual_recipe_three_times_over():
    de, xx = (load_config(CONFIGS / f"multi30k_en_{t}.yaml") for t in ("de", "xx"))
    assert xx.data.target_languages == ("de", "fr", "cs") and xx.data.languages_tagged
    assert [c.tgt_lang for c in xx.data.valid_corpora] == ["de", "fr", "cs"]
    assert xx.model == de.model and xx.decode == de.decode
    assert xx.train.max_time == 3 * de.train.max_time
    assert xx.train.max_updates == 3 * de.train.max_updates
