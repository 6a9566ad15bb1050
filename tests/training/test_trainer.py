import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from transduce.config import load_config
from transduce.errors import UserError
from transduce.runs import checkpoint as ckpt
from transduce.training.start import resume_run, start_run
from transduce.training.trainer import TrainingError

FAST = ["model.preset=tiny", "model.d_model=32", "model.d_ff=64", "model.n_heads=2",
        "model.n_encoder_layers=2", "model.n_decoder_layers=2", "model.dropout=0.1",
        "data.dataset=numbers", "data.vocab_size=300", "data.numbers_train_size=600",
        "data.max_tokens=600", "data.max_length_ratio=9", "train.lr_schedule=inverse_sqrt",
        "train.lr=0.003", "train.warmup=10", "train.validate_every=0", "train.bleu=false",
        "train.log_every=5", "train.clip_norm=1.0"]


def _config(*extra):
    return load_config(overrides=[*FAST, *extra])


def _weights(run_dir, name=None):
    path = (ckpt.checkpoint_dir(run_dir) / name / ckpt.WEIGHTS if name
            else ckpt.latest_checkpoint(run_dir) / ckpt.WEIGHTS)
    return load_file(str(path))


@pytest.mark.parametrize("bpe_dropout", [0.0, 0.1])
def test_resume_ends_with_bit_identical_parameters(tmp_path, bpe_dropout):
    straight = start_run(_config("train.max_updates=40", "train.validate_every=20",
                               f"data.bpe_dropout={bpe_dropout}"), tmp_path / "a")
    straight.train()
    assert straight.progress.epoch >= 1  # the resumed part crosses into a new epoch
    segmented = straight.epochs.epoch(1)[0].tgt_lengths
    assert (segmented != straight.data.train.tgt_lengths).any() == (bpe_dropout > 0)
    first = start_run(_config("train.max_updates=20", "train.validate_every=20",
                            f"data.bpe_dropout={bpe_dropout}"), tmp_path / "b")
    first.train()
    resumed = resume_run(tmp_path / "b", ["train.max_updates=40"])
    assert resumed.progress.update == 20
    resumed.train()
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    sa = torch.load(ckpt.latest_checkpoint(tmp_path / "a") / ckpt.STATE, weights_only=False)
    sb = torch.load(ckpt.latest_checkpoint(tmp_path / "b") / ckpt.STATE, weights_only=False)
    assert sa["progress"]["epoch"] == sb["progress"]["epoch"]
    assert sa["progress"]["batch_in_epoch"] == sb["progress"]["batch_in_epoch"]


def test_accumulating_k_batches_equals_one_k_times_larger_batch(tmp_path):
    trainer = start_run(_config("model.dropout=0.0"), tmp_path / "acc")
    model = trainer.model
    batches = [b for _, b in zip(range(3), trainer.epochs.stream(trainer.progress), strict=False)]
    loss, tokens = trainer.accumulate_gradients(batches)
    accumulated = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    def pad(t, width):
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=1)

    width_src = max(b.src.shape[1] for b in batches)
    width_tgt = max(b.tgt_in.shape[1] for b in batches)
    big = type(batches[0])(
        torch.cat([pad(b.src, width_src) for b in batches]),
        torch.cat([pad(b.tgt_in, width_tgt) for b in batches]),
        torch.cat([pad(b.tgt_out, width_tgt) for b in batches]),
        *(torch.cat([getattr(b, f) for b in batches])
          for f in ("src_lengths", "tgt_lengths", "ids")))
    big_loss, big_tokens = trainer.accumulate_gradients([big])
    assert big_tokens == tokens
    assert big_loss == pytest.approx(loss, rel=1e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, accumulated[name], atol=1e-6, rtol=1e-4)


