"""A small OPUS-MT model built here: Hugging Face's `MarianMTModel` with OPUS-MT's real
configuration (swish, </s> 0, <unk> 1, <pad> the last id and the decoder's start, shared and
tied embeddings, static sinusoids, a non-zero final_logits_bias), random weights, and two
SentencePiece models trained here with one joint vocab.json, saved as the hub has it."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import sentencepiece as spm
import torch

WORDS_EN = ("the a small big red dog cat man woman child runs walks sits on in under house "
            "street park water ball green blue two three café naïve über").split()
WORDS_DE = ("der die das ein eine kleine große rote hund katze mann frau kind läuft geht sitzt "
            "auf in unter haus straße park wasser ball grün blau zwei drei größer schön").split()


def sentences(words, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
        if rng.random() < 0.3:
            text += f" {rng.randint(0, 2000)}"
        out.append(text.capitalize() + rng.choice([".", "!", "?", ""]))
    return out


def _spm(texts: list[str], vocab_size: int) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model,
                                   vocab_size=vocab_size, model_type="unigram",
                                   character_coverage=1.0, minloglevel=2,
                                   unk_id=0, bos_id=-1, eos_id=1, pad_id=-1)
    return model.getvalue()


def make_opus_mt(directory: Path, *, seed: int = 0, d_model: int = 32, layers: int = 2,
                 heads: int = 4, d_ff: int | None = None, vocab_size: int | None = None,
                 language_codes: tuple[str, ...] = (), safetensors: bool = True) -> Path:
    """An OPUS-MT-shaped model directory: config.json, weights, source.spm, target.spm,
    vocab.json, tokenizer_config.json, generation_config.json. `vocab_size` fills vocab.json
    with pieces no SentencePiece model makes, to a real model's size (Helsinki-NLP/opus-mt-en-de:
    d_model 512, 6 layers, 8 heads, d_ff 2048, vocab_size 58101)."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    src_proto = _spm(sentences(WORDS_EN, 400, seed), 90)
    tgt_proto = _spm(sentences(WORDS_DE, 400, seed + 1), 100)
    (directory / "source.spm").write_bytes(src_proto)
    (directory / "target.spm").write_bytes(tgt_proto)
    pieces: list[str] = []
    for proto in (src_proto, tgt_proto):
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.vocab_size()):
            piece = sp.id_to_piece(i)
            if not sp.is_control(i) and not sp.is_unknown(i) and piece not in pieces:
                pieces.append(piece)
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in [*language_codes, *pieces]:
        vocab[piece] = len(vocab)
    while vocab_size and len(vocab) < vocab_size - 1:
        vocab[f"▁filler{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    size = len(vocab)
    pad = size - 1
    config = MarianConfig(
        vocab_size=size, decoder_vocab_size=size, d_model=d_model, encoder_layers=layers,
        decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=d_ff or 2 * d_model, decoder_ffn_dim=d_ff or 2 * d_model,
        activation_function="swish",
        max_position_embeddings=512, scale_embedding=True, dropout=0.1, attention_dropout=0.0,
        activation_dropout=0.0, pad_token_id=pad, eos_token_id=0, bos_token_id=0,
        decoder_start_token_id=pad, forced_eos_token_id=0, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, is_encoder_decoder=True, bad_words_ids=[[pad]],
        num_beams=4, max_length=512, static_position_embeddings=True,
        normalize_before=False, normalize_embedding=False, add_bias_logits=False)
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2 and "embed_positions" not in name:
                parameter.normal_(0, 0.1)
        bias = torch.randn(size) * 0.5
        bias[0] += 1.0  # </s> likely enough that random translations end
        model.final_logits_bias.copy_(bias[None])
    model.save_pretrained(directory)
    if not safetensors:  # the older hub layout, which transformers 5 no longer writes
        (directory / "model.safetensors").unlink()
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    (directory / "generation_config.json").write_text(json.dumps({  # as OPUS-MT's
        "bad_words_ids": [[pad]], "bos_token_id": 0, "decoder_start_token_id": pad,
        "eos_token_id": 0, "forced_eos_token_id": 0, "max_length": 512, "num_beams": 4,
        "pad_token_id": pad, "renormalize_logits": True}, indent=2))
    MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                    str(directory / "vocab.json"), source_lang="en",
                    target_lang="de").save_pretrained(directory)
    return directory
