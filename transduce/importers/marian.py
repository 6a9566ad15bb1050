"""A Marian model (OPUS-MT, as the Hugging Face hub has it) as a transduce run directory.

    transduce import marian Helsinki-NLP/opus-mt-en-de --out runs/opus-en-de
    transduce import marian ./opus-mt-en-de --out runs/opus-en-de     # a downloaded copy

Marian's Transformer is the paper's post-norm one with these differences, each carried exactly:
its activation is swish (SiLU) in OPUS-MT; the output projection has a bias
(`final_logits_bias`); the sinusoidal table puts all sines before all cosines (we interleave
them as the paper writes PE(pos, 2i), PE(pos, 2i+1)), which a permutation of the residual
stream's coordinates turns into ours without changing any output (see `transduce.export.marian`);
the special ids are the vocabulary's (`</s>` 0, `<unk>` 1, `<pad>` the last, which is also the
decoder's first input and never generated); and pieces get their ids from `vocab.json`, not from
the SentencePiece models (`transduce.data.marian_tokenizer`). A feature we do not carry is an
error naming its field in config.json.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from transduce.config import Config, ModelSection
from transduce.data.config import DataConfig
from transduce.data.marian_tokenizer import MarianTokenizer
from transduce.data.tokenizer import Tokenizers
from transduce.decoding.config import DecodeConfig
from transduce.errors import UserError
from transduce.export.marian import EARLY_STOPPING, convert
from transduce.model.config import ModelConfig
from transduce.model.transformer import Transformer
from transduce.runs import checkpoint as ckpt
from transduce.runs.claim import NewRun, entries

CHECKPOINT = "imported"  # the checkpoint an imported run's weights are in
_ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}


def import_marian(source: str | Path, out_dir: Path, *, src_lang: str | None = None,
                  tgt_lang: str | None = None) -> Path:
    """Write the run directory `out_dir` (absent or empty) for the Marian model `source`: a
    local OPUS-MT directory or a Hugging Face hub id. Its languages are `src_lang` and
    `tgt_lang`, or what the model says (`languages`). Returns `out_dir`."""
    out_dir = Path(out_dir)
    claim = NewRun(out_dir, what="--out", command="transduce import", refuse=_refuse_unless_empty)
    tmp = None
    try:  # the run is written beside, then moved in: the checkpoint last, so that the run is
        # whole when it has one; a failure takes away what the import made
        directory = _local_copy(source)
        languages = model_languages(source, directory, src_lang, tgt_lang)
        hf_config, hf = _read_model(directory)
        tokenizers = _read_tokenizers(directory, hf_config)
        model_config = _model_config(hf_config, tokenizers)
        model = Transformer(model_config).eval()
        ckpt.load_weights(model, Path(directory), state=_weights(hf, model_config))
        config = Config(model=ModelSection.of(model_config),
                        data=DataConfig(src_lang=languages[0], tgt_lang=languages[1]),
                        decode=_decode_config(directory))
        tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
        config.save(tmp / "config.yaml")
        tokenizers.save(tmp)
        (tmp / "checkpoints" / CHECKPOINT).mkdir(parents=True)
        ckpt.save_weights(model, tmp / "checkpoints" / CHECKPOINT / ckpt.WEIGHTS)
        (tmp / "checkpoints" / "latest").write_text(CHECKPOINT + "\n")
        (tmp / "imported_from.txt").write_text(f"{source}\n")
        for entry in sorted(tmp.iterdir(), key=lambda e: e.name == "checkpoints"):
            os.replace(entry, out_dir / entry.name)
    except BaseException:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
        claim.discard()
        raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        claim.lock.release()
    return out_dir


def _refuse_unless_empty(out_dir: Path, *, what: str) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or entries(out_dir)):
        raise UserError(f"{what} {out_dir}: exists and is not empty; an import writes a new run "
                        "directory")


def _local_copy(source: str | Path) -> Path:
    """`source` itself when it is a directory, else the hub's copy of the model it names."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or str(source).count("/") != 1 or str(source).startswith((".", "/")):
        raise UserError(f"{source}: not a model directory or a Hugging Face hub id "
                        "(owner/name, e.g. Helsinki-NLP/opus-mt-en-de)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError("importing from the hub needs huggingface_hub: pip install "
                        "'transduce[export]'") from None
    try:
        return Path(snapshot_download(str(source), allow_patterns=[
            "*.json", "*.spm", "*.safetensors", "pytorch_model.bin"]))
    except Exception as error:  # offline, unknown repository, refused, ...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{source}: cannot fetch it from the Hugging Face hub ({reason}); "
                        "download the model directory elsewhere (config.json, the weights, "
                        "source.spm, target.spm, vocab.json) and pass its path") from None


