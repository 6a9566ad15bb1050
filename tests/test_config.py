import pytest

from transduce.config import Config, load_config
from transduce.errors import UserError


def test_yaml_file_with_overrides_round_trips_through_the_saved_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  preset: tiny\n  dropout: 0.2\n"
                    "data:\n  dataset: numbers\n  vocab_size: 500\n"
                    "train:\n  max_updates: 100\n  adam_betas: [0.9, 0.997]\n")
    config = load_config(path, ["train.lr=0.002", "decode.beam_size=5", "data.dir=null"])
    assert config.model.preset == "tiny" and config.model.settings == {"dropout": 0.2}
    assert config.train.max_updates == 100 and config.train.lr == 0.002
    assert config.train.adam_betas == (0.9, 0.997) and config.decode.beam_size == 5
    written = load_config(overrides=["train.adam_eps=1e-8", "train.lr=5e-4",  # YAML 1.1 text
                                      "train.adam_betas=[0.9, 9.99E-1]"]).train
    assert (written.adam_eps, written.lr, written.adam_betas) == (1e-8, 5e-4, (0.9, 0.999))
    config.save(tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == config


def test_the_model_section_resolves_with_vocabulary_sizes_from_the_tokenizer():
    config = load_config(overrides=["model.preset=tiny", "model.norm_first=true"])
    model = config.model.resolve(8000, 8000, shared_vocab=True)
    assert (model.d_model, model.norm_first, model.src_vocab_size) == (128, True, 8000)
    separate = config.model.resolve(8000, 9000, shared_vocab=False)
    assert not separate.share_embeddings


def test_the_model_section_is_a_typed_dataclass_of_modelconfigs_fields():
    """Its keys are ModelConfig's (but the tokenizer's), typed and described as there, checked
    without a vocabulary; unset ones are the preset's."""
    import dataclasses

    from transduce.config import _FROM_TOKENIZER, ModelSection
    from transduce.fields import help_of
    from transduce.model.config import ModelConfig

    section = ModelSection(preset="tiny", dropout=0.2)
    assert section.settings == {"dropout": 0.2} and section.get("d_model") == 128
    assert section.get("norm_first") is False  # the field's default
    names = [f.name for f in dataclasses.fields(ModelSection)]
    assert names == ["preset"] + [f.name for f in dataclasses.fields(ModelConfig)
                                  if f.name not in _FROM_TOKENIZER]
    assert help_of(ModelSection)["d_model"] == help_of(ModelConfig)["d_model"]
    with pytest.raises(UserError, match="model.n_heads must be positive"):
        ModelSection(n_heads=0)
    with pytest.raises(UserError, match="divisible"):
        ModelSection(preset="tiny", n_heads=3)
    assert ModelSection.of(section.resolve(100, 100, shared_vocab=True)).values() == {
        k: v for k, v in dataclasses.asdict(section.resolve(100, 100, shared_vocab=True)).items()
        if k not in _FROM_TOKENIZER}


@pytest.mark.parametrize("overrides, message", [
    (["train.max_update=5"], "unknown key 'train.max_update'; did you mean 'train.max_updates'?"),
    (["trian.seed=1"], "unknown section 'trian'; did you mean 'train'?"),
    (["model.dropuot=0.1"], "unknown key 'model.dropuot'; did you mean 'model.dropout'?"),
    (["train.max_updates=ten"], "train.max_updates must be an integer, got 'ten'"),
    (["train.bleu=1"], "train.bleu must be true or false, got 1"),
    (["train.lr=fast"], "train.lr must be a number, got 'fast'"),
    (["data.dir=3"], "data.dir must be a string or null, got 3"),
    (["train.precision=fp8"], "train.precision must be one of"),
    (["train.rdrop_alpha=-1"], "train.rdrop_alpha must be >= 0, got -1"),
    (["model.preset=huge"], "unknown preset 'huge'"),
    (["model.d_model=100"], "divisible"),
    (["model.d_model=big"], "model.d_model must be an integer or null, got 'big' (D: width of"),
    (["decode.beam_size=wide"], "decode.beam_size must be an integer, got 'wide' (hypotheses "
                                "kept per sentence"),
    (["max_updates=5"], "expected section.key=value"),
])
def test_bad_keys_and_values_are_one_clear_line(overrides, message):
    with pytest.raises(UserError) as error:
        load_config(overrides=overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_file_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(UserError, match="no such configuration file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  seed: 1\n  lr: [\n")
    with pytest.raises(UserError, match=rf"{bad}:\d+: not valid YAML"):
        load_config(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("train:\n  warmpu: 10\n")
    with pytest.raises(UserError, match=rf"{typo}: unknown key 'train.warmpu'; did you mean"):
        load_config(typo)


def test_defaults_are_a_valid_configuration():
    assert load_config() == Config()
