"""Merging ``react_iteration`` working summaries across compactions of one run.

An agent that compacts twice in a run must not forget, at the second compaction, what the
first summary held: the summariser sees the previous summary but may drop items from it,
and a dropped "Key data" value or "Pending" task is silently gone. So the merge is done
by code, with rules the prompt states to the model:

* the summary has the sections of :data:`SECTIONS` (markdown ``## Goal`` headings; bold
  ``**Goal**`` and ``Goal:`` lines are accepted too, as are a few aliases);
* **Goal** and **Next step** are single-valued: a non-empty new value replaces the old one;
* the other sections are lists: items of the previous summary survive unless the new
  summary *closes* them — repeats them marked ``(done)``, ``(resolved)``, ``[x]``,
  ``~~struck~~``, ``DONE:`` … (a closed item also closes the matching item in
  **Pending** and **Errors still relevant**, and is itself dropped from those two);
* a "Key data" item ``name: value`` is replaced in place by a new item with the same name;
* duplicates are removed: a previous item whose words all reappear in one new item is
  taken to be restated (the new wording wins, in the old position);
* new items are appended after the surviving previous ones, keeping chronology;
* an unstructured answer (no recognised section) is accepted as it is: the merge never
  turns a usable summary into an error;
* a "Facts kept verbatim:" list (appended by :mod:`ctxstack.compaction` after this merge,
  from the folded messages and the previous summary) is left out, so the summary ends
  with one such list, never a growing stack of them.

Item matching is word-based (case-insensitive; numbers, paths and IDs are single words;
CJK characters count one by one), so closing does not need verbatim repetition, while a
different number ("1.2M" vs "1.3M") never counts as the same item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SECTIONS: tuple[str, ...] = (
    "Goal",
    "Key data",
    "Tried and learned",
    "Errors still relevant",
    "Pending",
    "Next step",
)
SINGLE_VALUED = frozenset({"Goal", "Next step"})
OPEN_SECTIONS = frozenset({"Errors still relevant", "Pending"})

_ALIASES: dict[str, str] = {
    "goal": "Goal",
    "goals": "Goal",
    "current goal": "Goal",
    "objective": "Goal",
    "key data": "Key data",
    "key facts": "Key data",
    "tried and learned": "Tried and learned",
    "tried & learned": "Tried and learned",
    "tried / learned": "Tried and learned",
    "tried": "Tried and learned",
    "what was tried": "Tried and learned",
    "errors still relevant": "Errors still relevant",
    "errors": "Errors still relevant",
    "open errors": "Errors still relevant",
    "relevant errors": "Errors still relevant",
    "pending": "Pending",
    "pending work": "Pending",
    "todo": "Pending",
    "to do": "Pending",
    "remaining work": "Pending",
    "next step": "Next step",
    "next steps": "Next step",
    "next action": "Next step",
}

# Blocks other code appends to a summary after it is finalised ("Name:" + bullets):
# ctxstack.compaction appends "Facts kept verbatim:", re-derived each time from the folded
# messages *and the previous summary*. They are recognised as sections (so they do not
# leak into the section above them) and left out of the merged summary, so that the
# appender adds exactly one, bounded, list.
_APPENDED_BLOCKS: dict[str, str] = {"facts kept verbatim": "Facts kept verbatim"}

# Every pattern here meets model text, so each runs in linear time: no two adjacent
# repeats that can match the same characters (the old heading patterns backtracked in
# cubic time on a heading line padded with spaces: issue 30); trailing decorations are
# cut with string methods (see _md_heading_name, closed_core).
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}(?P<text>.*)$")
_BOLD_HEADING = re.compile(r"^\s{0,3}\*\*(?P<name>[^*]+)\*\*\s*+:?(?P<rest>.*)$")
_COLON_HEADING = re.compile(r"^\s{0,3}(?P<name>[A-Za-z][A-Za-z &/]{1,40}?)\s*:\s*(?P<rest>.*)$")
_APPENDED_NAMES = frozenset(_APPENDED_BLOCKS.values())
_BULLET = re.compile(r"^\s*(?:[-*•+]|\d{1,3}[.)])\s+(?P<text>.*)$")
_EMPTY_ITEMS = frozenset(
    {"none", "n/a", "na", "nothing", "-", "—", "(none)", "none yet", "なし", "无", "無", "없음"}
)

_CLOSE_WORDS = (
    r"done|resolved|fixed|completed?|finished|superseded|obsolete|no longer relevant|"
    r"完了|済み?|解決済み|解決|已完成|已解决|完成"
)
_CLOSED_PATTERNS: tuple[re.Pattern[str], ...] = (
    # (the whitespace before a mark is not matched: the core is stripped anyway, and a
    # leading ``\s*`` re-scanned every run of spaces from each of its positions)
    re.compile(rf"[(\[]\s*+(?:{_CLOSE_WORDS})\s*+[)\]]\s*+(?:[.。]\s*+)?$", re.IGNORECASE),
    re.compile(rf"(?<!\s)\s++[-–—:]\s*+(?:{_CLOSE_WORDS})\s*+(?:[.。]\s*+)?$", re.IGNORECASE),
    re.compile(rf"^\s*+(?:{_CLOSE_WORDS})\s*+[:\-–—]\s*", re.IGNORECASE),
    re.compile(r"^\s*\[[xX✓✔]\]\s*"),
    re.compile(r"^\s*+[✓✔✅]\s*|(?<!\s)\s*+[✓✔✅]\s*+$"),
)
_UNCHECKED = re.compile(r"^\s*\[\s\]\s*")
_WORDS = re.compile(r"[a-z0-9]+(?:[.,:/_\-][a-z0-9]+)*|[^\W\x00-\x7f]")
_KEY = re.compile(r"^\s*+(?P<key>[^:=\s][^:=\n]{0,59}?)\s*[:=]\s*+\S")


@dataclass
class ParsedSummary:
    """A summary split into its preamble and sections (canonical names where known)."""

    preamble: str = ""
    sections: dict[str, list[str]] = field(default_factory=dict)

    @property
    def structured(self) -> bool:
        """True when at least one known section was found."""
        return any(name in SECTIONS for name in self.sections)


def _canonical(name: str) -> str | None:
    key = re.sub(r"\s+", " ", name.strip().strip("*:#").strip()).lower()
    return _ALIASES.get(key) or _APPENDED_BLOCKS.get(key)


def _heading(line: str) -> tuple[str, str] | None:
    """``(section name, inline text)`` if ``line`` opens a section, else None.

    Markdown headings open any section (unknown names are kept as they are); bold and
    ``Name:`` forms open only known sections, so an item like ``Note: x`` stays an item.
    """
    md = _MD_HEADING.match(line)
    if md:
        name = _md_heading_name(md.group("text"))
        if name is not None:
            name = name.strip().rstrip(":").strip()
            return (_canonical(name) or name, "")
    for pattern in (_BOLD_HEADING, _COLON_HEADING):
        m = pattern.match(line)
        if m:
            canonical = _canonical(m.group("name"))
            if canonical is not None:
                return (canonical, m.group("rest").strip())
    return None


def _md_heading_name(text: str) -> str | None:
    """The name in what follows a Markdown heading's ``#`` marks: surrounding spaces and
    closing ``#``s cut (``"## Notes ##"`` → ``"Notes"``); None when nothing is left."""
    body = text.strip()
    if not body:
        return None
    return body.rstrip("#").rstrip() or body[:1]


