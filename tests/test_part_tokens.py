"""Token estimates of audio and file parts: by size, conservative, never 0, never text."""

from __future__ import annotations

import base64
import io
import math
import wave

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack import ChatMessage
from ctxstack.messages import AudioPart, FilePart
from ctxstack.tokens import HEURISTIC, SEED_HEURISTIC, CalibratingCounter, estimate_tokens
from ctxstack.tokens import _parts as pt
from ctxstack.tokens._counter import IMAGE_TOKENS, MESSAGE_OVERHEAD


def audio(data: str, fmt: str = "wav") -> AudioPart:
    return AudioPart.model_validate({"input_audio": {"data": data, "format": fmt}})


def inline_file(data: str, mime: str | None = "application/pdf",
                filename: str | None = None) -> FilePart:
    file_data = f"data:{mime};base64,{data}" if mime else data
    return FilePart.model_validate({"file": {"file_data": file_data,
                                             **({"filename": filename} if filename else {})}})


def wav_b64(seconds: float, rate: int = 16_000, channels: int = 1, width: int = 2) -> str:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(b"\x01\x02" * int(seconds * rate * channels * width / 2))
    return base64.b64encode(buf.getvalue()).decode()


def test_page_image_cost_is_the_image_cost() -> None:
    assert pt.IMAGE_PAGE_TOKENS == IMAGE_TOKENS


def test_base64_payload_reads_size_and_mime_only() -> None:
    raw = b"x" * 1000
    encoded = base64.b64encode(raw).decode()
    assert pt.base64_payload(encoded) == ("", 0, 1000)
    assert pt.base64_payload(f"data:Application/PDF;base64,{encoded}") == (
        "application/pdf", len("data:Application/PDF;base64,"), 1000)
    for n in (1, 2, 3, 4, 5):
        assert pt.base64_payload(base64.b64encode(b"a" * n).decode())[2] == n


@pytest.mark.parametrize(("rate", "channels", "width"), [(8_000, 1, 2), (16_000, 1, 2),
                                                         (24_000, 1, 2), (44_100, 2, 2)])
def test_wav_duration_comes_from_its_header(rate: int, channels: int, width: int) -> None:
    part = audio(wav_b64(3.0, rate, channels, width))
    assert pt.audio_seconds(part) == pytest.approx(3.0, abs=0.01)
    assert pt.audio_tokens(part) == math.ceil(pt.audio_seconds(part)
                                              * pt.AUDIO_TOKENS_PER_SECOND)


def test_wav_without_a_readable_header_falls_back_to_the_lowest_common_rate() -> None:
    data = base64.b64encode(b"\0" * 32_000).decode()  # no RIFF header
    assert pt.audio_seconds(audio(data)) == 32_000 / pt.WAV_FALLBACK_BYTES_PER_SECOND
    # the fallback over-counts every common PCM rate (conservative)
    real = audio(wav_b64(2.0, 8_000))
    headerless = audio("AAAA" + base64.b64encode(b"\0" * 32_044).decode()[4:])
    assert pt.audio_tokens(headerless) >= pt.audio_tokens(real)


def test_mp3_and_other_formats_by_assumed_bitrate() -> None:
    data = base64.b64encode(b"\xff" * 40_000).decode()
    assert pt.audio_seconds(audio(data, "mp3")) == 40_000 / pt.MP3_BYTES_PER_SECOND
    assert pt.audio_seconds(audio(data, "MP3")) == 40_000 / pt.MP3_BYTES_PER_SECOND
    assert pt.audio_seconds(audio(data, "ogg")) == 40_000 / pt.OTHER_AUDIO_BYTES_PER_SECOND
    assert pt.audio_tokens(audio(data, "ogg")) > pt.audio_tokens(audio(data, "mp3"))


@pytest.mark.parametrize("data", ["A", "AA==", "AAAA", "x"])
def test_never_zero(data: str) -> None:
    for part in (audio(data), audio(data, "mp3"), audio(data, "flac"),
                 inline_file(data), inline_file(data, "text/plain"), inline_file(data, None)):
        assert pt.binary_part_tokens(part) >= 1


def test_pdf_pages_by_size_capped_and_floored() -> None:
    assert pt.pdf_pages(0) == 1
    assert pt.pdf_pages(pt.PDF_BYTES_PER_PAGE) == 1
    assert pt.pdf_pages(pt.PDF_BYTES_PER_PAGE + 1) == 2
    assert pt.pdf_pages(10**9) == pt.PDF_MAX_PAGES
    data = base64.b64encode(b"%" * (3 * pt.PDF_BYTES_PER_PAGE)).decode()
    assert pt.file_tokens(inline_file(data)) == 3 * pt.PDF_PAGE_TOKENS
    # a bare base64 payload named *.pdf, or of an unknown type, is a document too
    assert pt.file_tokens(inline_file(data, None, "a.PDF")) == 3 * pt.PDF_PAGE_TOKENS
    assert pt.file_tokens(inline_file(data, "application/msword")) == 3 * pt.PDF_PAGE_TOKENS


