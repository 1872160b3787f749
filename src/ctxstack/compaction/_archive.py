"""Reversible compaction: what a compaction removes stays retrievable.

Every message the guard masks, summarises or drops is handed to an *archive* first; the
placeholder or summary that replaces it names a reference, and the agents get a
``recall`` tool (:mod:`ctxstack.agent._recall`) that searches the archive or reads one
message back by reference. Compaction then loses nothing for good: it only moves detail
out of the context window to where the model can fetch it.

:class:`Archive` is the protocol (async, so a database can implement it: the chat service
uses the stored messages themselves, see ``ctxstack.store.archive``);
:class:`HistoryArchive` is the in-memory implementation for library users.

Search is **hybrid** (issue 29), two BM25 rankings, each over its own tokens, fused by
**reciprocal rank fusion** with a small constant: a message scores Σ 1 / (:data:`RRF_K` +
its rank) over the halves that list it (rank from 1, each half's best
:data:`FUSION_DEPTH`). The halves see different tokens, so a message only one of them finds
is the case a hybrid exists for; with the constant 2 a half's first (1/3) still beats a
message both halves rank 5th or lower (2/7), while agreement near the top still wins. The
usual constant 60 (Cormack et al. 2009, fitted for fusing many deep TREC runs) lets any
message both halves list within their top ~60 outscore one half's first: it lost exactly
those one-sided hits, and scored below its own n-gram half on natural questions. The
constant, and the choice of rank over min-max score fusion, were made on a fitting set apart
from every evaluation set (``benchmarks/bench_recall.py`` (vii-f) says which and what
each reached):

* **words** — BM25 over word tokens, for space-separated scripts, where words carry the
  meaning of a natural question ("When did Mia go to the support group?"). The index is
  SQLite's FTS5 (``porter unicode61``: case-folded, diacritics and punctuation stripped,
  English words stemmed) in an in-memory database of the standard library — a maintained
  BM25 (``bm25()``), rather than more hand-written ranking here, and the same tokenizer the
  service's SQLite store uses (``ctxstack.store.archive``). Question words that carry no
  meaning (:data:`STOP_WORDS`: "when", "did", "the"…) are left out of the query;
* **character n-grams** — BM25 over the bigrams and trigrams of the case-folded,
  NFKC-normalised text, for Chinese and Japanese, where words are not separated, and for
  identifiers such as ``ORD-99812-XK``; a one-character query (a CJK word such as ``猫``)
  matches through the bigrams that contain it. Common n-grams weigh little; stop words
  are left out of the n-gram query too.

A CJK question matches no word token (FTS5 keeps a run of CJK characters as one token),
so its order is the n-gram order; an English question is ranked by both.

**Replies.** In a conversation the answer to a question is the next turn, and it seldom
repeats the question's words: asked "Why did John run for office again?", both rankings
find Maria's "What made you decide to run again?", not John's reply. So a turn that asks
a question (:func:`asks_question`) lends half its fused score (:data:`REPLY_CREDIT`) to
its reply — the next user or assistant turn of the other role, tool calls and outputs
between them skipped — on top of the reply's own score, so a reply ranks near the
question that finds it. Built after real dialogues (LoCoMo) showed the failure; the share
was chosen on half of them and on the fitting set, the other half evaluated once (see
``benchmarks/bench_recall.py`` (vii-f)). The in-memory archive links a turn to the next
one it archives (compaction archives in conversation order); a store links its rows by
their order (:meth:`HistoryArchive.link_reply`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ctxstack.compaction._summaries import LATEST_SUMMARY_REF, SummaryNode
from ctxstack.errors import InputError
from ctxstack.messages import ChatMessage

MAX_INDEXED_CHARS = 100_000
"""Characters of one message that are indexed (the whole message is still stored)."""
SNIPPET_CHARS = 240
ARCHIVE_REF_KEY = "archive_ref"
"""Metadata key a placeholder or archived copy carries: the reference it stands for."""
MASKED_KEY = "masked"
"""Metadata flag of a cleared tool output (never cleared twice)."""
_K1 = 1.2
_B = 0.75
RRF_K = 2
"""Reciprocal rank fusion's constant: rank r scores 1 / (2 + r) (see the module doc)."""
REPLY_CREDIT = 0.5
"""Share of a question's fused score lent to its reply (see the module doc): the largest
of 0.5, 0.75 and 1 that kept the fitting set's figures (1 ranked a distractor question's
reply over the evidence there), chosen with the development half of the real dialogues."""
FUSION_DEPTH = 50
"""How many of each ranking's best take part in the fusion."""
MAX_QUERY_CHARS = 1_000
"""Characters of a query that are searched for. A search query is a few words; a longer
one (a model pasting a whole document into ``recall``) is cut here, so its cost stays
bounded: 100,000 characters of words took ~5 s of ranking over 3,000 messages."""
_STOP_TEXT = """
a about am an and any are as at be been but by can could did do does doing for from had
has have how i if in into is it its me my of on or our should so than that the their them
then there these they this those to was we were what when where which while who whom why
will with would you your
s t ll re ve m
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
"""English function words left out of a query: they match almost every message. The last
line is what a word tokenizer leaves of clitics — "Aisha's" gives ``aisha`` and ``s``,
"don't" ``don`` and ``t`` — which would otherwise match every possessive or contraction."""
_WORD = re.compile(r"\w+")  # one character class, repeated: linear time
_QUESTION = re.compile(r"[？؟]|\?(?![\w=&])|[か吗嗎](?:[。\n]|$)")
"""A question mark: full-width or Arabic anywhere, an ASCII one not followed by a word
character, ``=`` or ``&`` ("Really?" asks; a URL's ``?key=value`` does not); or a
question particle that ends a sentence without one, as Japanese and Chinese often write
it: ``か`` (``ですか。``, ``でしょうか``) or ``吗``/``嗎`` before ``。``, a line break or
the end. One character and one lookahead each: linear time on any input."""
_QUESTION_CHARS = ("?", "？", "؟", "か", "吗", "嗎")
"""What a question holds at least one of: a substring test before the pattern runs."""
TURN_ROLES = frozenset({"user", "assistant"})
"""The roles of the turns that ask and reply (tool traffic does neither)."""
_WORD_TOKENIZER = "porter unicode61 remove_diacritics 2"


class ArchiveHit(BaseModel):
    """One search result: the reference, its score, the message and a short snippet."""

    model_config = ConfigDict(frozen=True)

    ref: str
    score: float
    message: ChatMessage
    snippet: str


@runtime_checkable
class Archive(Protocol):
    """Where compaction puts what it removes (see the module doc)."""

    async def add(self, messages: Sequence[ChatMessage]) -> list[str]:
        """Archive ``messages``; their references, in order (a message already archived
        keeps its reference)."""
        ...

    async def search(self, query: str, k: int = 5) -> list[ArchiveHit]:
        """The ``k`` best-matching archived messages, best first."""
        ...

    async def get(self, ref: str) -> ChatMessage | None:
        """The archived message ``ref`` names, or None if there is none."""
        ...

    def __len__(self) -> int:
        """Messages archived so far (the agents offer ``recall`` once this is > 0)."""
        ...


def quote_query(query: str, chars: int = 200) -> str:
    """``query`` as a recall result quotes it back: repr'd and cut to ``chars`` (a model
    may pass a whole document as a query; the answer must not grow with it)."""
    return repr(query if len(query) <= chars else query[:chars] + "…")


def normalize_text(text: str) -> str:
    """Case-folded NFKC text with whitespace runs collapsed (what n-grams are taken of)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def ngrams(text: str) -> Counter[str]:
    """Character bigrams and trigrams of normalised ``text`` (a lone character for 1)."""
    norm = normalize_text(text)
    if len(norm) < 2:
        return Counter([norm]) if norm else Counter()
    grams: Counter[str] = Counter(norm[i : i + 2] for i in range(len(norm) - 1))
    grams.update(norm[i : i + 3] for i in range(len(norm) - 2))
    return grams


