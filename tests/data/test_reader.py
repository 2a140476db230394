"""How a model reads English (onlstm.data.reader): Mikolov's PTB convention on ordinary text, the convention
detected from a training vocabulary, saved and read back, the older ``text_normalisation`` and runs that say
nothing (the PTB reader, with a note)."""

from __future__ import annotations

import pytest

from onlstm.data.reader import PTB, TextReader, is_sentence_end, reader_of
from onlstm.errors import InputError
from support import SHARED_DATA

PTB_WORDS = {"<eos>", "<unk>", "N", "no", "the", "do", "n't", "dog", "$", "mr.", "u.s.", "'s", "'", "firm", "ca"}


@pytest.mark.parametrize(
    "text, words, dropped",
    [
        # a capital letter is the training text's lower case; the sentence's final mark is not read
        ("No author liked it.", ["no", "author", "liked", "it"], ["."]),
        # clitics split as PTB splits them; a number in digits is N, whatever its commas and points
        ("Don't, the dog 1,200 times 3.5 1987", ["do", "n't", "the", "dog", "N", "times", "N", "N"], [","]),
        ("can't", ["ca", "n't"], []),
        # what PTB's text holds stays whole: abbreviations, $, the possessive and the plural's apostrophe
        (
            "Mr. Smith paid $5 to the U.S. firm's",
            ["mr.", "smith", "paid", "$", "N", "to", "the", "u.s.", "firm", "'s"],
            [],
        ),
        ("the dogs' bone (really)?", ["the", "dogs", "'", "bone", "really"], ["(", ")", "?"]),
        # text already in the convention reads as itself
        ("the <unk> rose N N", ["the", "<unk>", "rose", "N", "N"], []),
    ],
)
def test_ptb_reads_english_as_mikolovs_text_was_written(text, words, dropped):
    assert PTB.read(text, PTB_WORDS) == (words, dropped)


def test_reading_twice_is_reading_once():
    words, _ = PTB.read("No author that 3 senators liked has ever been popular.", PTB_WORDS)
    assert PTB.read(" ".join(words), PTB_WORDS) == (words, [])
    assert PTB.read(words, PTB_WORDS) == (words, [])  # a list: each word normalised, none split


def test_a_list_of_words_is_normalised_word_by_word():
    assert PTB.read(["The", "3", "cats", ",", "ran", "1.5"]) == (["the", "N", "cats", "ran", "N"], [","])


def test_a_reader_that_reads_punctuation_and_case():
    cased = TextReader(lowercase=False, number=None, punctuation=True)
    assert cased.read("Dogs, cats 12.", {"Dogs", ",", "cats", "."}) == (["Dogs", ",", "cats", "12", "."], [])
    spaces = TextReader(True, None, True, "spaces")
    assert spaces.read("The dog's bone.") == (["the", "dog's", "bone."], [])


def test_the_convention_is_detected_from_the_vocabulary():
    assert TextReader.detect(PTB_WORDS) == PTB
    cased = TextReader.detect(["<eos>", "<unk>", "The", "dog", ".", ",", "1987"])
    assert cased == TextReader(lowercase=False, number=None, punctuation=True, split="ptb")
    grammar = TextReader.detect(["<eos>", "<unk>", "the", "dog", "saw"])
    assert grammar == TextReader(lowercase=True, number=None, punctuation=False, split="ptb")
    assert TextReader.detect(["<eos>", "the"]).unknown is None


def test_mikolovs_ptb_vocabulary_is_detected_as_ptb():
    path = SHARED_DATA / "ptb" / "ptb.train.txt"
    if not path.is_file():
        pytest.skip(f"needs Mikolov's PTB text at {path}")
    words = set(path.read_text(encoding="utf-8").split()) | {"<eos>"}
    assert TextReader.detect(words) == PTB


def test_the_reader_is_saved_and_read_back():
    reader = TextReader(lowercase=False, number=None, punctuation=True, split="spaces", unknown=None)
    assert reader_of({"text": reader.to_dict()}) == (reader, None)
    assert reader_of({"text_normalisation": "ptb"}) == (PTB, None)
    lower, note = reader_of({"text_normalisation": "lower"})
    assert lower.read(["The", ","]) == (["the", ","], []) and note is None
    unknown, note = reader_of({"kind": "lm"})
    assert unknown == PTB and "PTB" in note and "\n" not in note


