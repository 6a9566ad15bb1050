"""Our own API: POST /v1/translate (n-best with scores, pieces, cross-attention), GET /v1/models."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from transduce.decoding.glossary import Glossary
from transduce.decoding.translator import Translation
from transduce.errors import UserError
from transduce.serve.models import language_name
from transduce.serve.service import ApiError, Service

MAX_NBEST = 16
MAX_BEAM = 64
MAX_GLOSSARY = 1000  # entries of a request's glossary
MAX_TERM = 200  # characters of a glossary term


class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: list[str] = Field(description="Sentences, each translated on its own", max_length=1024)
    source: str | None = Field(None, description="Source language code (optional with one "
                               "model)")
    target: str | None = Field(None, description="Target language code (optional with one "
                               "model)")
    beam_size: int | None = Field(None, ge=1, le=MAX_BEAM,
                                  description="Default: the server's --beam-size, else the model's")
    nbest: int = Field(1, ge=1, le=MAX_NBEST, description="Translations per sentence, best "
                       "first")
    attention: bool = Field(False, description="Also the cross-attention of the best, heads "
                            "averaged, with the source and target pieces")
    layer: int | None = Field(None, description="Only this decoder layer's attention (from 0; "
                              "-1 the last); default all layers")
    alignments: bool = Field(False, description="Also the best translation's word alignments: "
                             "[source word, target word] pairs, from 0 over whitespace-separated "
                             "words, from the penultimate decoder layer's cross-attention")
    scores: bool = Field(False, description="Also the best translation's confidence (the "
                         "geometric mean of its tokens' probabilities) and each token's "
                         "probability, with the target pieces")
    prefix: list[str] | None = Field(None, max_length=1024, description="A target prefix for "
                                     "each text (\"\" for none): its translation starts with "
                                     "it, and the search goes on from there")
    glossary: dict[str, str] | None = Field(
        None, max_length=MAX_GLOSSARY, description="Source term -> target term: where a text "
        "holds a source term (whole words; in any case if written in lower case, else as "
        "written), its translations contain the target term (lexically constrained beam "
        "search)")
    api_key: str | None = None

    @field_validator("glossary")
    @classmethod
    def _terms(cls, value):
        for term in [t for pair in (value or {}).items() for t in pair]:
            if not term.strip() or len(term) > MAX_TERM:
                raise ValueError(f"a term must have 1 to {MAX_TERM} characters, got {term!r:.60}")
        return value

    @field_validator("text", "source", "target", "prefix", "glossary", "api_key")
    @classmethod
    def _unicode(cls, value):
        """A lone surrogate ("\ud800") is valid JSON but not text: refused, not searched."""
        texts = [t for pair in value.items() for t in pair] if isinstance(value, dict) else \
            value if isinstance(value, list) else [value]
        for text in texts:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("not valid Unicode (a lone surrogate)") from None
        return value


class Hypothesis(BaseModel):
    text: str
    score: float


class TermCheck(BaseModel):
    source: str = Field(description="The source term as the text has it")
    target: str
    found: bool = Field(description="Whether the translation holds the target term")
    aligned: bool | None = Field(None, description="With alignments: whether the target "
                                 "term's words are aligned with the source term's")
    source_words: list[int]
    target_words: list[int] = Field(description="Its first occurrence's; [] when not found")


class SentenceTranslation(BaseModel):
    text: str
    nbest: list[Hypothesis]
    source_pieces: list[str] | None = None
    target_pieces: list[str] | None = None
    attention: list[list[list[float]]] | None = Field(
        None, description="(layers, target pieces, source pieces): the weight each target "
        "piece gives each source piece, averaged over heads")
    layers: list[int] | None = None
    alignments: list[tuple[int, int]] | None = Field(
        None, description="With alignments: [source word, target word] pairs, sorted")
    confidence: float | None = Field(
        None, description="With scores: the geometric mean of the best translation's token "
        "probabilities (<eos> included), in [0, 1]; low: a translation not to trust")
    probabilities: list[float] | None = Field(
        None, description="With scores: each target piece's probability, as target_pieces")
    terms: list[TermCheck] | None = Field(
        None, description="With a glossary: each source term of the text, and where its "
        "target term is in the translation (words counted from 0 over whitespace)")


class TranslateResponse(BaseModel):
    model: str
    source: str
    target: str
    translations: list[SentenceTranslation]


class ModelInfo(BaseModel):
    name: str
    source: str
    target: str
    source_name: str
    target_name: str
    beam_size: int
    parameters: int
    layers: int


def router(service: Service) -> APIRouter:
    api = APIRouter(prefix="/v1", tags=["transduce"])

    @api.get("/models", summary="The models served")
    async def models() -> list[ModelInfo]:
        return [ModelInfo(name=m.name, source=m.source, target=m.target,
                          source_name=language_name(m.source), target_name=language_name(m.target),
                          beam_size=service.search(m).decode.beam_size,
                          parameters=m.translator.model.num_parameters(),
                          layers=m.translator.model.config.n_decoder_layers)
                for m in service.models.values()]

    @api.post("/translate", summary="Translate sentences: n-best, scores, attention",
              responses={status: {"description": text, "content": {"application/json": {
                  "schema": {"type": "object", "properties": {"error": {"type": "string"}}}}}}
                  for status, text in ((400, "Invalid request"), (403, "No valid API key"),
                                       (429, "Slow down"), (503, "Timed out"))})
    async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        await service.admit(request, body.api_key)
        model = _model(service, body.source, body.target)
        limit = service.settings.max_chars
        for text in body.text:  # each text on its own, as LibreTranslate's routes count
            if limit != -1 and len(text) > limit:
                raise ApiError(400, f"Invalid request: request ({len(text)}) exceeds text limit "
                                    f"({limit})")
        for n, text in enumerate(body.text):  # a sentence each: one too long is not truncated
            if not model.translator.fits(text):
                raise ApiError(400, f"Invalid request: text[{n}] is longer than the model's "
                                    f"{model.translator.model.config.max_positions - 1} tokens; "
                                    "cut it into sentences (POST /translate does)")
        layers = model.translator.model.config.n_decoder_layers
        if body.layer is not None and not -layers <= body.layer < layers:
            raise ApiError(400, f"Invalid request: layer {body.layer}: the model has {layers} "
                                "decoder layers")
        if body.prefix is not None and len(body.prefix) != len(body.text):
            raise ApiError(400, f"Invalid request: {len(body.prefix)} prefixes for "
                                f"{len(body.text)} texts (one each, \"\" for none)")
        if body.beam_size is not None and body.nbest > body.beam_size:
            raise ApiError(400, f"Invalid request: nbest {body.nbest} exceeds beam_size "
                                f"{body.beam_size}")
        search = service.search(model, beam_size=body.beam_size, nbest=body.nbest,
                                attention=body.attention or body.alignments, scores=body.scores)
        terms = glossary = None
        if body.glossary:
            try:
                glossary = Glossary.of(body.glossary)
            except UserError as error:
                raise ApiError(400, f"Invalid request: {error}") from None
            terms = [glossary.terms(text) for text in body.text]
        found = await service.translate(model, body.text, search, request, body.prefix, terms)
        translations = []
        for t in found:
            links = model.translator.alignments(t) if body.alignments else None
            result = _sentence(t, body.layer, attention=body.attention, alignments=links)
            if glossary is not None:
                result.terms = [TermCheck(**vars(c)) for c in glossary.check(t.source, t.text,
                                                                             links)]
            translations.append(result)
        return TranslateResponse(model=model.name, source=model.source, target=model.target,
                                 translations=translations)

    return api


def _model(service: Service, source: str | None, target: str | None):
    if source is None and target is None and len(service.models) == 1:
        return next(iter(service.models.values()))
    if not source or not target:
        raise ApiError(400, "Invalid request: give source and target (this server has "
                            f"{', '.join(m.name for m in service.models.values())})")
    return service.model(source.lower(), target.lower())


def _sentence(t: Translation, layer: int | None, *, attention: bool,
              alignments: list[tuple[int, int]] | None = None) -> SentenceTranslation:
    result = SentenceTranslation(text=t.text, nbest=[Hypothesis(text=text, score=score)
                                                     for text, score in t.nbest],
                                 alignments=alignments)
    if attention and t.attention is not None:
        weights = t.attention.mean(dim=1)  # (L, T, S): heads averaged
        chosen = list(range(len(weights))) if layer is None else [layer % len(weights)]
        result.attention = [weights[i].tolist() for i in chosen]
        result.layers = chosen
        result.source_pieces, result.target_pieces = t.src_pieces, t.tgt_pieces
    if t.scores is not None:
        result.confidence = t.scores.confidence
        result.probabilities = [math.exp(p) for p in t.scores.token_log_probs]
        result.target_pieces = t.tgt_pieces
    return result