def _read_model(directory: Path):
    path = directory / "config.json"
    if not path.is_file():
        raise UserError(f"{directory}: no config.json; not a Hugging Face model directory")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None
    if raw.get("model_type") != "marian":
        raise UserError(f"{path}: model_type is {raw.get('model_type')!r}, not 'marian'")
    _check_supported(raw, path)
    weights = next((directory / name for name in ("model.safetensors", "pytorch_model.bin")
                    if (directory / name).is_file()), None)
    if weights is None:
        raise UserError(f"{directory}: no weights (model.safetensors or pytorch_model.bin)")
    try:
        from transformers import MarianMTModel
    except ImportError:
        raise UserError("importing a Marian model needs Hugging Face transformers: pip install "
                        "'transduce[export]'") from None
    try:
        hf = MarianMTModel.from_pretrained(str(directory), dtype=torch.float32).eval()
    except Exception as error:  # the configuration was read above: the weights are at fault
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{weights}: transformers cannot load these weights ({reason})") from None
    return raw, hf


def _check_supported(raw: dict, path: Path) -> None:
    """A field of config.json that asks for something this model does not do is an error."""
    unsupported = {
        "normalize_before": (False, "pre-norm Marian models"),
        "normalize_embedding": (False, "a LayerNorm on the embeddings"),
        "add_bias_logits": (False, "add_bias_logits"),
        "static_position_embeddings": (True, "learned position embeddings"),
        "add_final_layer_norm": (False, "a final LayerNorm"),
    }
    for name, (supported, what) in unsupported.items():
        if name in raw and bool(raw[name]) != supported:
            raise UserError(f"{path}: {name}={json.dumps(raw[name])} ({what}) is not supported")
    activation = raw.get("activation_function", "gelu")
    if activation not in _ACTIVATIONS:
        raise UserError(f"{path}: activation_function={activation!r} is not supported (only "
                        f"{', '.join(sorted(_ACTIVATIONS))})")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if raw.get(a) != raw.get(b):
            raise UserError(f"{path}: {a}={raw.get(a)} and {b}={raw.get(b)} differ; transduce "
                            "models have one value for both")


def _read_tokenizers(directory: Path, raw: dict) -> Tokenizers:
    tokenizer_config = _json(directory / "tokenizer_config.json")
    separate = bool(tokenizer_config.get("separate_vocabs", False))
    src_vocab = directory / "vocab.json"
    tgt_vocab = directory / "target_vocab.json" if separate else src_vocab
    tokens = {k: str(tokenizer_config[f"{k}_token"]) for k in ("eos", "unk", "pad")
              if isinstance(tokenizer_config.get(f"{k}_token"), str)}
    vocab = _json(tgt_vocab)
    start_id = raw.get("decoder_start_token_id", raw.get("pad_token_id"))
    start = next((p for p, i in vocab.items() if i == start_id), None)
    src = MarianTokenizer.from_files(directory / "source.spm", src_vocab, tokens=tokens,
                                     start=start)
    tgt = MarianTokenizer.from_files(directory / "target.spm", tgt_vocab, tokens=tokens,
                                     start=start)
    tokenizers = Tokenizers(src, tgt)
    specials = tokenizers.specials
    expected = {"pad_token_id": specials["pad_id"], "eos_token_id": specials["eos_id"],
                "decoder_start_token_id": specials["bos_id"]}
    for name, value in expected.items():
        if name in raw and raw[name] != value:
            raise UserError(f"{directory / 'config.json'}: {name}={raw[name]}, but the "
                            f"vocabulary's token there is {value}")
    return tokenizers


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def _model_config(raw: dict, tokenizers: Tokenizers) -> ModelConfig:
    shared = raw.get("share_encoder_decoder_embeddings", True)
    src_vocab, tgt_vocab = raw["vocab_size"], raw.get("decoder_vocab_size") or raw["vocab_size"]
    for side, tokenizer, size in (("source", tokenizers.src, src_vocab),
                                  ("target", tokenizers.tgt, tgt_vocab)):
        if tokenizer.vocab_size != size:
            raise UserError(f"config.json: the {side} vocabulary has {tokenizer.vocab_size} "
                            f"tokens, the model {size}")
    return ModelConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, d_model=raw["d_model"],
        n_heads=raw["encoder_attention_heads"], d_ff=raw["encoder_ffn_dim"],
        n_encoder_layers=raw["encoder_layers"], n_decoder_layers=raw["decoder_layers"],
        dropout=raw.get("dropout", 0.1), attention_dropout=raw.get("attention_dropout", 0.0),
        activation_dropout=raw.get("activation_dropout", 0.0),
        activation=_ACTIVATIONS[raw.get("activation_function", "gelu")],
        max_positions=raw.get("max_position_embeddings", 512), positional="sinusoidal",
        norm_first=False, share_embeddings=shared,
        tie_output=raw.get("tie_word_embeddings", True), output_bias=True,
        scale_embedding=raw.get("scale_embedding", False), layer_norm_eps=1e-5,
        **tokenizers.specials)


