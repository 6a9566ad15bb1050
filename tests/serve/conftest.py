import pytest

from transduce.config import load_config
from transduce.decoding.translator import Translator
from transduce.serve import ServedModel, ServeSettings, create_app
from transduce.training.start import start_run

from ..training.test_trainer import FAST

SENTENCES = ["seven", "one hundred and two", "forty-two", "three thousand and nine", "twelve",
             "eighty-one", "five hundred", "sixty-six"]


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """A small model of the number-words task (en -> de by its data config), beam 3."""
    run = tmp_path_factory.mktemp("served") / "run"
    config = load_config(overrides=[*FAST, "train.max_updates=150", "model.max_positions=40",
                                    "decode.beam_size=3"])
    start_run(config, run).train()
    return run


@pytest.fixture(scope="session")
def translator(run_dir):
    return Translator.load(run_dir, device="cpu")


def make_app(translator, **settings):
    model = ServedModel("en", "de", translator)
    return create_app([model], ServeSettings(**settings))
