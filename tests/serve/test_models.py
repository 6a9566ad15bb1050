import asyncio
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from transduce.cli import build_parser, main
from transduce.errors import UserError
from transduce.serve import ModelSpec, ServedModel, create_app
from transduce.serve.service import Service
from transduce.serve.settings import ServeSettings, read_api_keys


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
    # the settings too, one variable each, as `transduce serve` reads them
    monkeypatch.delenv("TRANSDUCE_SERVE_MODELS")
    for name, value in (("MODEL", str(run_dir)), ("MAX_CHARS", "321"), ("BEAM_SIZE", "2")):
        monkeypatch.setenv(f"TRANSDUCE_SERVE_{name}", value)
    with TestClient(create_app()) as client:
        assert client.get("/frontend/settings").json()["charLimit"] == 321
        assert client.get("/v1/models").json()[0]["beam_size"] == 2
    monkeypatch.setenv("TRANSDUCE_SERVE_BATCHING", "sometimes")
    with pytest.raises(UserError, match="TRANSDUCE_SERVE_BATCHING='sometimes': expected true or"):
        create_app()


def test_one_model_per_pair(run_dir):
    with pytest.raises(UserError, match="en:de is served by .* already"):
        create_app([str(run_dir), str(run_dir)])


def test_settings_from_the_command_line(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# ours\nabc\n\n def \n")
    assert read_api_keys(keys) == {"abc", "def"}
    keys.write_text("# none\n")
    with pytest.raises(UserError, match="no key in it"):
        read_api_keys(keys)
    with pytest.raises(UserError, match="--max-batch-tokens must be at least 1"):
        ServeSettings(max_batch_tokens=0)
    with pytest.raises(UserError, match="--max-search-sentences must not be negative"):
        ServeSettings(max_search_sentences=-1)
    with pytest.raises(UserError, match="--rate-limit 'fast': expected N/minute"):
        ServeSettings(rate_limit="fast")
    with pytest.raises(UserError, match="--rate-limit with --workers above 1 needs "
                                        "--rate-limit-storage redis://"):
        ServeSettings(rate_limit="5/minute", workers=2)
    ServeSettings(rate_limit="5/minute", workers=2, rate_limit_storage="redis://localhost:6379")
    with pytest.raises(UserError, match="--rate-limit-storage 'sql://x': expected"):
        ServeSettings(rate_limit_storage="sql://x")
    with pytest.raises(UserError, match="--require-api-key needs --api-keys FILE"):
        ServeSettings(require_api_key=True)


def test_each_option_of_serve_is_a_field_of_its_settings():
    """One declaration per option: serve's own options are ServeSettings' fields, by name,
    with their defaults; the search's are DecodeConfig's."""
    import dataclasses

    from transduce.cli import build_parser
    from transduce.decoding.config import FIELDS
    from transduce.serve_command import settings_of

    args = build_parser().parse_args(["serve", "--model", "RUN"])
    assert settings_of(args) == ServeSettings()
    names = {f.name for f in dataclasses.fields(ServeSettings)} - {"decode"}
    assert names | set(FIELDS) <= set(vars(args))
    given = build_parser().parse_args(["serve", "--model", "RUN", "--max-chars", "10",
                                       "--no-batching", "--beam-size", "2"])
    assert settings_of(given) == ServeSettings(max_chars=10, batching=False,
                                               decode={"beam_size": 2})


def test_serve_options_come_from_the_environment_unless_given(monkeypatch):
    from transduce.cli import build_parser
    from transduce.options import from_environment
    from transduce.serve_command import ENVIRONMENT, settings_of

    for name, value in (("MAX_CHARS", "200"), ("BATCHING", "false"), ("BEAM_SIZE", "2"),
                        ("RATE_LIMIT", "5/minute"), ("MODEL", "a,b"), ("PORT", "6000"),
                        ("COMPILE", "false")):
        monkeypatch.setenv(ENVIRONMENT + name, value)
    parser = build_parser()
    argv = ["serve", "--max-chars", "300"]
    args = parser.parse_args(argv)
    args.argv = argv
    from_environment(args.parser, args, ENVIRONMENT)
    assert args.model == ["a", "b"] and args.port == 6000
    assert settings_of(args) == ServeSettings(max_chars=300, batching=False, compile=False,
                                              rate_limit="5/minute", decode={"beam_size": 2})
    monkeypatch.setenv(ENVIRONMENT + "MAX_TEXTS", "many")
    with pytest.raises(UserError, match="TRANSDUCE_SERVE_MAX_TEXTS='many': invalid literal"):
        from_environment(args.parser, args, ENVIRONMENT)


@pytest.mark.parametrize("args, message", [
    (["--model", "no/such/run"], "no/such/run: not a model directory"),
    (["--model", "RUN", "--rate-limit", "lots"], "--rate-limit 'lots': expected N/minute"),
    (["--model", "RUN", "--api-keys", "no/such/file"], "--api-keys no/such/file: cannot read"),
    (["--model", "RUN", "--rate-limit", "5/minute", "--workers", "2"],
     "--rate-limit with --workers above 1 needs --rate-limit-storage redis://HOST:PORT"),
    (["--model", "RUN", "--require-api-key"], "--require-api-key needs --api-keys FILE"),
])
def test_bad_options_are_one_line(run_dir, capsys, args, message):
    args = [str(run_dir) if a == "RUN" else a for a in args]
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_settings_reach_the_workers_whole(tmp_path):
    settings = ServeSettings(decode={"beam_size": 4}, api_keys=tmp_path / "keys",
                             rate_limit="5/second", workers=3, batching=False,
                             rate_limit_storage="redis://127.0.0.1:6379", require_api_key=True,
                             metrics_auth_token="t")
    assert ServeSettings.from_json(settings.to_json()) == settings


@pytest.mark.parametrize("cpus, workers, threads, expected", [
    (8, 1, 0, 7),  # one worker: a CPU left to HTTP and the machine's other work
    (2, 1, 0, 1), (1, 1, 0, 1), (8, 2, 0, 4), (2, 4, 0, 1), (8, 1, 3, 3), (8, 2, 8, 8)])
def test_threads_per_worker(monkeypatch, cpus, workers, threads, expected):
    monkeypatch.setattr("os.cpu_count", lambda: cpus)
    assert ServeSettings(workers=workers, threads=threads).threads_per_worker() == expected


@pytest.mark.parametrize(("settings", "compiled"), [
    ({}, True),  # transduce's search on a CPU in float32, batched: compiled unless told
    ({"continuous_batching": True}, True),  # sentences join the compiled search's steps
    ({"continuous_batching": True, "batching": False}, True),
    ({"engine": "ctranslate2"}, False), ({"dtype": "int8"}, False),
    ({"dtype": "bfloat16"}, False), ({"compile": False}, False),
    ({"compile": True, "dtype": "bfloat16"}, True)])
def test_a_server_compiles_where_that_pays(settings, compiled):
    assert ServeSettings(device="cpu", **settings).compiles() == compiled


def test_continuous_batching_on_a_gpu_is_not_compiled(monkeypatch):
    """A GPU's compiled steps replay CUDA graphs, which no sentence can join: continuous
    batching there searches eagerly, and refuses --compile in one line."""
    import torch

    monkeypatch.setattr("transduce.runtime.resolve_device", lambda name: torch.device("cuda"))
    assert ServeSettings().compiles()  # batches of requests: CUDA graphs
    assert not ServeSettings(continuous_batching=True).compiles()
    with pytest.raises(UserError, match="--continuous-batching on a GPU .* --no-compile"):
        ServeSettings(continuous_batching=True, compile=True).compiles()


def test_serve_compiles_unless_told_not_to(monkeypatch):
    from transduce.serve_command import settings_of

    monkeypatch.delenv("TRANSDUCE_SERVE_COMPILE", raising=False)
    parser = build_parser()
    assert settings_of(parser.parse_args(["serve", "--model", "RUN"])).compile is None
    assert settings_of(parser.parse_args(["serve", "--model", "RUN", "--no-compile"])
                       ).compile is False


def test_models_load_on_a_thread_that_ends_with_the_loading(run_dir, monkeypatch):
    """A server's search thread is then its only thread with PyTorch's CPU threads (see
    transduce.runtime.in_passing_thread); a loading error still reaches the caller."""
    from transduce.serve import models

    loaders, load = [], models.engines.load

    def recorded(*args, **kwargs):
        loaders.append(threading.current_thread())
        return load(*args, **kwargs)
    monkeypatch.setattr(models.engines, "load", recorded)
    [served] = models.load_models([ModelSpec(run_dir)])
    assert served.translator.translate(["seven"])
    [loader] = loaders
    assert loader is not threading.current_thread() and not loader.is_alive()
    with pytest.raises(UserError, match="missing"):
        models.load_models([ModelSpec(run_dir.parent / "missing")])


@pytest.mark.parametrize("continuous", [False, True])
def test_every_model_of_a_server_searches_on_one_thread(translator, monkeypatch, continuous):
    """Two pairs, two batchers (or continuous batchers, stepped by one `Stepper`): their
    searches on the same thread, not the caller's."""
    from transduce.decoding.continuous import ContinuousSearch

    expected = translator.translate(["seven"])
    searching = set()
    owner, name = (ContinuousSearch, "step") if continuous else (translator,
                                                                 "translate_detailed")
    original = getattr(owner, name)

    def recorded(*args, **kwargs):
        searching.add(threading.current_thread())
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, recorded)
    service = Service([ServedModel("en", "de", translator), ServedModel("en", "fr", translator)],
                      ServeSettings(compile=False, continuous_batching=continuous))

    async def main():
        service.start()
        try:
            return await asyncio.gather(*(
                service.translate(service.model("en", target), ["seven"],
                                  service.search(service.model("en", target)))
                for target in ("de", "fr")))
        finally:
            await service.stop()
    assert [[t.text for t in found] for found in asyncio.run(main())] == [expected] * 2
    [thread] = searching
    assert thread is not threading.current_thread()
    assert not thread.is_alive() or not continuous  # the stepper's thread ends with its last