def parse_summary(text: str) -> ParsedSummary:
    """Split ``text`` into preamble and sections; list sections into items.

    A bullet line starts an item; an indented non-bullet line continues the previous item;
    any other line is an item of its own. Single-valued sections keep their text whole.
    Items that only say "none" are dropped.
    """
    parsed = ParsedSummary()
    preamble: list[str] = []
    current: str | None = None
    raw: dict[str, list[str]] = {}
    for line in text.splitlines():
        head = _heading(line)
        if head is not None:
            current, inline = head
            raw.setdefault(current, [])
            if inline:
                raw[current].append(inline)
            continue
        if current is None:
            preamble.append(line)
        else:
            raw[current].append(line)
    parsed.preamble = "\n".join(preamble).strip()
    for name, lines in raw.items():
        if name in SINGLE_VALUED:
            value = "\n".join(lines).strip()
            single = _bullet_text(value) if "\n" not in value else value
            parsed.sections[name] = [] if _is_empty_item(single) else [single]
        else:
            parsed.sections[name] = _items(lines)
    return parsed


def _bullet_text(line: str) -> str:
    m = _BULLET.match(line)
    return m.group("text").strip() if m else line.strip()


def _items(lines: list[str]) -> list[str]:
    items: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        bullet = _BULLET.match(line)
        if bullet is None and items and line[:1].isspace():
            items[-1] = f"{items[-1]}\n  {line.strip()}"
            continue
        items.append(bullet.group("text").strip() if bullet else line.strip())
    return [item for item in items if not _is_empty_item(item)]


def _is_empty_item(item: str) -> bool:
    return item.strip().strip(".。").lower() in _EMPTY_ITEMS or not item.strip()


def closed_core(item: str) -> str | None:
    """The item's text without its closing mark, or None when the item is not closed."""
    struck = _struck_core(item)
    if struck is not None:
        return struck
    for pattern in _CLOSED_PATTERNS:
        core, n = pattern.subn("", item, count=1)
        if n and core.strip():
            return core.strip()
    return None


def _struck_core(item: str) -> str | None:
    """The text between ``~~`` and ``~~`` when the whole item is struck through (a full
    stop may follow), else None. String methods, not a pattern: ``.+~~`` followed by
    optional spaces re-scanned the spaces from every ``~~`` (quadratic, issue 30)."""
    text = item.strip()
    if not text.endswith("~~") and text[-1:] in (".", "。"):
        text = text[:-1].rstrip()
    if len(text) < 5 or not text.startswith("~~") or not text.endswith("~~"):
        return None
    return text[2:-2].strip()


