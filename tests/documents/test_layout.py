from transduce.documents.layout import Splitter, html_text, plain_text


def _upper(pieces):
    return pieces.join([s.upper() for s in pieces.sentences.values()])


def test_plain_text_translates_each_line_and_keeps_the_rest():
    pieces = plain_text("Hello world.\r\n\n  A dog runs. \n--\n")
    assert list(pieces.sentences.values()) == ["Hello world.", "A dog runs."]
    assert _upper(pieces) == "HELLO WORLD.\n\n  A DOG RUNS. \n--\n"


def test_html_keeps_markup_and_escapes_translations():
    markup = ('<p class="x">Hello &amp; <b>bye</b>!</p><script>var a = "hi";</script>'
              "<!-- a comment --><pre>kept as is</pre> tail &lt;3")
    pieces = html_text(markup)
    assert list(pieces.sentences.values()) == ["Hello &", "bye", "tail <3"]
    assert pieces.join(["<x> & y", "B", "T <"]) == (
        '<p class="x">&lt;x&gt; &amp; y <b>B</b>!</p><script>var a = "hi";</script>'
        "<!-- a comment --><pre>kept as is</pre> T &lt;")


def test_text_without_words_is_kept():
    assert plain_text("  \n-- \n").sentences == {}
    assert html_text("<br/> <hr>").join([]) == "<br/> <hr>"


def test_sentences_keep_the_texts_spacing_and_lines():
    pieces = plain_text("Dr. Smith went home.  He slept.\n\n  A dog runs. ", Splitter("en"))
    assert list(pieces.sentences.values()) == ["Dr. Smith went home.", "He slept.",
                                               "A dog runs."]
    assert _upper(pieces) == "DR. SMITH WENT HOME.  HE SLEPT.\n\n  A DOG RUNS. "
    markup = "<p>Hello &amp; bye.  Good day!</p>"
    html = html_text(markup, Splitter("en"))
    assert list(html.sentences.values()) == ["Hello & bye.", "Good day!"]
    assert html.join(["A <", "B"]) == "<p>A &lt; B</p>"


def test_a_sentence_longer_than_the_model_takes_is_cut():
    pieces = plain_text("one two three, four five six.", Splitter(
        "en", fits=lambda s: len(s.split()) <= 3))
    assert list(pieces.sentences.values()) == ["one two three,", "four five six."]
    assert _upper(pieces) == "ONE TWO THREE, FOUR FIVE SIX."
