"""The other-script corpus keeps fitting and evaluation data apart (benchmarks.token_corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import token_corpus
from benchmarks.token_corpus import (
    CATALOG_DOMAINS,
    LOCALE_ROOT,
    catalog_texts,
    consecutive_chunks,
    gather_scripts,
)


def installed_catalog_language() -> str:
    for lang in ("ru", "ko", "th", "hi", "el"):
        if any((LOCALE_ROOT / lang / "LC_MESSAGES" / f"{d}.mo").is_file()
               for d in CATALOG_DOMAINS):
            return lang
    pytest.skip("no gettext catalog of the corpus installed (scripts/install-corpus-deps)")


def test_a_translated_message_is_in_one_split_only() -> None:
    lang = installed_catalog_language()
    def sentences(split: str) -> set[str]:
        return {line.strip() for text in catalog_texts(lang, split)  # type: ignore[arg-type]
                for line in text.splitlines() if len(line.strip()) >= 40}

    fit, held = sentences("fit"), sentences("eval")
    assert fit
    assert held
    # messages are split by their English msgid; the same translated sentence can still
    # occur under two msgids (e.g. in two catalogs), but only rarely
    assert len(fit & held) < 0.02 * min(len(fit), len(held))


def test_missing_sources_give_empty_groups(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setattr(token_corpus, "LOCALE_ROOT", tmp_path)
    monkeypatch.setattr(token_corpus, "MAN_ROOT", tmp_path)
    groups = gather_scripts("eval", 5)
    assert set(groups) == {*token_corpus.SCRIPT_GROUPS, token_corpus.DECOMPOSED}
    assert all(texts == [] for texts in groups.values())


def test_consecutive_chunks_do_not_overlap() -> None:
    import random

    text = "\n".join(f"line {i} " + "x" * (i % 70) for i in range(3000))
    pieces = list(consecutive_chunks([text], random.Random(3)))
    assert len(pieces) > 5
    assert all(token_corpus.MIN_CHARS <= len(p) <= token_corpus.MAX_CHARS for p in pieces)
    position = 0
    for piece in pieces:  # in order, each after the previous one
        found = text.find(piece, position)
        assert found >= position
        position = found + len(piece)


def test_manual_pages_keep_their_accented_letters() -> None:
    """German and French pages write most accented letters as roff glyph escapes; the
    corpus reads them as the letters (deleting them left "geprft", text nobody writes,
    and the estimator was fitted and judged on it)."""
    page = "\n".join([
        ".SH BESCHREIBUNG",
        r"Im \fBpreinst\fR wird gepr\(:uft, ob die Datei ge\(:andert wurde; Stra\(sse.",
        r"L'\('etat \(Fo actuel\(Fc est \(`a v\('erifier \[u00E9]t\['e] \(em \(aq\*(Aq",
        r"\(/L\('od\('z: \(,c \(~n \(:U, unknown names go: [\(zz\[nosuchglyph]] \fIende\fP",
    ])
    assert token_corpus.strip_roff(page).splitlines() == [
        "BESCHREIBUNG",
        "Im preinst wird geprüft, ob die Datei geändert wurde; Straße.",
        "L'état « actuel» est à vérifier été — ''",
        "Łódź: ç ñ Ü, unknown names go: [] ende",
    ]


def test_the_decomposed_group_is_its_splits_texts_in_normal_form_d() -> None:
    import unicodedata

    installed_catalog_language()
    for split in ("fit", "eval"):
        groups = gather_scripts(split, 40)  # type: ignore[arg-type]
        decomposed = groups[token_corpus.DECOMPOSED]
        assert decomposed
        composed = {t for g in token_corpus.DECOMPOSABLE for t in groups[g]}
        for text in decomposed:
            assert unicodedata.normalize("NFD", text) == text
            assert unicodedata.normalize("NFC", text) in composed  # same split's texts
