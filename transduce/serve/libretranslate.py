"""LibreTranslate's API (as of LibreTranslate 1.9.6), so that its clients and apps work as they
are: /translate, /translate_file and /download_file, /languages, /detect, /suggest,
/frontend/settings, /health. Fields come as JSON, urlencoded or multipart; errors are
{"error": "..."} with LibreTranslate's texts and codes. Texts are translated sentence by
sentence (--no-split-sentences: line by line) and put back in their layout. One field of our own
beside theirs: /translate takes a `glossary` (source term -> target term)."""

from __future__ import annotations

import asyncio
import copy
import tempfile
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from transduce.decoding.glossary import Glossary
from transduce.documents.files import FORMATS, read_document
from transduce.documents.layout import Splitter, html_text, plain_text
from transduce.errors import UserError
from transduce.serve.models import ServedModel, language_name
from transduce.serve.service import ApiError, Service, read_fields
from transduce.serve.v1 import MAX_GLOSSARY, MAX_TERM

FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its page waits after typing

_FIELDS_BODY = {  # the OpenAPI description of the form and JSON bodies
    "requestBody": {"content": {
        media: {"schema": {"type": "object", "required": ["q", "source", "target"], "properties": {
            "q": {"description": "Text to translate (JSON: a string or a list of strings)",
                  "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
            if media == "application/json" else {"type": "string"},
            "source": {"type": "string", "description": "Source language code, or auto"},
            "target": {"type": "string", "description": "Target language code"},
            "format": {"type": "string", "enum": ["text", "html"]},
            "alternatives": {"type": "integer", "minimum": 0},
            "api_key": {"type": "string"}}}}
        for media in ("application/json", "application/x-www-form-urlencoded",
                      "multipart/form-data")}}}
_TRANSLATE_BODY = copy.deepcopy(_FIELDS_BODY)  # ... and ours beside LibreTranslate's fields
for _media, _content in _TRANSLATE_BODY["requestBody"]["content"].items():
    _content["schema"]["properties"]["glossary"] = {
        "description": "transduce's own: source term -> target term (JSON: an object; a form: "
                       "lines of source term<TAB>target term); where a text holds a source "
                       "term, its translation contains the target term",
        **({"type": "object", "additionalProperties": {"type": "string"}}
           if _media == "application/json" else {"type": "string"})}
_FILE_BODY = {"requestBody": {"content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "source", "target"], "properties": {
        "file": {"type": "string", "format": "binary",
                 "description": f"The file: {', '.join(FORMATS)}"},
        "source": {"type": "string", "description": "Source language code, or auto"},
        "target": {"type": "string", "description": "Target language code"},
        "api_key": {"type": "string"}}}}}}}
_ERRORS = {status: {"description": text, "content": {"application/json": {"schema": {
    "type": "object", "properties": {"error": {"type": "string"}}}}}}
    for status, text in ((400, "Invalid request"), (403, "Banned or no valid API key"),
                         (429, "Slow down"), (503, "Translation timed out"))}


