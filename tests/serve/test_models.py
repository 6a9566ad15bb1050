from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from transduce.cli import main
from transduce.errors import UserError
from transduce.serve import ModelSpec, create_app
from transduce.serve.settings import ServeSettings, parse_rate_limit, read_api_keys


def test_model_specs():
    assert ModelSpec.parse("runs/x") == ModelSpec(Path("runs/x"))
    assert ModelSpec.parse("EN:de=runs/a=b") == ModelSpec(Path("runs/a=b"), "en", "de")


def test_the_factory_loads_run_directories_named_or_from_the_environment(run_dir, monkeypatch):
    app = create_app([f"en:fr={run_dir}", str(run_dir)])
    with TestClient(app) as client:
        assert {m["name"] for m in client.get("/v1/models").json()} == {"en-fr", "en-de"}
    monkeypatch.setenv("TRANSDUCE_SERVE_MODELS", str(run_dir))
    with TestClient(create_app()) as client:
        assert [m["name"] for m in client.get("/v1/models").json()] == ["en-de"]


def test_one_model_per_pair(run_dir):
    with pytest.raises(UserError, match="en:de is served by .* already"):
        create_app([str(run_dir), str(run_dir)])


def test_settings_from_the_command_line(tmp_path):
    assert parse_rate_limit("60/minute") == (60, 60.0)
    assert parse_rate_limit(" 5 / second") == (5, 1.0)
    with pytest.raises(UserError, match="expected N/minute"):
        parse_rate_limit("fast")
    keys = tmp_path / "keys"
    keys.write_text("# ours\nabc\n\n def \n")
    assert read_api_keys(keys) == {"abc", "def"}
    keys.write_text("# none\n")
    with pytest.raises(UserError, match="no key in it"):
        read_api_keys(keys)
    with pytest.raises(UserError, match="--max-batch-tokens must be at least 1"):
        ServeSettings(max_batch_tokens=0)


@pytest.mark.parametrize("args, message", [
    (["--model", "no/such/run"], "no/such/run: not a model directory"),
    (["--model", "RUN", "--rate-limit", "lots"], "--rate-limit 'lots': expected N/minute"),
    (["--model", "RUN", "--api-keys", "no/such/file"], "--api-keys no/such/file: cannot read"),
])
def test_bad_options_are_one_line(run_dir, capsys, args, message):
    args = [str(run_dir) if a == "RUN" else a for a in args]
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_settings_reach_the_workers_whole():
    settings = ServeSettings(beam_size=4, api_keys=frozenset({"a", "b"}), rate_limit=5,
                             rate_window=1.0, workers=3, batching=False)
    assert ServeSettings.from_json(settings.to_json()) == settings
    assert settings.threads_per_worker() >= 1
    assert ServeSettings().threads_per_worker() == 0  # one worker: PyTorch's default
