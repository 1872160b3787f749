"""The per-script correction of the token estimator (ctxstack.tokens._model.script_correction):
its features on known strings, its neutrality on ASCII and CJK, and its accuracy on real
sentences in other scripts against the real vocabularies (offline, like test_token_model)."""

from __future__ import annotations

import pytest

from ctxstack.tokens._model import (
    FAMILIES,
    SCRIPT_FEATURES,
    SCRIPT_SCALE,
    SCRIPT_WEIGHTS,
    Family,
    estimate,
    script_correction,
    script_features,
    script_units,
)
from ctxstack.tokens._scripts import VOUCH
from tests.exact_tokens import exact, named_counts


def features(text: str) -> dict[str, int]:
    return named_counts(text, SCRIPT_FEATURES, script_features)


def test_feature_names_and_weights_line_up() -> None:
    from ctxstack.tokens._scripts import _BlockPass

    assert len(set(SCRIPT_FEATURES)) == len(SCRIPT_FEATURES)
    # a block pass writes a lead and a second-byte segment as one hex digit each
    too_many = tuple((f"b{i}", 0xE0, (0x80 + i,)) for i in range(16))
    with pytest.raises(ValueError, match="too many"):
        _BlockPass(too_many)
    for family in FAMILIES:
        assert len(SCRIPT_WEIGHTS[family]) == len(SCRIPT_FEATURES)


def test_groups_count_characters_and_runs() -> None:
    assert features("привет, мир") == {"cyrillic_chars": 9, "cyrillic_runs": 2}
    # (the *_letters features: the ASCII letters the accented ones vouch for, below)
    assert features("für über") == {"latin1_chars": 2, "latin1_runs": 2, "german_chars": 2,
                                    "german_letters": 5, "latin1_letters": 5}
    assert features("łąka") == {"latin_ext_chars": 2, "latin_ext_runs": 1,
                                "latin_ext_letters": 2}
    assert features("αβγ δ") == {"greek_chars": 4, "greek_runs": 2}
    # capitals of the two-byte alphabets are counted again
    assert features("ΑΒΓ δ") == {"greek_chars": 4, "greek_runs": 2, "greek_capital_chars": 3}
    assert features("МИР мир") == {"cyrillic_chars": 6, "cyrillic_runs": 2,
                                   "cyrillic_capital_chars": 3}
    assert features("Ölçü É") == {"latin1_chars": 4, "latin1_runs": 3,
                                  "latin1_capital_chars": 2, "german_chars": 1,
                                  "german_letters": 1, "latin1_letters": 1}
    assert features("Їжак і ґава") == {"cyrillic_chars": 9, "cyrillic_runs": 3,
                                       "cyrillic_capital_chars": 1, "ukrainian_chars": 1,
                                       "ukrainian_ghe_chars": 1}
    assert features("שלום") == {"hebrew_chars": 4, "hebrew_runs": 1}
    assert features("سلام دنیا") == {"arabic_chars": 8, "arabic_runs": 2}
    assert features("한국어 텍스트") == {"hangul_chars": 6, "hangul_runs": 2}
    # sub-blocks: the group's characters counted again by block
    assert features("नमस्ते") == {"brahmic_thai_chars": 6, "brahmic_thai_runs": 1,
                                 "devanagari_chars": 6}
    assert features("தமிழ்") == {"brahmic_thai_chars": 5, "brahmic_thai_runs": 1,
                                "tamil_chars": 5}
    assert features("বাংলা ಕನ್ನಡ") == {"brahmic_thai_chars": 10, "brahmic_thai_runs": 2,
                                    "bengali_chars": 5, "kannada_chars": 5}
    assert features("ไทย") == {"brahmic_thai_chars": 3, "brahmic_thai_runs": 1,
                              "thai_lao_chars": 3}
    assert features("ქართ") == {"e1_chars": 4, "e1_runs": 1, "georgian_chars": 4}
    # Vietnamese: only the Latin Extended Additional letters are in E1; ê, ơ are Latin
    assert features("Tiếng Việt") == {"e1_chars": 2, "e1_runs": 2, "vietnamese_chars": 2}
    assert features("ơn") == {"latin_ext_chars": 1, "latin_ext_runs": 1,
                              "latin_ext_letters": 1}


def test_accented_letters_vouch_for_the_ascii_letters_around_them() -> None:
    """German, French or Polish words are mostly ASCII letters that the vocabularies split
    more finely than English ones: each accented letter vouches for up to VOUCH of the
    text's ASCII letters, so a German text pays per letter, a stray accent in English
    text for at most VOUCH letters, and text without accents (or in another script)
    nothing."""
    german = "Die Konfigurationsdatei wurde überprüft und während der Installation geändert. "
    letters = sum(ch.isascii() and ch.isalpha() for ch in german)
    got = features(german * 20)
    assert got["german_letters"] == got["latin1_letters"] == 20 * letters
    english = "The configuration file was checked during the installation. " * 60
    got = features(english + "Café.")
    assert got["latin1_letters"] == VOUCH
    assert "german_letters" not in got
    assert features(english) == {}
    assert "latin1_letters" not in features("Привет — é")  # no ASCII letter to vouch for


