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