def test_r_drop_without_dropout_is_plain_training(tmp_path):
    """Without dropout the two passes agree, so the KL term and its gradient vanish: R-Drop's
    loss and gradients equal plain training's. With dropout the passes differ and it adds."""
    plain = start_run(_config("model.dropout=0.0"), tmp_path / "plain")
    batches = [b for _, b in zip(range(2), plain.epochs.stream(plain.progress), strict=False)]
    loss, tokens = plain.accumulate_gradients(batches)
    grads = {n: p.grad.clone() for n, p in plain.model.named_parameters()}
    twice = start_run(_config("model.dropout=0.0", "train.rdrop_alpha=5"), tmp_path / "twice")
    twice.model.load_state_dict(plain.model.state_dict())
    r_loss, r_tokens = twice.accumulate_gradients(batches)
    assert r_tokens == tokens  # tokens/s counts each target token once
    assert r_loss == pytest.approx(loss, rel=1e-5)
    for name, param in twice.model.named_parameters():
        torch.testing.assert_close(param.grad, grads[name], atol=1e-6, rtol=1e-4)
    noisy = start_run(_config("model.dropout=0.3", "train.rdrop_alpha=5"), tmp_path / "noisy")
    noisy.model.load_state_dict(plain.model.state_dict())
    no_kl = start_run(_config("model.dropout=0.3", "train.rdrop_alpha=1e-9"), tmp_path / "no_kl")
    no_kl.model.load_state_dict(plain.model.state_dict())
    torch.manual_seed(0)
    base_loss, _ = no_kl.accumulate_gradients(batches)
    torch.manual_seed(0)
    noisy_loss, _ = noisy.accumulate_gradients(batches)
    assert noisy_loss > base_loss  # the same dropout masks: the difference is alpha x KL > 0


