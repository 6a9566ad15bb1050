"""Lines that may be paragraphs (`transduce translate --split-sentences`): each cut into
sentences, translated on its own in the batches of the others, put back with the line's own
spacing (`transduce.documents.layout`)."""

from __future__ import annotations

from transduce.decoding.translator import Translation, Translator
from transduce.documents.layout import Splitter, plain_text


class Paragraphs:
    """A Translator whose every sentence may be a paragraph: cut into sentences, each translated
    on its own (in one batch with the others), put back with the paragraph's spacing."""

    def __init__(self, translator: Translator, language: str) -> None:
        self.translator = translator
        self.splitter = Splitter(language, fits=translator.fits)

    def translate_detailed(self, paragraphs: list[str], *, on_translation=None,
                           **options) -> list[Translation]:
        """As `Translator.translate_detailed`, a Translation per paragraph: its text the
        sentences' best joined, its score their scores' sum; `on_translation(n, translation)`
        once each paragraph is done."""
        pieces = [plain_text(p, self.splitter) for p in paragraphs]
        owner = [n for n, p in enumerate(pieces) for _ in p.sentences]
        found: list[list] = [[None] * len(p.sentences) for p in pieces]
        first = [sum(len(p.sentences) for p in pieces[:n]) for n in range(len(pieces))]
        missing = [len(p.sentences) for p in pieces]
        results: list[Translation | None] = [None] * len(pieces)

        def done(n: int) -> None:
            text = pieces[n].join([t.text for t in found[n]])
            score = sum(t.nbest[0][1] for t in found[n])
            results[n] = Translation(paragraphs[n], [(text, score)],
                                     length=sum(t.length for t in found[n]))
            if on_translation is not None:
                on_translation(n, results[n])

        def sentence_done(i: int, translation: Translation) -> None:
            n = owner[i]
            found[n][i - first[n]] = translation
            missing[n] -= 1
            if not missing[n]:
                done(n)

        for n, p in enumerate(pieces):  # lines with nothing to translate
            if not p.sentences:
                done(n)
        self.translator.translate_detailed([s for p in pieces for s in p.sentences.values()],
                                           on_translation=sentence_done, **options)
        return results
