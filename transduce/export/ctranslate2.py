"""Our model for CTranslate2, through its TransformersConverter and our Hugging Face export
(Marian for post-norm models, Pegasus for pre-norm ones).

Tokens our search never outputs (<pad>, <bos>) get a bias of -inf in the output projection.
CTranslate2's Marian loader follows Marian-NMT's conventions, not ours: it starts the decoder
from a zero vector (we start from the <bos> embedding) and drops a trailing <pad> row that our
vocabulary does not have; its Pegasus loader starts from <pad>. While converting, both are
replaced by one that keeps everything else (pre-norm or not, no embedding LayerNorm) and starts
from <bos> with the whole vocabulary. The run's search settings go beside the model, in
translate_options.json: `translator.translate_batch(batch, **options)` searches as the run does.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from transduce.data.tokenizer import Tokenizers
from transduce.decoding.config import DecodeConfig
from transduce.errors import UserError
from transduce.export.marian import huggingface_types, longest_output, save_huggingface
from transduce.model.transformer import Transformer


def _loader(architecture: str, pre_norm: bool):
    try:
        from ctranslate2.converters import transformers as ct2
    except ImportError:
        raise UserError("exporting to CTranslate2 needs ctranslate2 and transformers, optional "
                        "dependencies: pip install 'transduce[export]'") from None

    class OurLoader(ct2.MarianMTLoader):
        @property
        def architecture_name(self):
            return architecture

        def get_model_spec(self, model):
            model.config.normalize_before = pre_norm
            model.config.normalize_embedding = False
            spec = ct2.BartLoader.get_model_spec(self, model)
            never_output(spec.decoder.projection, model.generation_config.bad_words_ids or [])
            return spec

        def set_config(self, config, model, tokenizer):
            ct2.BartLoader.set_config(self, config, model, tokenizer)  # starts from <bos>
            config.bos_token = tokenizer.convert_ids_to_tokens(model.config.bos_token_id)
            config.eos_token = tokenizer.eos_token
            config.unk_token = tokenizer.unk_token

        def set_decoder(self, spec, decoder):
            ct2.BartLoader.set_decoder(self, spec, decoder)
            spec.start_from_zero_embedding = False

        def get_vocabulary(self, model, tokenizer):
            return ct2.BartLoader.get_vocabulary(self, model, tokenizer)

    return ct2, OurLoader()


def never_output(projection, bad_words_ids: list[list[int]]) -> None:
    """Give the tokens our search never outputs (<pad>, <bos>) a bias of -inf in CTranslate2's
    output projection, where it has no other way to bar them: as in our search with
    decode.renormalize, the others' probabilities are renormalised without them."""
    import numpy as np

    bias = projection.bias
    if hasattr(bias, "detach"):  # a torch tensor, as the converter takes them
        bias = bias.detach().cpu().numpy()
    if not isinstance(bias, np.ndarray):  # no bias yet
        bias = np.zeros(projection.weight.shape[0], dtype=np.float32)
    bias = bias.astype(np.float32, copy=True)
    for words in bad_words_ids:
        bias[words] = -np.inf
    projection.bias = bias


OPTIONS = "translate_options.json"  # the run's search, as translate_batch's keyword arguments


def translate_options(decode: DecodeConfig, max_positions: int) -> dict:
    """`decode` as `ctranslate2.Translator.translate_batch` keyword arguments, which a CTranslate2
    model directory has no place for (so they are written beside it, OPTIONS): its
    max_decoding_length counts the tokens before </s> (and its default, 256, runs past a model
    of fewer positions), its length_penalty divides by length ** alpha, our `power`
    normalisation. It has no a * length + b limit (the model's maximum stands for it), no `gnmt`
    normalisation and no renormalisation."""
    options = dict(beam_size=decode.beam_size,
                   max_decoding_length=longest_output(decode, max_positions),
                   min_decoding_length=decode.min_len, max_input_length=max_positions)
    if decode.length_normalization == "power":
        options["length_penalty"] = decode.length_penalty
    return options


def save_ctranslate2(model: Transformer, tokenizers: Tokenizers, out_dir: Path, *,
                     quantization: str | None = None, hf_dir: Path | None = None,
                     decode: DecodeConfig | None = None) -> Path:
    """A CTranslate2 model directory (quantization: None for fp32, "int8", ...), with the search
    settings of `decode` (or the defaults) in OPTIONS."""
    config_type, model_type = huggingface_types(model)
    ct2, loader = _loader(model_type.__name__, model.config.norm_first)
    config = config_type.__name__  # the converter picks its loader by it
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(hf_dir) if hf_dir else save_huggingface(model, tokenizers, Path(tmp) / "hf")
        original = ct2._MODEL_LOADERS[config]
        ct2._MODEL_LOADERS[config] = loader
        try:
            ct2.TransformersConverter(str(hf)).convert(str(out_dir), quantization=quantization,
                                                       force=True)
        finally:
            ct2._MODEL_LOADERS[config] = original
    options = translate_options(decode or DecodeConfig(), model.config.max_positions)
    (Path(out_dir) / OPTIONS).write_text(json.dumps(options, indent=2) + "\n")
    return Path(out_dir)