def test_emoji_sequences_are_four_byte_runs() -> None:
    # a ZWJ family: three emoji joined by U+200D (three-byte, no group) -> three runs;
    # a skin tone modifier and a flag's regional indicators continue the run
    assert features("👨\u200d👩\u200d👧") == {"four_byte_chars": 3, "four_byte_runs": 3}
    assert features("👍🏽 🇫🇷") == {"four_byte_chars": 4, "four_byte_runs": 2}
    assert features("❤\ufe0f") == {}  # U+2764 and a variation selector: three-byte symbols


def test_ascii_cjk_and_empty_text_are_untouched() -> None:
    for text in ("", "plain ASCII, code_x = {'k': [1, 2]}\n", "日本語のテキスト、中文文本。"):
        raw = text.encode("utf-8")
        assert script_features(raw) == [0] * len(SCRIPT_FEATURES)
        for family in FAMILIES:
            assert script_correction(raw, family) == 0.0


def test_nul_and_lone_surrogates_are_counted_without_error() -> None:
    assert features("a\x00b\x00") == {}
    # a lone surrogate encodes (surrogatepass) as ED A0..BF xx: lead byte ED, Hangul group
    assert features("\ud800") == {"hangul_chars": 1, "hangul_runs": 1}
    for family in FAMILIES:
        assert estimate("x\ud800y\x00", family) >= 1
    # invalid UTF-8 (a stray continuation byte or lead byte) is classified by byte value
    assert script_features(b"\x80\x80") == [0] * len(SCRIPT_FEATURES)
    assert features_of_bytes(b"\xd0") == {"cyrillic_chars": 1, "cyrillic_runs": 1}


def features_of_bytes(raw: bytes) -> dict[str, int]:
    return {name: n for name, n in zip(SCRIPT_FEATURES, script_features(raw), strict=True) if n}


def test_correction_is_the_weighted_sum_of_the_features() -> None:
    raw = "Все люди рождаются свободными — नमस्ते, 한국어".encode()
    counts = script_features(raw)
    for family in FAMILIES:
        # summed in whole 1/SCRIPT_SCALE units (each weight rounded to one): the same
        # integer whatever the order of the terms
        units = sum(round(w * SCRIPT_SCALE) * c
                    for w, c in zip(SCRIPT_WEIGHTS[family], counts, strict=True))
        assert script_units(raw, family) == units
        assert script_correction(raw, family) == units / SCRIPT_SCALE
        fitted = sum(w * c for w, c in zip(SCRIPT_WEIGHTS[family], counts, strict=True))
        assert abs(script_correction(raw, family) - fitted) <= sum(counts) / SCRIPT_SCALE / 2


# Article 1 of the Universal Declaration of Human Rights, in the official translations.
UDHR_ARTICLE_1 = {
    "ru": "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены "
          "разумом и совестью и должны поступать в отношении друг друга в духе братства.",
    "uk": "Всі люди народжуються вільними і рівними у своїй гідності та правах. Вони наділені "
          "розумом і совістю і повинні діяти у відношенні один до одного в дусі братерства.",
    "el": "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα "
          "δικαιώματα. Είναι προικισμένοι με λογική και συνείδηση, και οφείλουν να "
          "συμπεριφέρονται μεταξύ τους με πνεύμα αδελφοσύνης.",
    "he": "כל בני האדם נולדו בני חורין ושווים בערכם ובזכויותיהם. כולם חוננו בתבונה ובמצפון, "
          "לפיכך חובה עליהם לנהוג איש ברעהו ברוח של אחוה.",
    "ar": "يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق. وقد وهبوا عقلاً وضميرًا وعليهم "
          "أن يعامل بعضهم بعضًا بروح الإخاء.",
    "fa": "تمام افراد بشر آزاد به دنیا می‌آیند و از لحاظ حیثیت و حقوق با هم برابرند. همه دارای "
          "عقل و وجدان هستند و باید نسبت به یکدیگر با روح برادری رفتار کنند.",
    "hi": "सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता और समानता प्राप्त "
          "है। उन्हें बुद्धि और अन्तरात्मा की देन प्राप्त है और परस्पर उन्हें भाईचारे के भाव से "
          "बर्ताव करना चाहिए।",
    "bn": "সমস্ত মানুষ স্বাধীনভাবে সমান মর্যাদা এবং অধিকার নিয়ে জন্মগ্রহণ করে। তাঁদের বিবেক এবং "
          "বুদ্ধি আছে; সুতরাং সকলেরই একে অপরের প্রতি ভ্রাতৃত্বসুলভ মনোভাব নিয়ে আচরণ করা উচিত।",
    "ta": "மனிதப் பிறவியினர் சகலரும் சுதந்திரமாகவே பிறக்கின்றனர்; அவர்கள் மதிப்பிலும், "
          "உரிமைகளிலும் சமமானவர்கள். அவர்கள் நியாயத்தையும் மனச்சாட்சியையும் இயற்பண்பாகப் "
          "பெற்றவர்கள். அவர்கள் ஒருவருடனொருவர் சகோதர உணர்வுப் பாங்கில் நடந்துகொள்ளல் வேண்டும்.",
    "th": "มนุษย์ทั้งหลายเกิดมามีอิสระและเสมอภาคกันในเกียรติศักดิ์และสิทธิ "
          "ต่างมีเหตุผลและมโนธรรม และควรปฏิบัติต่อกันด้วยเจตนารมณ์แห่งภราดรภาพ",
    "ko": "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다. 인간은 천부적으로 "
          "이성과 양심을 부여받았으며 서로 형제애의 정신으로 행동하여야 한다.",
    "vi": "Tất cả mọi người sinh ra đều được tự do và bình đẳng về nhân phẩm và quyền lợi. "
          "Mọi con người đều được tạo hóa ban cho lý trí và lương tâm và cần phải đối xử với "
          "nhau trong tình anh em.",
    "de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit "
          "Vernunft und Gewissen begabt und sollen einander im Geist der Brüderlichkeit "
          "begegnen.",
    "pt": "Todos os seres humanos nascem livres e iguais em dignidade e em direitos. Dotados de "
          "razão e de consciência, devem agir uns para com os outros em espírito de "
          "fraternidade.",
    "ka": "ყველა ადამიანი იბადება თავისუფალი და თანასწორი თავისი ღირსებითა და უფლებებით. მათ "
          "მინიჭებული აქვთ გონება და სინდისი და ერთმანეთის მიმართ უნდა იქცეოდნენ ძმობის "
          "სულისკვეთებით.",
}
SENTENCE_TOLERANCE = 0.30
"""One sentence of 40–330 tokens scatters far more than the 500–4,000-character texts of
the accuracy benchmark (which measures the distribution). Measured: at most ±26%
(o200k over-counts this formal prose in Hindi, Tamil, Persian, Ukrainian, Georgian by
20–26%: its fit texts are UI catalogs and manual pages). 30% still fails every script the
uncorrected model got wrong — 2–5x over for Indic, Thai, Georgian, Korean at o200k,
30–50% under for Greek, Hebrew, Arabic at cl100k."""
TOTAL_TOLERANCE = 0.12
"""All fifteen sentences together (measured: o200k +9.6%, cl100k +0.1%)."""


