"""The fact extractor before issue 14 (one alternation of every pattern, run over str),
kept verbatim as the throughput baseline of ``bench_recall``."""

from __future__ import annotations

import re

_MONTHS = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
_UNITS = (
    r"%|円|万円|億円|万|億|元|ドル|ユーロ|件|個|人|名|泊|日間|時間|回|歳|kg|mg|km|cm|mm|ms|GB|MB|KB|TB|GiB|MiB"
    r"|USD|EUR|JPY|GBP|CNY|px|kWh|Hz|MHz|GHz"
)
_EXTENSIONS = (
    r"py|js|ts|tsx|jsx|json|csv|tsv|txt|md|yaml|yml|toml|ini|cfg|conf|pdf|png|jpe?g|gif|svg"
    r"|xlsx?|docx?|pptx?|html?|css|sql|log|sh|go|rs|java|kt|rb|php|c|cc|cpp|h|hpp|zip|gz|tar"
    r"|parquet|ipynb"
)

# Order matters: at a given position the first alternative that matches wins, so the
# specific forms (URL, e-mail, date, IP, version) come before the generic ones (ID, number).
_PATTERNS = [
    r"(?:https?|ftp)://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+",
    r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?",
    r"\d{4}/\d{1,2}/\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}",
    r"\d{4}年\d{1,2}月(?:\d{1,2}日)?|\d{1,2}月\d{1,2}日",
    rf"(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?(?:, \d{{4}})?|\d{{1,2}} (?:{_MONTHS}) \d{{4}}",
    r"\d{1,2}:\d{2}(?::\d{2})?(?: ?[AaPp]\.?[Mm]\.?)?",
    r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{2,5})?",
    r"v?\d+(?:\.\d+){2,}(?:[-+][0-9A-Za-z.-]+)?|v\d+(?:\.\d+)?",
    r"(?:[A-Za-z]:\\|~/|\.{1,2}/|/)[A-Za-z0-9._\-/\\]*[A-Za-z0-9_\-]",
    r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/[A-Za-z0-9_-]+\.[A-Za-z0-9]{1,8}",
    rf"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.(?:{_EXTENSIONS})",
    r"[$€£¥₹] ?\d[\d,]*(?:\.\d+)?(?: ?(?:[kKMB]|million|billion|thousand))?",
    rf"\d[\d,]*(?:\.\d+)? ?(?:{_UNITS})",
    r"#\d+",
    r"(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)+",
    r"(?!\d+(?:st|nd|rd|th)(?![A-Za-z0-9]))(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{3,}",
    r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d{2,}",
]
_FACT_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?:" + "|".join(f"(?:{p})" for p in _PATTERNS) + r")(?![A-Za-z0-9_])"
)
_TRAILING = ".,;:!?'\""


def extract_facts(text: str) -> list[str]:
    """Exact-value facts in ``text`` (the previous implementation)."""
    return [m.group().rstrip(_TRAILING) for m in _FACT_RE.finditer(text)]
