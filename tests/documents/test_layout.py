import pytest

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
    assert list(pieces.sentences.values()) == ["Hello & bye!", "tail <3"]
    assert pieces.marked == [True, False]
    assert pieces.join(["<x> & y!", "T <"], [[(0, 0), (1, 1), (2, 2)], None]) == (
        '<p class="x">&lt;x&gt; &amp; <b>y!</b></p><script>var a = "hi";</script>'
        "<!-- a comment --><pre>kept as is</pre> T &lt;")


LINKS = [(0, 0), (1, 1), (2, 2), (3, 3)]


@pytest.mark.parametrize(("markup", "translation", "links", "expected"), [
    # an inline element around the words aligned with its words
    ("<p>The <b>black</b> dog runs.</p>", "Der schwarze Hund läuft.", LINKS,
     "<p>Der <b>schwarze</b> Hund läuft.</p>"),
    # moved where the translation puts its words
    ("<p>The <b>black</b> dog runs.</p>", "Der Hund, schwarz, läuft.",
     [(0, 0), (1, 2), (2, 1), (3, 3)], "<p>Der Hund, <b>schwarz,</b> läuft.</p>"),
    # nested, and the words between those aligned held too
    ('<p>Click <a href="x">here to <i>see</i></a> more.</p>',
     "Klicken Sie hier, um mehr zu sehen.",
     [(0, 0), (0, 1), (1, 2), (2, 3), (3, 6), (4, 4)],
     '<p>Klicken Sie <a href="x">hier, um mehr zu <i>sehen.</i></a></p>'),
    # siblings that would cross: the later one after the earlier
    ("<b>Bold</b> <i>it</i>", "Fett kursiv", [(0, 1), (1, 0)], "<i>Fett</i> <b>kursiv</b>"),
    ("<b>one</b> <i>two</i> three", "eins zwei drei", [(0, 0), (1, 0), (2, 2)],
     "<b>eins</b> <i></i>zwei drei"),
    # an element without words before the translation of the word it stood before
    ("<p>A <img src=x> dog &amp; cat</p>", "Ein Hund & Katze", LINKS,
     "<p>Ein <img src=x>Hund &amp; Katze</p>"),
    # the whole sentence: the whole translation, whatever the alignments
    ("<p><em>a b c</em></p>", "x y", [(0, 1)], "<p><em>x y</em></p>"),
    # no alignments: words in proportion
    ("<p>a b <b>c d</b></p>", "w x y z", None, "<p>w x <b>y z</b></p>"),
    # a word aligned with none: empty, where the next word goes
    ("<p>a <b>b</b> c</p>", "x y", [(0, 0), (2, 1)], "<p>x <b></b>y</p>"),
])
def test_inline_markup_is_put_back_by_the_alignments(markup, translation, links, expected):
    pieces = html_text(markup)
    assert len(pieces.sentences) == 1
    assert pieces.join([translation], [links]) == expected


def test_inline_elements_over_several_sentences_and_block_tags():
    pieces = html_text("<p>seven. <b>twelve! forty</b> two.</p>", Splitter("en"))
    assert list(pieces.sentences.values()) == ["seven.", "twelve!", "forty two."]
    assert pieces.join(["7.", "12!", "40 2."], [None, [(0, 0)], [(0, 0), (1, 1)]]) == \
        "<p>7. <b>12!</b> <b>40</b> 2.</p>"  # closed at a sentence's end, opened again
    # an element open across a block tag stays open: its words run to the text's end
    pieces = html_text('<a href="x">Click<br>here</a> now')
    assert list(pieces.sentences.values()) == ["Click", "here now"]
    assert pieces.join(["Klick", "hier jetzt"], [[(0, 0)], [(0, 0), (1, 1)]]) == \
        '<a href="x">Klick<br>hier</a> jetzt'
    # a closing tag of nothing, and an element left open, are kept
    assert html_text("a</b> <i>b").join(["x y"], [[(0, 0), (1, 1)]]) == "x </b><i>y"


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