def router(service: Service) -> APIRouter:
    api = APIRouter(tags=["LibreTranslate"])
    settings = service.settings

    @api.get("/languages", summary="Languages served, each with the targets it reaches")
    async def languages() -> list[dict]:
        return service.languages()

    @api.get("/health", summary="Whether the server is up")
    async def health() -> dict:
        return {"status": "ok"}

    @api.get("/frontend/settings", summary="Settings for LibreTranslate's web page")
    async def frontend_settings() -> dict:
        first = next(iter(service.models.values()))
        return {"charLimit": settings.max_chars, "frontendTimeout": FRONTEND_TIMEOUT_MS,
                "apiKeys": bool(service.api_keys), "keyRequired": settings.require_api_key,
                "suggestions": False, "filesTranslation": settings.files_translation,
                "supportedFilesFormat": list(FORMATS) if settings.files_translation else [],
                "language": {
                    "source": {"code": first.source, "name": language_name(first.source)},
                    "target": {"code": first.target, "name": language_name(first.target)}}}

    @api.post("/translate", summary="Translate text", responses=_ERRORS,
              openapi_extra=_TRANSLATE_BODY)
    async def translate(request: Request) -> dict:
        fields, is_json = await read_fields(request)
        await service.admit(request, fields.get("api_key"))
        q, source, target = (fields.get(name) for name in ("q", "source", "target"))
        for name, value in (("q", q), ("source", source), ("target", target)):
            if not value:
                raise ApiError(400, f"Invalid request: missing {name} parameter")
        texts = q if isinstance(q, list) else [q]
        if not all(isinstance(t, str) for t in texts):
            raise ApiError(400, "Invalid request: q must be a string or a list of strings")
        for name, value in (("source", source), ("target", target), ("format", fields.get(
                "format") or "text")):
            if not isinstance(value, str):
                raise ApiError(400, f"Invalid request: {name} must be a string")
        alternatives = _alternatives(fields.get("alternatives", 0), settings.max_alternatives)
        if not is_json:  # line ends as LibreTranslate counts them
            texts = ["\n".join(t.splitlines()) for t in texts]
        _check_size(texts, settings.max_texts, settings.max_chars)
        model = service.model(source.lower(), target.lower())
        text_format = fields.get("format") or "text"
        if text_format not in ("text", "html"):
            raise ApiError(400, f"{text_format} format is not supported")
        glossary = _glossary(fields.get("glossary"))
        translated, others = await _translate(service, request, model, texts, text_format,
                                              0 if text_format == "html" else alternatives,
                                              glossary)
        one = not isinstance(q, list)
        result: dict = {"translatedText": translated[0] if one else translated}
        if source.lower() == "auto":
            detected = {"confidence": 100.0, "language": model.source}
            result["detectedLanguage"] = detected if one else [detected] * len(texts)
        if alternatives > 0:  # none for HTML, as LibreTranslate, but the key is there
            result["alternatives"] = others[0] if one else others
        return result

    @api.post("/detect", summary="Detect the language of a text", responses=_ERRORS,
              openapi_extra=_FIELDS_BODY)
    async def detect(request: Request) -> list[dict]:
        fields, _ = await read_fields(request)
        await service.admit(request, fields.get("api_key"))
        q = fields.get("q")
        if not q:
            raise ApiError(400, "Invalid request: missing q parameter")
        if not isinstance(q, str | list):
            raise ApiError(400, "Invalid request: q must be a string or a list of strings")
        sources = sorted({source for source, _ in service.models})
        if len(sources) > 1:
            raise ApiError(400, f"Invalid request: this server translates from "
                                f"{', '.join(sources)} and does not detect languages")
        return [{"confidence": 100.0, "language": sources[0]}]

    @api.post("/translate_file", summary="Translate a file (.txt, .html, .docx, .odt)",
              responses=_ERRORS, openapi_extra=_FILE_BODY)
    async def translate_file(request: Request) -> dict:
        form = await _form(request)
        await service.admit(request, form.get("api_key"))
        if not settings.files_translation:
            raise ApiError(403, "Files translation are disabled on this server.")
        upload = form.get("file")
        for name, value in (("file", upload), ("source", form.get("source")),
                            ("target", form.get("target"))):
            if not value:
                raise ApiError(400, f"Invalid request: missing {name} parameter")
        if isinstance(upload, str) or not upload.filename:
            raise ApiError(400, "Invalid request: empty file")
        if Path(upload.filename).suffix.lower() not in FORMATS:
            raise ApiError(400, "Invalid request: file format not supported")
        model = service.model(str(form["source"]).lower(), str(form["target"]).lower())
        name = await _translate_upload(service, request, model, upload)
        return {"translatedFileUrl": f"{request.base_url}download_file/{name}"}

    @api.get("/download_file/{name}", summary="Download a translated file",
             responses={404: _ERRORS[400] | {"description": "No such file (or removed: files "
                                                            "are kept 30 minutes)"}})
    async def download_file(name: str) -> FileResponse:
        if not settings.files_translation:
            raise ApiError(400, "Files translation are disabled on this server.")
        path = service.files.path(name)
        if path is None:
            raise ApiError(404, "Not Found")
        return FileResponse(path, filename=service.files.download_name(name))

    @api.post("/suggest", summary="Suggest a better translation (not on this server)",
              responses=_ERRORS, openapi_extra=_FIELDS_BODY)
    async def suggest(request: Request) -> dict:
        fields, _ = await read_fields(request)
        await service.admit(request, fields.get("api_key"))
        raise ApiError(403, "Suggestions are disabled on this server.")

    return api


async def _form(request: Request):
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise ApiError(400, "Invalid request: missing file parameter (send multipart/form-data)")
    try:
        return await request.form()
    except Exception as error:  # noqa: BLE001 - python-multipart's many parse errors
        raise ApiError(400, f"Invalid request: unreadable form ({error})") from None


