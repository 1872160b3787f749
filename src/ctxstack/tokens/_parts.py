"""Token estimates for binary content parts (audio, files) and assistant audio references.

A binary part is never text: feeding megabytes of base64 to a text estimator would cost
time linear in the payload and produce a number that means nothing (base64 tokenises at
~1.3 characters a token, while a provider bills audio by duration and PDFs by page). So
these estimates read only what is O(1) to read — the length of the base64 string, the
MIME type at the head of a ``data:`` URL, and the fixed-size header of a WAV file — and
derive a **conservative** cost from it: one that does not under-count common inputs,
since under-counting means an upstream overflow error, while over-counting only means an
earlier compaction. Every estimate is at least 1.

Where each figure comes from:

* **Audio: tokens per second.** OpenAI bills user audio at 1 token per 100 ms (10 a
  second; Realtime / ``gpt-4o-audio`` documentation), Google's Gemini at 32 a second
  ("audio is converted at 32 tokens per second", Gemini token-counting guide), and the
  proxy sits in front of either: :data:`AUDIO_TOKENS_PER_SECOND` takes the larger.
* **WAV duration.** Read from the ``fmt`` chunk's byte-rate field (48 decoded bytes at
  the start of the data: RIFF header, ``fmt `` chunk) when it sits where nearly every
  writer puts it; duration = payload bytes / byte rate. Otherwise assume
  :data:`WAV_FALLBACK_BYTES_PER_SECOND` (8 kHz, 16-bit mono PCM: the lowest rate speech
  WAV is commonly recorded at, so any common PCM WAV is over- rather than under-counted).
* **MP3 duration.** Payload bytes at :data:`MP3_BYTES_PER_SECOND` (32 kbit/s, the lowest
  MPEG-1 Layer III bitrate and typical of speech; music at 128 kbit/s or more is
  over-counted). The bitrate is not read from the stream: an ID3 tag of any size may
  come first, so the frame header is not at a fixed offset.
* **Other audio formats** (passed through for servers that take them): payload bytes at
  :data:`OTHER_AUDIO_BYTES_PER_SECOND` (16 kbit/s, the low end of speech codecs such as
  Opus at voice quality), so a compressed format is not under-counted.
* **PDF files.** OpenAI puts "both the extracted text and an image of each page" into the
  context (PDF files guide). A page costs :data:`PDF_PAGE_TOKENS`: one page image at
  ctxstack's image cost (765, a high-detail 1024 px image: 85 + 4 tiles × 170) plus
  :data:`PDF_PAGE_TEXT_TOKENS` (a dense page: ~600 words). Pages are estimated from size
  at :data:`PDF_BYTES_PER_PAGE` (text PDFs run 10-50 KB a page, fonts included; scans run
  far more and are over-counted) and capped at :data:`PDF_MAX_PAGES` (OpenAI takes at
  most 100 pages per request), never below 1.
* **Inline text files** (``text/*``, JSON, XML, CSV data URLs): payload bytes /
  :data:`TEXT_FILE_BYTES_PER_TOKEN` (3: one token per CJK character in UTF-8; English runs
  ~4 bytes a token). Other inline files are counted as PDFs (documents of pages).
* **File references** (``file_id`` / ``file_url``: the content is not in the request):
  :data:`FILE_REFERENCE_TOKENS`, a fixed cost of 10 PDF pages. It cannot be known; a
  deployment that attaches bigger documents by id should keep more headroom.
* **Assistant audio references** (``{"id": "audio_..."}``: the provider replays the
  spoken answer): :data:`AUDIO_REFERENCE_TOKENS`, 30 seconds of audio.
"""

from __future__ import annotations

import binascii
import math
import struct

from ctxstack.messages import AudioPart, FilePart

IMAGE_PAGE_TOKENS = 765
"""The image of one PDF page: ctxstack's image cost (``ctxstack.tokens._counter.IMAGE_TOKENS``)."""
AUDIO_TOKENS_PER_SECOND = 32
WAV_FALLBACK_BYTES_PER_SECOND = 16_000
MP3_BYTES_PER_SECOND = 4_000
OTHER_AUDIO_BYTES_PER_SECOND = 2_000
PDF_PAGE_TEXT_TOKENS = 800
PDF_PAGE_TOKENS = IMAGE_PAGE_TOKENS + PDF_PAGE_TEXT_TOKENS
PDF_BYTES_PER_PAGE = 25_000
PDF_MAX_PAGES = 100
TEXT_FILE_BYTES_PER_TOKEN = 3
FILE_REFERENCE_TOKENS = 10 * PDF_PAGE_TOKENS
AUDIO_REFERENCE_TOKENS = 30 * AUDIO_TOKENS_PER_SECOND