def query_words(query: str) -> list[str]:
    """The words of ``query`` that rank: case-folded word tokens less :data:`STOP_WORDS`,
    in order, without repeats."""
    words = _WORD.findall(normalize_text(query))
    return list(dict.fromkeys(w for w in words if w not in STOP_WORDS))


def content_query(query: str) -> str:
    """``query`` without its stop words (as whitespace-separated tokens), for the n-gram
    ranking; the query itself when nothing else is left (a question made of stop words
    still finds something)."""
    kept = [t for t in query.split() if " ".join(_WORD.findall(t.casefold())) not in STOP_WORDS]
    return " ".join(kept) if kept else query


def fts_match(words: Sequence[str]) -> str:
    """An FTS5 ``MATCH`` expression: any of ``words``, each quoted (so no word is read
    as an operator; the table's tokenizer splits it as it split the documents)."""
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def fuse(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> dict[str, float]:
    """Reciprocal rank fusion: each id scores Σ 1 / (k + rank), rank from 1, over the
    rankings it appears in."""
    scores: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, ref in enumerate(ranking, start=1):
            scores[ref] += 1.0 / (k + rank)
    return dict(scores)


def asks_question(message: ChatMessage) -> bool:
    """Whether ``message`` is a turn that asks something: a user or assistant message
    without tool calls whose text holds a question mark or ends a sentence with a
    question particle (:data:`_QUESTION`)."""
    if not is_turn(message):
        return False
    text = message.text
    # The substring tests skip the regex (~1 ms per 100K characters) for most texts.
    return any(c in text for c in _QUESTION_CHARS) and _QUESTION.search(text) is not None


def is_turn(message: ChatMessage) -> bool:
    """A user or assistant message without tool calls: what can ask or reply."""
    return message.role in TURN_ROLES and not message.tool_calls


def credit_replies(fused: dict[str, float], replies: dict[str, str],
                   share: float = REPLY_CREDIT) -> dict[str, float]:
    """``fused`` with ``share`` of each listed question's score added to its reply's (see
    the module doc); scores before the credit are what is lent, so credit does not chain."""
    out = dict(fused)
    for question, score in fused.items():
        reply = replies.get(question)
        if reply is not None:
            out[reply] = out.get(reply, 0.0) + share * score
    return out


def searchable_text(message: ChatMessage) -> str:
    """What is indexed: the text plus tool names and arguments."""
    parts = [message.text]
    if message.name:
        parts.append(message.name)
    for call in message.tool_calls or ():
        parts.append(f"{call.name} {call.arguments_json}")
    return "\n".join(p for p in parts if p)


def snippet(text: str, query: str, size: int = SNIPPET_CHARS) -> str:
    """About ``size`` characters of ``text`` around the first query word found in it."""
    if len(text) <= size:
        return text
    lowered = text.casefold()
    at = -1
    for word in sorted(query.casefold().split(), key=len, reverse=True):
        at = lowered.find(word)
        if at >= 0:
            break
    if at < 0:
        # CJK queries have no spaces: fall back to the first bigram found.
        norm = query.casefold().strip()
        at = next((lowered.find(norm[i:i + 2]) for i in range(max(0, len(norm) - 1))
                   if lowered.find(norm[i:i + 2]) >= 0), 0)
    start = max(0, at - size // 3)
    piece = text[start : start + size]
    return ("…" if start else "") + piece + ("…" if start + size < len(text) else "")


def _wire_key(message: ChatMessage) -> bytes:
    """A digest of ``message`` as a provider sees it (its OpenAI form): equal keys, one
    archived message."""
    wire = json.dumps(message.to_openai(), ensure_ascii=False, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.blake2b(wire.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class HistoryArchive:
    """In-memory :class:`Archive` with hybrid search (see the module doc).

    References are ``"a1"``, ``"a2"``…, in archiving order. A message is archived once: one
    that carries an ``archive_ref`` in its metadata (a placeholder, or a copy already
    archived) keeps it, and one equal to an archived message on the wire (role, content,
    tool call and name; metadata aside) gets that message's reference. A caller that fits
    its whole stored history afresh at every call hands the guard the same messages as
    new objects each time: they keep their references, so the placeholders naming them
    stay byte-identical from call to call (a cached prefix) and the archive does not grow
    with every call. Safe to share between the guards of one conversation (single event
    loop).

    A turn archived after one that asks a question, of the other role, is its reply (see
    the module doc): the archive takes its order for the conversation's, as compaction
    archives. Tool calls and outputs between them do not break the link. So one archive
    per conversation: shared by two, a question one archives last could lend its score
    to the first turn the other archives next (the library's guards each have their own).

    Args:
        in_order: whether messages are added in the conversation's order (the default).
            ``False`` for an archive filled in any other order (a store's search
            candidates): then only :meth:`link_reply` links a reply.
    """

    def __init__(self, *, in_order: bool = True) -> None:
        self.in_order = in_order
        self._messages: dict[str, ChatMessage] = {}
        self._lengths: dict[str, int] = {}
        self._postings: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self._total_length = 0
        self._words: sqlite3.Connection | None = None
        self._summaries: dict[str, SummaryNode] = {}
        self._by_wire: dict[bytes, str] = {}
        self._replies: dict[str, str] = {}
        self._last_turn: str | None = None

    def close(self) -> None:
        """Free the word index's in-memory database, when done with the archive (a search
        afterwards ranks by n-grams alone). Also done when the archive is
        garbage-collected."""
        if self._words is not None:
            self._words.close()
            self._words = None

    def __del__(self) -> None:
        words = getattr(self, "_words", None)
        if words is not None:
            words.close()

    def _word_index(self) -> sqlite3.Connection:
        """The FTS5 word index (created on first use; one in-memory database each)."""
        if self._words is None:
            self._words = sqlite3.connect(":memory:", check_same_thread=False)
            self._words.execute(
                f"CREATE VIRTUAL TABLE words USING fts5(body, tokenize='{_WORD_TOKENIZER}')")
        return self._words

    def __len__(self) -> int:
        return len(self._messages)

    def __repr__(self) -> str:
        return f"HistoryArchive({len(self)} messages)"

    async def add(self, messages: Sequence[ChatMessage]) -> list[str]:
        """Archive ``messages`` (see :meth:`Archive.add`)."""
        refs = []
        for message in messages:
            if not isinstance(message, ChatMessage):
                raise InputError(f"add: expected ChatMessage objects, got {type(message).__name__}")
            known = message.metadata.get(ARCHIVE_REF_KEY)
            if not (isinstance(known, str) and known in self._messages):
                key = _wire_key(message)
                known = self._by_wire.get(key)
                if known is None:
                    refs.append(self._archive_new(message, key))
                    continue
            refs.append(known)
            if self.in_order and is_turn(message):
                self._last_turn = known  # archived before: what follows replies to it
        return refs

    def _archive_new(self, message: ChatMessage, key: bytes) -> str:
        """Store and index a message not archived yet (``key``: its wire digest); link it
        to the turn before when it replies to it. Its new reference."""
        ref = f"a{len(self._messages) + 1}"
        self._by_wire[key] = ref
        self._messages[ref] = message.replace(metadata={**message.metadata, ARCHIVE_REF_KEY: ref})
        text = searchable_text(message)[:MAX_INDEXED_CHARS]
        grams = ngrams(text)
        for gram, count in grams.items():
            self._postings[gram][ref] = count
        length = sum(grams.values())
        self._lengths[ref] = length
        self._total_length += length
        self._word_index().execute("INSERT INTO words(rowid, body) VALUES (?, ?)",
                                   (len(self._messages), _utf8(text)))
        if self.in_order and is_turn(message):
            if self._last_turn is not None:
                self._link(self._last_turn, ref)
            self._last_turn = ref
        return ref

    def link_reply(self, question: str, reply: str) -> None:
        """Record that archived message ``reply`` answers ``question`` (which must ask
        one, as a turn of the other role; otherwise nothing is recorded). :meth:`add` links
        the turns it archives in order; an archive that ranks a database's candidates with
        this one links them by the database's order.

        Raises:
            InputError: either reference names no archived message.
        """
        for ref in (question, reply):
            if not isinstance(ref, str) or ref not in self._messages:
                raise InputError(f"link_reply: no archived message has ref {ref!r}")
        self._link(question, reply)

    def _link(self, question: str, reply: str) -> None:
        asked, answer = self._messages[question], self._messages[reply]
        if (question != reply and question not in self._replies and asks_question(asked)
                and is_turn(answer) and answer.role != asked.role):
            self._replies[question] = reply

    async def add_summary(self, node: SummaryNode) -> str:
        """Keep a summary (:class:`~ctxstack.compaction._summaries.SummaryStore`): refs
        ``"s1"``, ``"s2"``…, in order. Summaries are not searched: their messages are."""
        if not isinstance(node, SummaryNode):
            raise InputError(f"add_summary: expected a SummaryNode, got {type(node).__name__}")
        ref = f"s{len(self._summaries) + 1}"
        self._summaries[ref] = node.model_copy(update={"ref": ref})
        return ref

    async def get_summary(self, ref: str) -> SummaryNode | None:
        """The summary ``ref`` names (``"summary"``: the newest; None if unknown)."""
        if not isinstance(ref, str):
            raise InputError(f"get_summary: ref must be a string, got {type(ref).__name__}")
        if ref.strip() == LATEST_SUMMARY_REF:
            return self._summaries.get(f"s{len(self._summaries)}")
        return self._summaries.get(ref.strip())

    async def get(self, ref: str) -> ChatMessage | None:
        """The archived message ``ref`` names (None if unknown)."""
        if not isinstance(ref, str):
            raise InputError(f"get: ref must be a string, got {type(ref).__name__}")
        return self._messages.get(ref.strip())

    async def search(self, query: str, k: int = 5) -> list[ArchiveHit]:
        """Word BM25 and n-gram BM25 fused by rank (see the module doc); best first, at
        most ``k``.

        Raises:
            InputError: an empty query or ``k`` < 1.
        """
        if not isinstance(query, str) or not query.strip():
            raise InputError("search: query must be a non-empty text")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"search: k must be a positive integer, got {k!r}")
        if not self._messages:
            return []
        query = query[:MAX_QUERY_CHARS]
        depth = max(k, FUSION_DEPTH)
        fused = credit_replies(
            fuse([self.word_ranking(query, depth), self.ngram_ranking(query, depth)]),
            self._replies)
        best = sorted(fused.items(), key=lambda item: (-item[1], _order(item[0])))[:k]
        return [
            ArchiveHit(ref=ref, score=round(score, 6), message=self._messages[ref],
                       snippet=snippet(searchable_text(self._messages[ref]), query))
            for ref, score in best
        ]

    def word_ranking(self, query: str, depth: int = FUSION_DEPTH) -> list[str]:
        """References by FTS5 ``bm25()`` over the query's words (stop words left out),
        best first, at most ``depth``."""
        words = query_words(query)
        if not words or self._words is None:
            return []
        rows = self._words.execute(
            "SELECT rowid FROM words WHERE words MATCH ? ORDER BY bm25(words), rowid DESC "
            "LIMIT ?", (_utf8(fts_match(words)), depth)).fetchall()
        return [f"a{rowid}" for (rowid,) in rows]

    def ngram_ranking(self, query: str, depth: int = FUSION_DEPTH) -> list[str]:
        """References by BM25 over character n-grams, best first, at most ``depth``."""
        n = len(self._messages)
        if not n:
            return []
        average = self._total_length / n or 1.0
        scores: dict[str, float] = defaultdict(float)
        for gram, posting in self._query_postings(content_query(query)):
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            weight = idf * (1.5 if len(gram) == 3 else 1.0)
            for ref, tf in posting.items():
                norm = _K1 * (1 - _B + _B * self._lengths[ref] / average)
                scores[ref] += weight * tf * (_K1 + 1) / (tf + norm)
        best = sorted(scores.items(), key=lambda item: (-item[1], _order(item[0])))
        return [ref for ref, _ in best[:depth]]

    def _query_postings(self, query: str) -> list[tuple[str, dict[str, int]]]:
        """The (n-gram, posting) pairs a query scores with.

        A one-character query (``猫``, ``犬`` — a whole word in Chinese and Japanese) has no
        bigram of its own: it matches through every indexed bigram that contains it, the
        bigram counts summed per message. One pass over the vocabulary, for that rare query
        only.
        """
        grams = ngrams(query)
        if len(grams) == 1:
            (char,) = grams
            if len(char) == 1:
                merged: dict[str, int] = defaultdict(int)
                for gram, posting in self._postings.items():
                    if gram == char or (len(gram) == 2 and char in gram):
                        for ref, tf in posting.items():
                            merged[ref] += tf
                return [(char, dict(merged))] if merged else []
        return [(g, p) for g in grams if (p := self._postings.get(g))]


def _utf8(text: str) -> str:
    """``text`` as SQLite can store it: a lone surrogate (from a broken decode upstream)
    becomes U+FFFD instead of failing the whole archive call."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _order(ref: str) -> int:
    """Newer first among equal scores."""
    digits = ref.lstrip("a")
    return -int(digits) if digits.isdigit() else 0