async def _translate_upload(service: Service, request: Request, model: ServedModel,
                            upload) -> str:
    """The uploaded file translated in its format and stored: its name in service.files."""
    with tempfile.TemporaryDirectory(prefix="transduce-upload-") as folder:
        source = Path(folder) / Path(upload.filename).name  # its errors name the user's file
        source.write_bytes(await upload.read())
        try:  # parsing and writing documents takes a while: off the event loop
            document = await asyncio.to_thread(read_document, source, _splitter(service, model))
        except UserError as error:
            raise ApiError(400, f"Invalid request: {error}") from None
        marked = document.marked  # inline markup: put back by alignments
        found = await service.translate(model, document.sentences,
                                        service.search(model, attention=any(marked)), request)
        links = [model.translator.alignments(t) if m else None
                 for t, m in zip(found, marked, strict=True)]
        return await asyncio.to_thread(service.files.put, upload.filename, lambda path:
                                       document.write([t.text for t in found], path, links))


def _splitter(service: Service, model: ServedModel) -> Splitter:
    """Sentences in the model's source language (unless --no-split-sentences), each cut to the
    model's length."""
    return Splitter(model.source if service.settings.split_sentences else None,
                    fits=model.translator.fits)


def _alternatives(value, limit: int) -> int:
    try:
        n = max(0, int(value))
    except (TypeError, ValueError, OverflowError):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number") from None
    if n > limit:
        raise ApiError(400, f"Invalid request: alternatives parameter must be <= {limit}")
    return n


def _check_size(texts: list[str], max_texts: int, max_chars: int) -> None:
    if max_texts != -1 and len(texts) > max_texts:
        raise ApiError(400, f"Invalid request: request ({len(texts)} texts) exceeds the "
                            f"limit of texts per request ({max_texts})")
    for text in texts:  # each text on its own, as LibreTranslate counts
        if max_chars != -1 and len(text) > max_chars:
            raise ApiError(400, f"Invalid request: request ({len(text)}) exceeds text limit "
                                f"({max_chars})")


def _glossary(value) -> Glossary | None:
    """A request's glossary: a JSON object, or a form's lines of source<TAB>target; a 400 naming
    what is wrong with it."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        pairs = [tuple(line.split("\t")) for line in value.splitlines() if line.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ApiError(400, "Invalid request: glossary: each line is source term<TAB>"
                                "target term")
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        raise ApiError(400, "Invalid request: glossary must be an object of source term: "
                            "target term")
    if len(pairs) > MAX_GLOSSARY:
        raise ApiError(400, f"Invalid request: glossary: at most {MAX_GLOSSARY} entries, got "
                            f"{len(pairs)}")
    for term in (t for pair in pairs for t in pair):
        if not isinstance(term, str) or not term.strip() or len(term) > MAX_TERM:
            raise ApiError(400, f"Invalid request: glossary: a term must be a string of 1 to "
                                f"{MAX_TERM} characters, got {term!r:.60}")
        try:
            term.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "Invalid request: glossary: not valid Unicode (a lone "
                                "surrogate)") from None
    try:
        return Glossary.of(pairs)
    except UserError as error:
        raise ApiError(400, f"Invalid request: {error}") from None


async def _translate(service: Service, request: Request, model, texts: list[str],
                     text_format: str, alternatives: int, glossary: Glossary | None = None
                     ) -> tuple[list[str], list[list[str]]]:
    """Each text translated sentence by sentence (or line by line, or between its tags), and up
    to `alternatives` other translations of it: its sentences' second, third... best, each
    sentence's best where it has no more. `glossary`: its terms hold in every sentence."""
    splitter = _splitter(service, model)
    pieces = [(html_text if text_format == "html" else plain_text)(t, splitter) for t in texts]
    sentences = [s for p in pieces for s in p.sentences.values()]
    marked = [m for p in pieces for m in p.marked]  # inline markup: put back by alignments
    search = service.search(model, nbest=alternatives + 1, attention=any(marked))
    terms = [glossary.terms(s) for s in sentences] if glossary else None
    found = await service.translate(model, sentences, search, request, None, terms)
    links = [model.translator.alignments(t) if m else None
             for t, m in zip(found, marked, strict=True)]
    translated, others, at = [], [], 0
    for p in pieces:
        mine = found[at:at + len(p.sentences)]
        best = p.join([t.text for t in mine], links[at:at + len(p.sentences)])
        at += len(p.sentences)
        translated.append(best)
        candidates = [p.join([t.nbest[min(k, len(t.nbest) - 1)][0] for t in mine])
                      for k in range(1, alternatives + 1)] if mine else []
        unique = []
        for c in candidates:
            if c != best and c not in unique:
                unique.append(c)
        others.append(unique)
    return translated, others