@pytest.mark.parametrize("native", [False, True])
def test_auto_precision_trains_as_bf16_where_native_else_as_fp32(tmp_path, monkeypatch, native):
    monkeypatch.setattr("transduce.training.devices.native_bf16", lambda device: native)
    auto = start_run(_config("model.dropout=0.0", "train.precision=auto"), tmp_path / "auto")
    expected = "bf16" if native else "fp32"
    assert auto.precision == expected
    same = start_run(_config("model.dropout=0.0", f"train.precision={expected}"), tmp_path / "same")
    other_precision = "fp32" if native else "bf16"
    other = start_run(_config("model.dropout=0.0", f"train.precision={other_precision}"),
                      tmp_path / "other")
    batches = [b for _, b in zip(range(2), auto.epochs.stream(auto.progress), strict=False)]
    grads = {}
    for name, trainer in (("auto", auto), ("same", same), ("other", other)):
        trainer.model.load_state_dict(auto.model.state_dict())
        trainer.accumulate_gradients(batches)
        grads[name] = [p.grad for p in trainer.model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(grads["auto"], grads["same"], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(grads["auto"], grads["other"], strict=True))


def test_bf16_without_native_support_warns_and_names_the_key(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("transduce.training.devices.native_bf16", lambda device: False)
    with caplog.at_level("WARNING"):
        trainer = start_run(_config("train.precision=bf16"), tmp_path / "bf16")
    assert trainer.precision == "bf16"  # as asked, only warned
    assert "train.precision=bf16" in caplog.text and "train.precision=auto" in caplog.text


def test_nan_updates_are_skipped_then_the_run_stops_clearly(tmp_path, monkeypatch):
    trainer = start_run(_config("train.max_updates=20", "train.max_bad_updates=3"),
                        tmp_path / "nan")
    real_features = trainer.model.features  # the decoder states the loss projects
    calls = {"n": 0}

    def sometimes_nan(src, tgt):
        calls["n"] += 1
        hidden = real_features(src, tgt)
        return hidden * float("nan") if calls["n"] in (2,) or calls["n"] >= 5 else hidden

    monkeypatch.setattr(trainer.model, "features", sometimes_nan)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with pytest.raises(TrainingError, match="not finite 3 updates in a row"):
        trainer.train()
    # forward passes 1, 3 and 4 made updates; 2 was skipped, and 5, 6, 7 in a row stopped it
    assert trainer.progress.update == 3
    assert trainer.progress.skipped_updates == 4
    assert all(p.isfinite().all() for p in trainer.model.parameters())
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


def test_a_tiny_model_learns_number_words(tmp_path):
    trainer = start_run(_config("train.max_updates=80", "train.log_every=10"), tmp_path / "learn")
    trainer.train()
    lines = (tmp_path / "learn" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(x)["train_loss"] for x in lines if '"train"' in x]
    assert losses[-1] < 0.6 * losses[0]
    valid = trainer.validate()
    assert valid.loss < losses[0]


def test_a_lowercasing_run_scores_against_lowercased_references_and_resumes_so(tmp_path):
    words = ["Ein Hund", "Der Mann", "Eine FRAU", "Zwei Kinder", "Ein Auto"] * 40
    (tmp_path / "t.src").write_text("".join(f"{w} {i}\n" for i, w in enumerate(words)))
    (tmp_path / "t.tgt").write_text("".join(f"{w.upper()} {i}\n" for i, w in enumerate(words)))
    (tmp_path / "v.tsv").write_text("A Dog\tEin Hund\nThe MAN\tDer Mann\n")
    files = ["data.dataset=null", f"data.train_src={tmp_path / 't.src'}",
             f"data.train_tgt={tmp_path / 't.tgt'}", f"data.valid_tsv={tmp_path / 'v.tsv'}",
             "data.lowercase=true", "train.max_updates=2"]
    trainer = start_run(_config(*files), tmp_path / "run")
    assert trainer.references() == ["ein hund", "der mann"]
    trainer.train()
    resumed = resume_run(tmp_path / "run", ["train.max_updates=3"])
    assert resumed.data.tokenizers.lowercase
    assert resumed.references() == ["ein hund", "der mann"]


def test_run_directory_contents_and_refusal_to_overwrite(tmp_path):
    run = tmp_path / "run"
    start_run(_config("train.max_updates=3", "train.bleu=true", "train.validate_every=3",
                    "data.numbers_train_size=200"), run).train()
    for name in ("config.yaml", "train.log", "metrics.jsonl", "tokenizer.json"):
        assert (run / name).is_file(), name
    assert (ckpt.checkpoint_dir(run) / "best").read_text().strip() == "update_0000003"
    assert any((run / "tensorboard").iterdir())
    assert load_config(run / "config.yaml").train.max_updates == 3
    log = (run / "train.log").read_text()
    assert "update 3: valid loss" in log and ", TER " in log
    assert log.count("validation scores: BLEU nrefs:1|case:mixed|eff:no|tok:13a") == 1
    assert "chrF nrefs:1|case:mixed" in log and "TER nrefs:1|case:mixed|tok:tercom" in log
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    ter = [r["valid_ter"] for r in rows if "valid_ter" in r]
    assert len(ter) == 1 and ter[0] >= 0
    with pytest.raises(ValueError, match="already holds a run"):
        start_run(_config("train.max_updates=3"), run).train()


def test_average_of_checkpoints_is_their_mean(tmp_path):
    run = tmp_path / "avg"
    start_run(_config("train.max_updates=6", "train.validate_every=2",
                    "train.keep_checkpoints=5"), run).train()
    paths = ckpt.update_checkpoints(run)
    assert [p.name for p in paths] == ["update_0000002", "update_0000004", "update_0000006"]
    out = ckpt.average_checkpoints(paths[-2:], ckpt.checkpoint_dir(run) / "averaged")
    averaged = load_file(str(out / ckpt.WEIGHTS))
    a, b = (load_file(str(p / ckpt.WEIGHTS)) for p in paths[-2:])
    for key in averaged:
        torch.testing.assert_close(averaged[key], (a[key] + b[key]) / 2)
    assert ckpt.model_checkpoint(run) == out / ckpt.WEIGHTS


KILL_SCRIPT = """
import sys, os, torch
from transduce.runs import checkpoint as ckpt
from transduce.model import ModelConfig, Transformer
model = Transformer(ModelConfig.preset("tiny", src_vocab_size=3000, tgt_vocab_size=3000))
ckpt.save_checkpoint(sys.argv[1], "update_0000001", model, {"step": 1})
print("first saved", flush=True)
i = 2
while True:  # keep writing checkpoints until killed
    state = {"step": i, "padding": torch.zeros(2_000_000)}  # a slower write, to land a kill in
    ckpt.save_checkpoint(sys.argv[1], f"update_{i:07d}", model, state, keep=2)
    i += 1
"""


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.45])
def test_sigkill_while_writing_leaves_a_loadable_checkpoint(tmp_path, delay):
    run = tmp_path / "kill"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(run)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "first saved"
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    latest = ckpt.latest_checkpoint(run)
    assert latest is not None
    state = torch.load(latest / ckpt.STATE, weights_only=False)
    assert state["step"] == int(latest.name.split("_")[1])
    assert load_file(str(latest / ckpt.WEIGHTS))