@pytest.mark.parametrize("saved", [[1], {"lowercase": "yes"}, {"split": "words"}, {"colour": 1}, {"end": ""}])
def test_a_malformed_saved_reader_is_one_line(saved):
    with pytest.raises(InputError, match="config.json") as err:
        reader_of({"text": saved})
    assert "\n" not in str(err.value)


def test_sentence_final_punctuation():
    assert is_sentence_end(".") and is_sentence_end(" ?! ") and is_sentence_end('."')
    assert not is_sentence_end(",") and not is_sentence_end("") and not is_sentence_end("here.")


# -- WikiText's marks inside words (Merity et al. 2016): "role @-@ playing", "1 @,@ 200", "3 @.@ 5"
WIKI = TextReader(lowercase=False, number=None, punctuation=True, split="wikitext")


@pytest.mark.parametrize(
    "text, words",
    [
        ("a role-playing game", ["a", "role", "@-@", "playing", "game"]),
        ("1,200 people paid 3.5 dollars.", ["1", "@,@", "200", "people", "paid", "3", "@.@", "5", "dollars", "."]),
        (
            "a 1.5-mile state-of-the-art",
            ["a", "1", "@.@", "5", "@-@", "mile", "state", "@-@", "of", "@-@", "the", "@-@", "art"],
        ),
        # not inside a word: a leading minus, a dash between spaces, a comma after a number, a final hyphen
        ("-5 - 1, 2 re-", ["-", "5", "-", "1", ",", "2", "re", "-"]),
        ("He didn't (well-known).", ["He", "did", "n't", "(", "well", "@-@", "known", ")", "."]),
    ],
)
def test_wikitext_marks_inside_words_are_tokens_of_their_own(text, words):
    assert WIKI.read(text) == (words, [])


def test_a_hyphenated_word_the_vocabulary_holds_stays_whole():
    assert WIKI.read("an X-ray", {"X-ray"})[0] == ["an", "X-ray"]
    assert PTB.read("a role-playing game")[0] == ["a", "role-playing", "game"]  # PTB's text keeps hyphens


def _wikitext_lines(n: int, seed: int = 0) -> list[str]:
    """Lines written as WikiText's are: hyphenated words and numbers with their marks as tokens, punctuation apart."""
    import random

    r = random.Random(seed)
    words = ["the", "game", "was", "Sega", "real", "time", "role", "playing", "well", "known", "of", "art"]
    lines = []
    for _ in range(n):
        tokens = []
        for _ in range(r.randint(3, 12)):
            kind = r.random()
            if kind < 0.2:  # a hyphenated word of 2-4 parts
                tokens += " @-@ ".join(r.choice(words) for _ in range(r.randint(2, 4))).split()
            elif kind < 0.35:  # a number: thousands, a decimal, or a plain one
                a, b = str(r.randint(1, 999)), str(r.randint(0, 999)).zfill(3)
                tokens += r.choice([[a, "@,@", b], [a, "@.@", b[: r.randint(1, 3)]], [a]])
            else:
                tokens.append(r.choice(words))
        lines.append(" ".join(tokens + [r.choice([".", ",", ";"])]))
    return lines


def test_wikitext_text_written_out_reads_back_as_wikitext_wrote_it():
    """The generated lines' English (the marks joined back, punctuation attached) read by the reader detected from
    their vocabulary gives back every line's tokens: the convention round-trips."""
    lines = _wikitext_lines(300)
    vocab = {w for line in lines for w in line.split()} | {"<eos>", "<unk>"}
    reader = TextReader.detect(vocab)
    assert reader.split == "wikitext" and reader.number is None and not reader.lowercase
    for line in lines:
        english = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
        english = english[:-2] + english[-1]  # the final mark attached to its word
        assert reader.read(english, vocab) == (line.split(), []), english