@pytest.mark.parametrize(("family", "encoding"), [("o200k", "o200k_base"),
                                                  ("cl100k", "cl100k_base")])
def test_other_scripts_are_estimated_close_to_the_real_tokenizer(family: Family,
                                                                 encoding: str) -> None:
    counter = exact(encoding)
    guessed = truth_total = 0
    for lang, text in UDHR_ARTICLE_1.items():
        truth = counter.count_text(text)
        guess = estimate(text, family)
        assert abs(guess - truth) <= SENTENCE_TOLERANCE * truth, (lang, guess, truth)
        guessed += guess
        truth_total += truth
    assert abs(guessed - truth_total) <= TOTAL_TOLERANCE * truth_total, (guessed, truth_total)


def test_decomposed_text_counts_its_marks_and_jamo() -> None:
    """Normal form D writes an accent as a combining mark after its letter and a Korean
    syllable as its jamo: the marks are a group of their own (and vouch for the ASCII
    letters around them, like the accented letters they replace), the jamo a block."""
    import unicodedata

    assert features(unicodedata.normalize("NFD", "café")) == {
        "combining_chars": 1, "combining_runs": 1, "combining_letters": 4}
    # a mark after a Greek letter adjoins the Greek run: one run, as before
    assert features(unicodedata.normalize("NFD", "ά")) == {"greek_chars": 1, "greek_runs": 1,
                                                          "combining_chars": 1}
    assert features(unicodedata.normalize("NFD", "한국")) == {
        "e1_chars": 6, "e1_runs": 1, "hangul_jamo_chars": 6}
    # composed text has neither
    assert "combining_chars" not in features("café ά")
    assert "hangul_jamo_chars" not in features("한국 ქართ")


@pytest.mark.parametrize(("family", "encoding"), [("o200k", "o200k_base"),
                                                  ("cl100k", "cl100k_base")])
def test_decomposed_text_is_estimated_like_composed_text(family: Family,
                                                         encoding: str) -> None:
    """The same sentences in normal form D (macOS file names, some web pages): Korean was
    counted 77% low, Greek, Polish and Vietnamese 11–25% low — an overflow past the margin.
    Now within the sentence tolerance each, and never under by more than the margin in
    total."""
    import unicodedata

    from ctxstack.tokens._counter import HEURISTIC_MARGIN

    counter = exact(encoding)
    guessed = truth_total = 0
    for lang, text in UDHR_ARTICLE_1.items():
        decomposed = unicodedata.normalize("NFD", text)
        if decomposed == text:
            continue
        truth = counter.count_text(decomposed)
        guess = estimate(decomposed, family)
        assert abs(guess - truth) <= SENTENCE_TOLERANCE * truth, (lang, guess, truth)
        guessed += guess
        truth_total += truth
    assert guessed >= (1 - HEURISTIC_MARGIN[family]) * truth_total, (guessed, truth_total)
    assert abs(guessed - truth_total) <= TOTAL_TOLERANCE * truth_total, (guessed, truth_total)
