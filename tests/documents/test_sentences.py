from transduce.documents.sentences import cut_to_fit, sentence_spans


def _texts(text, spans):
    return [text[a:b] for a, b in spans]


def test_sentences_by_the_languages_rules():
    text = "Dr. Smith went home.  He slept! and woke  "
    assert _texts(text, sentence_spans(text, "en")) == ["Dr. Smith went home.", "He slept!",
                                                        "and woke"]
    german = "Das ist z. B. ein Test. Herr Dr. Müller kommt am 3. Mai. Gut!"
    assert _texts(german, sentence_spans(german, "de")) == [
        "Das ist z. B. ein Test.", "Herr Dr. Müller kommt am 3. Mai.", "Gut!"]
    assert _texts("Un. Deux.", sentence_spans("Un. Deux.", "zz")) == ["Un.", "Deux."]  # any


def test_a_long_sentence_is_cut_where_it_pauses():
    sentence = "one two three; four five, six seven eight nine"
    fits = lambda s: len(s.split()) <= 4  # noqa: E731
    parts = _texts(sentence, cut_to_fit(sentence, fits))
    assert parts == ["one two three;", "four five,", "six seven eight nine"]
    assert all(fits(p) for p in parts)
    assert _texts("abcdefgh", cut_to_fit("abcdefgh", lambda s: len(s) <= 3)) == [
        "ab", "cd", "ef", "gh"]  # no pause at all: still cut, never truncated
    assert cut_to_fit("short", fits) == [(0, 5)]