@torch.no_grad()
def _weights(hf, config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict from the MarianMTModel `hf` (transduce.export.marian's name table, read
    the other way): the residual stream permuted into our sinusoids' layout."""
    state = convert(hf.state_dict(), config, to_theirs=False)
    return {k: v.detach().float().contiguous().clone() for k, v in state.items()}


_CODE = r"[a-z]{2,3}(?:[_-][A-Za-z0-9]+)?"  # en, deu, pt_br, zh-Hans: an ISO 639 code
_NAMED = re.compile(rf"opus-mt-(?:tc-(?:big|base)-)?({_CODE})-({_CODE})")


def model_languages(source: str | Path, directory: Path, src_lang: str | None,
                    tgt_lang: str | None) -> tuple[str, str]:
    """The (source, target) language codes of a Marian model: those given, else those its
    tokenizer_config.json names (source_lang, target_lang), else those of its name
    (Helsinki-NLP/opus-mt-en-de, a directory opus-mt-en-de); a UserError asking for them when
    none of these says (a multilingual model, en-ROMANCE, names groups, not languages)."""
    config = _json(directory / "tokenizer_config.json")
    named = _NAMED.fullmatch(Path(str(source)).name) or _NAMED.fullmatch(directory.name)
    found = [src_lang or config.get("source_lang") or (named and named[1]),
             tgt_lang or config.get("target_lang") or (named and named[2])]
    for code, flag in zip(found, ("--src-lang", "--tgt-lang"), strict=True):
        if code and not re.fullmatch(_CODE, str(code)):
            raise UserError(f"{flag} {code}: not a language code (en, de, pt_br, ...)")
    if not all(found):
        raise UserError(f"{source}: the model does not say which languages it translates; "
                        "name them: --src-lang CODE --tgt-lang CODE (e.g. --src-lang en "
                        "--tgt-lang de)")
    return str(found[0]), str(found[1])


def _decode_config(directory: Path) -> DecodeConfig:
    """The model's own search settings (generation_config.json), in our terms: Hugging Face
    divides a beam's score by its length to the power length_penalty."""
    generation = _json(directory / "generation_config.json") or _json(directory / "config.json")
    # max_length counts the decoder's start token (max_new_tokens does not), and a forced </s>
    # takes the last place; min_length counts the start token too
    forced = generation.get("forced_eos_token_id") is not None
    if generation.get("max_new_tokens"):
        longest = int(generation["max_new_tokens"]) - forced
    else:
        longest = int(generation.get("max_length") or 512) - 1 - forced
    bad_words = generation.get("bad_words_ids") or []
    never = {generation.get("pad_token_id"), generation.get("decoder_start_token_id")}
    if any(len(words) != 1 or words[0] not in never for words in bad_words):
        raise UserError(f"{directory / 'generation_config.json'}: bad_words_ids={bad_words}: "
                        "only <pad> and the start token may be barred (they never are output)")
    return DecodeConfig(beam_size=int(generation.get("num_beams") or 1),
                        length_penalty=float(generation.get("length_penalty", 1.0)),
                        length_normalization="power", max_len_a=0.0, max_len_b=longest,
                        min_len=max(0, int(generation.get("min_length") or 0) - 1),
                        stopping=next((ours for ours, theirs in EARLY_STOPPING.items()
                                       if theirs == generation.get("early_stopping", False)),
                                      "early"),
                        renormalize=bool(generation.get("renormalize_logits", False)))