def test_ctrl_c_writes_a_checkpoint_and_the_run_resumes(tmp_path):
    run = tmp_path / "int"
    script = ("import sys; from transduce.cli import main; sys.exit(main(sys.argv[1:]))")
    cmd = [sys.executable, "-c", script, "train", "--run-dir", str(run),
           *FAST, "train.max_updates=100000", "train.log_every=1"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "update 3:" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    latest = ckpt.latest_checkpoint(run)
    assert latest is not None and int(latest.name.split("_")[1]) >= 3
    resumed = resume_run(run, ["train.max_updates=" + str(int(latest.name[7:]) + 2)])
    resumed.train()
    assert resumed.progress.update == int(latest.name[7:]) + 2


def test_max_time_stops_with_a_checkpoint(tmp_path):
    trainer = start_run(_config("train.max_updates=100000", "train.max_time=1.5"), tmp_path / "t")
    trainer.train()
    assert 1.5 <= trainer.progress.elapsed < 30
    assert ckpt.latest_checkpoint(tmp_path / "t").name == f"update_{trainer.progress.update:07d}"


def test_patience_stops_when_validation_stops_improving(tmp_path, monkeypatch):
    trainer = start_run(_config("train.max_updates=100", "train.validate_every=2",
                              "train.patience=2"), tmp_path / "p")
    losses = iter([3.0, 2.0, 2.5, 2.4, 1.0, 1.0])

    from transduce.training.validate import Validation

    monkeypatch.setattr(trainer, "validate",
                        lambda model=None: Validation(next(losses), nll=0.0, bleu=None))
    trainer.train()
    assert trainer.progress.update == 8  # best at update 4, no better at 6 and 8: stop
    assert (ckpt.checkpoint_dir(tmp_path / "p") / "best").read_text().strip() == "update_0000004"


def test_python_api_trains_from_a_dict_and_resumes(tmp_path):
    import transduce

    config = load_config(overrides=FAST).to_dict()
    progress = transduce.train(config, tmp_path / "api", ["train.max_updates=2"])
    assert progress.update == 2
    assert transduce.resume(tmp_path / "api", ["train.max_updates=4"]).update == 4


def test_named_checkpoint_resolves_names_pointers_and_paths(tmp_path):
    run = tmp_path / "named"
    start_run(_config("train.max_updates=4", "train.validate_every=2"), run).train()
    root = ckpt.checkpoint_dir(run)
    assert ckpt.named_checkpoint(run, "update_0000002") == root / "update_0000002" / ckpt.WEIGHTS
    assert ckpt.named_checkpoint(run, "latest") == root / "update_0000004" / ckpt.WEIGHTS
    assert ckpt.named_checkpoint(run, "best").parent.name in ("update_0000002", "update_0000004")
    assert ckpt.named_checkpoint(run, str(root / "update_0000002")) == \
        root / "update_0000002" / ckpt.WEIGHTS
    kept = "update_0000002, update_0000004"
    with pytest.raises(UserError, match=rf"no checkpoint 'update_9' \(kept: {kept}"):
        ckpt.named_checkpoint(run, "update_9")


def test_bidirectional_epochs_train_each_pair_both_ways_then_forward_alone(tmp_path):
    trainer = start_run(_config("data.bidirectional_epochs=2"), tmp_path / "bit")
    forward = trainer.data.train
    for epoch, ways in ((0, 2), (1, 2), (2, 1)):
        pairs, batches = trainer.epochs.epoch(epoch)
        assert len(pairs) == ways * len(forward)
        seen = sorted(i for ids in batches for i in ids.tolist())
        assert seen == list(range(len(pairs)))  # each pair, and each reversal, once
    pairs, _ = trainer.epochs.epoch(0)
    n = len(forward)
    for i in (0, n // 2, n - 1):
        assert pairs.src(n + i).tolist() == forward.tgt(i).tolist()
        assert pairs.tgt(n + i).tolist() == forward.src(i).tolist()
        assert pairs.src(i).tolist() == forward.src(i).tolist()


def test_bidirectional_training_resumes_bit_identically(tmp_path):
    bit = ["data.bidirectional_epochs=1", "train.validate_every=30"]
    straight = start_run(_config("train.max_updates=90", *bit), tmp_path / "a")
    straight.train()
    assert straight.progress.epoch >= 1  # crosses from both ways into forward alone
    start_run(_config("train.max_updates=30", *bit), tmp_path / "b").train()
    resume_run(tmp_path / "b", ["train.max_updates=90"]).train()
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for key in a:
        assert torch.equal(a[key], b[key]), key