_DATA_URL_HEAD = 256
"""How far a ``data:`` URL's comma is looked for: a MIME type and parameters, no more."""
_TEXT_MIME = ("text/", "application/json", "application/xml", "application/csv")
_WAV_HEADER_CHARS = 64  # base64 characters holding the first 48 bytes of the file


def base64_payload(data: str) -> tuple[str, int, int]:
    """``(mime, start, size)`` of a base64 payload, reading O(1) characters of it.

    ``data`` is a bare base64 string or a ``data:<mime>;base64,<payload>`` URL; ``mime``
    is ``""`` when there is none, ``start`` where the payload begins, ``size`` its decoded
    byte count (from its length and ``=`` padding; the payload is not validated).
    """
    mime = ""
    start = 0
    if data.startswith("data:"):
        comma = data.find(",", 5, _DATA_URL_HEAD)
        if comma >= 0:
            mime = data[5:comma].split(";", 1)[0].strip().lower()
            start = comma + 1
    length = len(data) - start
    padding = 0
    if length and data[-1] == "=":
        padding = 2 if length > 1 and data[-2] == "=" else 1
    return mime, start, max(0, length * 3 // 4 - padding)


def _wav_byte_rate(data: str, start: int) -> int | None:
    """The byte rate in a canonical WAV header (``RIFF`` … ``WAVE`` ``fmt ``), else None."""
    head = data[start:start + _WAV_HEADER_CHARS]
    try:
        raw = binascii.a2b_base64(head)
    except (binascii.Error, ValueError):
        return None
    if len(raw) < 32 or raw[:4] != b"RIFF" or raw[8:16] != b"WAVEfmt ":
        return None
    (rate,) = struct.unpack_from("<I", raw, 28)
    return rate or None


def audio_seconds(part: AudioPart) -> float:
    """The duration of an audio part's payload, as the module doc derives it."""
    audio = part.input_audio
    _, start, size = base64_payload(audio.data)
    fmt = audio.format.lower()
    if fmt == "wav":
        rate = _wav_byte_rate(audio.data, start) or WAV_FALLBACK_BYTES_PER_SECOND
    elif fmt == "mp3":
        rate = MP3_BYTES_PER_SECOND
    else:
        rate = OTHER_AUDIO_BYTES_PER_SECOND
    return size / rate


def audio_tokens(part: AudioPart) -> int:
    """Tokens of an audio part: its duration × :data:`AUDIO_TOKENS_PER_SECOND`, ≥ 1."""
    return max(1, math.ceil(audio_seconds(part) * AUDIO_TOKENS_PER_SECOND))


def _is_pdf(mime: str, filename: str | None) -> bool:
    return mime == "application/pdf" or (
        not mime and (filename or "").lower().endswith(".pdf"))


def pdf_pages(size: int) -> int:
    """Pages a PDF of ``size`` bytes is assumed to have (1 to :data:`PDF_MAX_PAGES`)."""
    return min(PDF_MAX_PAGES, max(1, math.ceil(size / PDF_BYTES_PER_PAGE)))


def file_tokens(part: FilePart) -> int:
    """Tokens of a file part: inline text by size, other inline files by pages, a
    reference at the fixed :data:`FILE_REFERENCE_TOKENS` (see the module doc); ≥ 1."""
    file = part.file
    if file.file_data is None:
        return FILE_REFERENCE_TOKENS
    mime, _, size = base64_payload(file.file_data)
    if not _is_pdf(mime, file.filename) and mime.startswith(_TEXT_MIME):
        return max(1, math.ceil(size / TEXT_FILE_BYTES_PER_TOKEN))
    return pdf_pages(size) * PDF_PAGE_TOKENS


def binary_part_tokens(part: AudioPart | FilePart) -> int:
    """Tokens of one binary part (never 0; never reads the payload as text)."""
    if isinstance(part, AudioPart):
        return audio_tokens(part)
    return file_tokens(part)
