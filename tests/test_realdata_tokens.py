"""The default token estimate on real-shape text, against o200k_base (exact).

DESIGN §7: the default counter is within 10% (p95) of o200k_base on every kind of text,
and "fits" means fits by the exact tokenizer too. Checked here per script on hand-written
paragraphs (``tests/realdata.MULTILINGUAL``) and on a whole conversation truncated to a
budget (a Greek dialogue overflowed its budget by o200k before the per-script
correction). A paragraph still outside 10% is marked xfail with its figures.
"""

from __future__ import annotations

import pytest

from ctxstack import ChatMessage, CompactUtils
from ctxstack.tokens import TiktokenCounter
from tests import realdata

pytest.importorskip("tiktoken")
O200K = TiktokenCounter("o200k_base")

# o200k figures for the fixture paragraphs, estimate vs exact: zh 48 vs 47, ru 43 vs 41,
# ko 42 vs 39, hi 31 vs 31, el 42 vs 39, ar 34 vs 36 (before the per-script correction:
# ko 79, hi 110, el 31, ar 29). Korean was 43 (10.3% over) until digit runs were counted
# exactly: the paragraph's numbers cost what their ⌈digits / 3⌉ pieces do.


@pytest.mark.parametrize("key", ["zh", "ru", "ko", "hi", "el", "ar"])
def test_estimate_is_within_ten_percent_of_o200k(key: str) -> None:
    text = realdata.MULTILINGUAL[key]
    exact = O200K.count_text(text)
    assert abs(CompactUtils.estimate_tokens(text) - exact) <= 0.10 * exact


GREEK = (
    "Η συνάντηση μεταφέρθηκε την Πέμπτη στις 10:00. Παρακαλώ επιβεβαιώστε τη συμμετοχή "
    "σας μέχρι την Τετάρτη. Ο προϋπολογισμός είναι 4.500 ευρώ.",
    "Ευχαριστώ πολύ! Θα ενημερώσω την ομάδα και θα στείλω την ατζέντα αύριο το πρωί.",
)
RUSSIAN = (realdata.MULTILINGUAL["ru"], "Понял, увеличу лимит памяти до 16 ГБ и перезапущу.")


def _dialogue(pair: tuple[str, str], n: int = 400) -> list[ChatMessage]:
    out = [ChatMessage.system("You are a helpful assistant.")]
    for i in range(n):
        out.append(ChatMessage.user(f"{pair[0]} #{i}") if i % 2 == 0
                   else ChatMessage.assistant(f"{pair[1]} #{i}"))
    return out


@pytest.mark.parametrize("budget", [2_000, 8_000])
@pytest.mark.parametrize(
    "pair",
    [pytest.param(GREEK, id="greek"), pytest.param(RUSSIAN, id="russian")],
)
def test_truncated_dialogue_fits_by_o200k(pair: tuple[str, str], budget: int) -> None:
    out = CompactUtils.smart_truncate(_dialogue(pair), budget)
    assert O200K.count_messages(out) <= budget
