"""Glossaries: how often their terms appear, what they do to BLEU, what they cost in speed.

The glossary is built from the references, as Post & Vilar (2018) and Hu et al. (2019) measure
lexically constrained decoding: for each sentence, its `--terms` rarest reference words (by
their count in the training targets, at most `--max-count`; with `--capitalised`, only
capitalised words not first in the sentence: German nouns), given as that sentence's terms
(`Translator.translate_detailed(terms=...)`, what a glossary's matches become). Each search
setting runs without and with them, in one process, one after the other. Reported: BLEU
(sacreBLEU, lowercased and cased), the terms found in the translations (as text, and as whole
words), sentences per second and the time with terms over the time without.

    python benchmarks/glossary.py --model runs/m30k-en-de \\
        --src ../shared/data/multi30k/test_2016_flickr.en \\
        --ref ../shared/data/multi30k/test_2016_flickr.de \\
        --train-ref ../shared/data/multi30k/train.de --capitalised
"""

from __future__ import annotations

import argparse
import collections
import re
import time
from pathlib import Path

import sacrebleu
import torch

from transduce.decoding.translator import Translator

WORD = re.compile(r"\w+")


def words(line: str) -> list[str]:
    return WORD.findall(line)


def choose_terms(references: list[str], counts: collections.Counter, most: int, max_count: int,
                 capitalised: bool) -> list[list[str]]:
    """Each reference's `most` rarest words of 4 letters or more, seen at most max_count times
    in training (capitalised ones not first in the sentence, with `capitalised`)."""
    chosen = []
    for line in references:
        candidates = []
        for i, word in enumerate(words(line)):
            if not word.isalpha() or len(word) < 4 or counts[word] > max_count:
                continue
            if capitalised and (i == 0 or not word[0].isupper()):
                continue
            if word not in candidates:
                candidates.append(word)
        candidates.sort(key=lambda w: counts[w])  # stable: ties in sentence order
        chosen.append(candidates[:most])
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--train-ref", required=True,
                        help="the training targets, for how rare a word is")
    parser.add_argument("--terms", type=int, default=2, help="terms per sentence at most")
    parser.add_argument("--max-count", type=int, default=20,
                        help="a term is seen at most this often in the training targets")
    parser.add_argument("--capitalised", action="store_true",
                        help="only capitalised words, not first in the sentence (German nouns)")
    parser.add_argument("--beam-sizes", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    sources = Path(args.src).read_text(encoding="utf-8").splitlines()
    references = Path(args.ref).read_text(encoding="utf-8").splitlines()
    counts = collections.Counter(
        w for line in Path(args.train_ref).read_text(encoding="utf-8").splitlines()
        for w in words(line))
    terms = choose_terms(references, counts, args.terms, args.max_count, args.capitalised)
    with_terms = sum(1 for t in terms if t)
    total = sum(map(len, terms))
    print(f"{len(sources)} sentences, {with_terms} with terms, {total} terms "
          f"({args.terms} at most, each seen at most {args.max_count} times in training"
          f"{', capitalised' if args.capitalised else ''})")

    translator = Translator.load(args.model)
    translator.translate(sources[:64])  # warm up
    lower_bleu, cased_bleu = sacrebleu.BLEU(lowercase=True), sacrebleu.BLEU()
    rows = []
    for beam in args.beam_sizes:
        seconds = {}
        for glossary in (False, True):
            start = time.perf_counter()
            hypotheses = translator.translate(sources, beam_size=beam,
                                              terms=terms if glossary else None)
            seconds[glossary] = time.perf_counter() - start
            as_text = sum(t in h for ts, h in zip(terms, hypotheses, strict=True) for t in ts)
            as_word = sum(t in words(h) for ts, h in zip(terms, hypotheses, strict=True)
                          for t in ts)
            lower = lower_bleu.corpus_score(hypotheses, [references]).score
            cased = cased_bleu.corpus_score(hypotheses, [references]).score
            rows.append((beam, glossary, lower, cased, as_text, as_word, seconds[glossary],
                         seconds[glossary] / seconds[False]))
    print()
    print("| search | glossary | BLEU lc | BLEU cased | terms in the output (as words) "
          "| sentences/s | time x |")
    print("|---|---|---|---|---|---|---|")
    for beam, glossary, lower, cased, as_text, as_word, s, ratio in rows:
        search = "greedy" if beam == 1 else f"beam {beam}"
        print(f"| {search} | {'yes' if glossary else 'no'} | {lower:.2f} | {cased:.2f} | "
              f"{as_text}/{total} = {100 * as_text / total:.1f}% ({100 * as_word / total:.1f}%) "
              f"| {len(sources) / s:.1f} | {ratio:.2f} |")
    print(f"\nBLEU {lower_bleu.get_signature()} (cased: {cased_bleu.get_signature()})")


if __name__ == "__main__":
    main()