def test_inline_text_files_by_bytes() -> None:
    data = base64.b64encode(b"a" * 3000).decode()
    assert pt.file_tokens(inline_file(data, "text/plain")) == 1000
    assert pt.file_tokens(inline_file(data, "application/json")) == 1000
    assert pt.file_tokens(inline_file(data, "text/csv", "t.pdf")) == 1000


def test_references_cost_a_fixed_documented_amount() -> None:
    for ref in ({"file_id": "file-abc"}, {"file_url": "https://x/y.pdf"}):
        part = FilePart.model_validate({"file": ref})
        assert pt.file_tokens(part) == pt.FILE_REFERENCE_TOKENS == 10 * pt.PDF_PAGE_TOKENS
    spoken = ChatMessage.from_openai({"role": "assistant", "content": "ok",
                                      "audio": {"id": "audio_1"}})
    plain = ChatMessage.assistant("ok")
    for counter in (HEURISTIC, SEED_HEURISTIC):
        assert (counter.count_message(spoken) - counter.count_message(plain)
                == pt.AUDIO_REFERENCE_TOKENS)


# --------------------------------------------------------------------------- large payloads
TEN_MB = 10 * 1024 * 1024


def _same_length_payloads() -> list[str]:
    """Three 10 MB payloads of one length: real-looking base64, one repeated character,
    and characters that are not base64 at all past the first 64 (which is all a WAV
    header read looks at)."""
    head = base64.b64encode(b"\0" * 48).decode()
    return [
        base64.b64encode(bytes(range(256)) * (TEN_MB // 256 * 3 // 4)).decode()[:TEN_MB],
        "A" * TEN_MB,
        head + "!" * (TEN_MB - len(head)),
    ]


@pytest.mark.parametrize("make", [
    lambda d: audio(d, "wav"), lambda d: audio(d, "mp3"), lambda d: audio(d, "aac"),
    lambda d: inline_file(d), lambda d: inline_file(d, "text/markdown"),
])
def test_a_10mb_payload_is_counted_by_its_length_alone(make: object) -> None:
    assert callable(make)
    counts = {pt.binary_part_tokens(make(data)) for data in _same_length_payloads()}
    assert len(counts) == 1
    (count,) = counts
    assert count > 0


def test_counters_never_feed_a_binary_payload_to_text_estimation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    payload = "A" * TEN_MB
    message = ChatMessage.user([{"type": "text", "text": "what is said here?"},
                                {"type": "input_audio",
                                 "input_audio": {"data": payload, "format": "mp3"}},
                                {"type": "file", "file": {
                                    "file_data": f"data:application/pdf;base64,{payload}"}}])
    seen: list[int] = []
    original = type(HEURISTIC).count_text

    def spy(self: object, text: str) -> int:
        seen.append(len(text))
        return original(self, text)  # type: ignore[arg-type]

    monkeypatch.setattr(type(HEURISTIC), "count_text", spy)
    total = HEURISTIC.count_message(message)
    assert seen
    assert max(seen) < 100
    expected_binary = sum(pt.binary_part_tokens(p) for p in message.binary_parts)
    assert total == MESSAGE_OVERHEAD + original(HEURISTIC, "what is said here?") + (
        expected_binary)
    assert expected_binary == pt.audio_tokens(message.binary_parts[0]) + (
        pt.PDF_MAX_PAGES * pt.PDF_PAGE_TOKENS)


def test_estimate_tokens_and_the_calibrating_counter_count_binary_parts() -> None:
    data = base64.b64encode(b"\0" * 8_000).decode()
    parts = [{"type": "input_audio", "input_audio": {"data": data, "format": "mp3"}}]
    assert estimate_tokens(parts) == 2 * pt.AUDIO_TOKENS_PER_SECOND
    message = ChatMessage.user(parts)
    calibrating = CalibratingCounter(HEURISTIC)
    assert calibrating.count_message(message) >= HEURISTIC.count_message(message)


_B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@settings(max_examples=200, deadline=None)
@given(body=st.text(alphabet=_B64_ALPHABET, min_size=0, max_size=3_000),
       other=st.text(alphabet=_B64_ALPHABET + "!~ ", min_size=0, max_size=3_000),
       fmt=st.sampled_from(["wav", "mp3", "flac"]), wav_header=st.booleans(),
       kind=st.sampled_from(["audio", "pdf", "text", "bare"]))
def test_estimates_depend_on_the_payload_length_and_head_only(
        body: str, other: str, fmt: str, wav_header: bool, kind: str) -> None:
    head = wav_b64(0.5)[:64] if wav_header else "AAAA" * 16
    n = max(len(body), len(other))
    first = head + body.ljust(n, "A")
    second = head + other.ljust(n, "B")

    def make(data: str) -> AudioPart | FilePart:
        if kind == "audio":
            return audio(data, fmt)
        return inline_file(data, {"pdf": "application/pdf", "text": "text/plain",
                                  "bare": None}[kind])

    assert pt.binary_part_tokens(make(first)) == pt.binary_part_tokens(make(second)) >= 1
    longer = make(first + "AAAA" * 10_000)
    assert pt.binary_part_tokens(longer) >= pt.binary_part_tokens(make(first))
