"""The corpus of text in capitals the accuracy benchmark reports on
(benchmarks.capitals_corpus): its splits and its texts."""

from __future__ import annotations

from benchmarks.capitals_corpus import GROUPS, capitals_texts


def test_the_capitals_corpus_keeps_fitting_and_evaluation_texts_apart() -> None:
    """A correction would be fitted on one split and the accuracy benchmark evaluates on
    the other: no text may be in both, every text is long enough to measure and mostly in
    capitals where its group says so (the upper-cased prose is on every machine)."""
    fit, held_out = capitals_texts("fit", 30), capitals_texts("eval", 30)
    assert set(fit) == set(held_out) == set(GROUPS)
    assert fit[GROUPS[2]]
    assert held_out[GROUPS[2]]
    fitted = {t for texts in fit.values() for t in texts}
    evaluated = {t for texts in held_out.values() for t in texts}
    assert not fitted & evaluated
    assert all(len(t) >= 500 for t in fitted | evaluated)
    assert all(t == t.upper() for t in held_out[GROUPS[2]])
    for text in held_out[GROUPS[1]]:  # disclaimers: four fifths of the letters capitals
        letters = [ch for ch in text if ch.isalpha()]
        assert sum("A" <= ch <= "Z" for ch in letters) * 5 >= 4 * len(letters)
    assert all(line.startswith("#define") for t in held_out[GROUPS[3]]
               for line in t.splitlines()[1:-1])