def words(text: str) -> frozenset[str]:
    """The comparison words of an item (see module docstring)."""
    return frozenset(_WORDS.findall(_UNCHECKED.sub("", text).lower()))


def _restates(previous: frozenset[str], new: frozenset[str]) -> bool:
    """True when every word of a previous item reappears in a new one."""
    return bool(previous) and previous <= new


def _refers_to(closing: frozenset[str], item: frozenset[str]) -> bool:
    """True when a closing mark's text plausibly names ``item`` (most words shared)."""
    common = len(closing & item)
    smaller = min(len(closing), len(item))
    if smaller == 0:
        return False
    if smaller == 1:
        return common == 1 and len(closing) == len(item)
    return common >= 2 and common / smaller >= 0.6


def _key(item: str) -> str | None:
    m = _KEY.match(item)
    if not m:
        return None
    key = " ".join(sorted(words(m.group("key"))))
    return key or None


def _merge_list(name: str, previous: list[str], new: list[str],
                closings: list[frozenset[str]]) -> list[str]:
    new_words = [words(closed_core(item) or item) for item in new]
    new_keys = [_key(item) for item in new] if name == "Key data" else [None] * len(new)
    used = [False] * len(new)
    out: list[str] = []
    for item in previous:
        item_words = words(closed_core(item) or item)
        if any(_refers_to(c, item_words) for c in closings):
            continue
        key = _key(item) if name == "Key data" else None
        replaced = False
        for i, candidate in enumerate(new):
            if used[i]:
                continue
            if (key is not None and new_keys[i] == key) or _restates(item_words, new_words[i]):
                out.append(candidate)
                used[i] = True
                replaced = True
                break
        if not replaced:
            out.append(item)
    out.extend(item for i, item in enumerate(new) if not used[i])
    if name in OPEN_SECTIONS:
        out = [item for item in out if closed_core(item) is None]
    seen: set[frozenset[str] | str] = set()
    unique: list[str] = []
    for item in out:
        ident: frozenset[str] | str = words(item) or item.strip()
        if ident in seen:
            continue
        seen.add(ident)
        unique.append(item)
    return unique


def merge_working_summaries(previous: str, new: str) -> str:
    """Merge a new working summary into the previous one (rules: module docstring).

    Returns ``new`` unchanged when it has no recognised section, or when ``previous`` has
    none (an unstructured previous summary was folded in by the model itself).
    """
    new_p = parse_summary(new)
    if not new_p.structured:
        return new.strip()
    prev_p = parse_summary(previous)
    if not prev_p.structured:
        return new.strip()

    closings_by_section: dict[str, list[frozenset[str]]] = {}
    all_closings: list[frozenset[str]] = []
    for name, items in new_p.sections.items():
        for item in items:
            core = closed_core(item)
            if core is not None:
                closing = words(core)
                closings_by_section.setdefault(name, []).append(closing)
                all_closings.append(closing)

    names = list(SECTIONS)
    for name in [*prev_p.sections, *new_p.sections]:
        if name not in names and name not in _APPENDED_NAMES:
            names.append(name)
    merged: dict[str, list[str]] = {}
    for name in names:
        prev_items = prev_p.sections.get(name, [])
        new_items = new_p.sections.get(name, [])
        if name in SINGLE_VALUED:
            merged[name] = new_items or prev_items
            continue
        closings = all_closings if name in OPEN_SECTIONS else closings_by_section.get(name, [])
        merged[name] = _merge_list(name, prev_items, new_items, closings)
    return render_summary(ParsedSummary(preamble=new_p.preamble, sections=merged))


def drop_appended_blocks(text: str) -> str:
    """``text`` without blocks that are appended after finalising (see above).

    A model that copies the previous summary's "Facts kept verbatim:" list into its answer
    would otherwise leave two lists once the appender adds its own.
    """
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        head = _heading(line)
        if head is not None:
            skipping = head[0] in _APPENDED_NAMES
            if skipping:
                continue
        elif skipping and (not line.strip() or _BULLET.match(line)):
            continue
        else:
            skipping = False
        out.append(line)
    return "\n".join(out).strip()


def render_summary(parsed: ParsedSummary) -> str:
    """Markdown form: ``## Section`` headings, ``- item`` bullets, "none" for empty lists."""
    blocks: list[str] = [parsed.preamble] if parsed.preamble else []
    for name, items in parsed.sections.items():
        if name in _APPENDED_NAMES:
            continue
        if name in SINGLE_VALUED:
            body = items[0] if items else "(none)"
        elif items:
            body = "\n".join(f"- {item}" for item in items)
        else:
            body = "- (none)"
        blocks.append(f"## {name}\n{body}")
    return "\n\n".join(blocks)
