"""The offline demo model: what ``ctxstack serve`` answers with when no LLM is configured.

It is a :class:`~ctxstack.llm.ScriptedLLM` with a deterministic handler, so the page, the
browser test and a first-time user all see the whole machinery work without a network:

* as the ReAct agent's model it calls a tool first (``calculate`` when the question holds
  arithmetic, ``text_stats`` otherwise), then gives a brief answer from the tool result;
* it declares a small context window (:data:`DEMO_CONTEXT_SIZE`, 8K, of which
  :data:`DEMO_MAX_OUTPUT_TOKENS` are reserved for the answer) unless the admin's model
  config or the environment sets one, so a first run shows history compaction within a
  few turns with no variables (:func:`demo_budget`);
* as the synthesis model (streamed) it writes a long Markdown answer — long on purpose,
  so that small budget fills after a few turns — that quotes the question, reports the
  tool result and says what the model could see (including whether a conversation
  summary was present);
* as the summariser (a compaction prompt) it writes a short factual summary that keeps
  the numbers it saw;
* as the DAG planner / analyzer it returns a valid one- or two-step plan and "achieved".

It answers in Japanese when the question is written in Japanese, else in English: the
only language detection needed here is "does the text contain kana or CJK ideographs".
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ctxstack.budget import ModelBudget
from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION, is_summary_instruction
from ctxstack.compaction._summarize import transcript_entries
from ctxstack.llm import ScriptedLLM, ToolSpec
from ctxstack.messages import ChatMessage
from ctxstack.server.tools import find_arithmetic

DEMO_MODEL_NAME = "ctxstack-demo"
DEMO_CONTEXT_SIZE = 8_000
"""The demo model's declared context window (tokens)."""
DEMO_MAX_OUTPUT_TOKENS = 4_000
"""The demo model's declared answer reserve: 4,000 input tokens are left for the context,
so the stored history (about 800 tokens a turn) is first summarised on the sixth turn."""
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")


def is_japanese(text: str) -> bool:
    """True when ``text`` contains kana or CJK ideographs (the demo then answers in Japanese)."""
    return _CJK.search(text) is not None


def _quote(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _last_user_text(messages: Sequence[ChatMessage]) -> str:
    for message in reversed(messages):
        if message.role == "user" and message.kind in (None, "query", "inject"):
            return message.text
    return ""


def _query_text(messages: Sequence[ChatMessage]) -> str:
    """The current question: the pinned query if marked, else the last user message."""
    for message in reversed(messages):
        if message.role == "user" and message.kind == "query":
            return message.text
    return _last_user_text(messages)


def _tool_results_since_user(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role == "user" and message.kind in (None, "query", "inject"):
            break
        if message.role == "tool":
            out.append(message)
    return list(reversed(out))


def _has_summary(messages: Sequence[ChatMessage]) -> bool:
    return any(m.role == "system" and m.text.startswith(SUMMARY_PREFIX) for m in messages)


def _sections(text: str) -> dict[str, str]:
    """``"Header:\nbody"`` blocks of a synthesis prompt, by header (the engines' layout)."""
    out: dict[str, str] = {}
    for block in re.split(r"\n\n(?=[A-Z][^\n]{0,80}:\n)", text):
        head, sep, body = block.partition(":\n")
        if sep and "\n" not in head:
            out[head.strip()] = body.strip()
    return out


def _system_text(messages: Sequence[ChatMessage]) -> str:
    return "\n".join(m.text for m in messages if m.role == "system")


class DemoHandler:
    """The handler behind :func:`build_demo_llm` (a callable ``(messages, tools) -> reply``)."""

    def __call__(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None
    ) -> str | ChatMessage:
        system = _system_text(messages)
        if messages and messages[-1].role == "user" and is_summary_instruction(
                messages[-1].text):
            # the cache-aligned request: the conversation itself, the instruction last
            previous = [m.text for m in messages[:-1] if m.kind == "summary"]
            entries = transcript_entries([m for m in messages[:-1] if m.role != "system"])
            return self.summarise([ChatMessage.user("\n".join([*previous, *entries]))])
        if system.rstrip().endswith(LANGUAGE_INSTRUCTION):
            return self.summarise(messages)
        structured = self.structured(system, messages)
        if structured is not None:
            return structured
        if tools:
            return self.agent_step(messages, tools)
        return self.long_answer(messages)

    # ------------------------------------------------------------------ agent
    def agent_step(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> str | ChatMessage:
        names = {t.get("function", {}).get("name") for t in tools}
        results = _tool_results_since_user(messages)
        question = _last_user_text(messages)
        if not results:
            expression = find_arithmetic(question)
            if expression and "calculate" in names:
                return ScriptedLLM.tool_call("calculate", {"expression": expression})
            if "text_stats" in names:
                return ScriptedLLM.tool_call("text_stats", {"text": question[:4000]})
        found = "; ".join(_quote(r.text, 160) for r in results) or "no tool was needed"
        query_at = next((i for i, m in enumerate(messages) if m.kind == "query"), len(messages))
        history = [m for m in messages[:query_at] if m.role in ("user", "assistant")]
        summary = "yes" if _has_summary(messages) else "no"
        # The synthesis step only sees this brief answer, so it carries what the agent saw.
        context = f"Context: {len(history)} earlier messages; summary: {summary}."
        if is_japanese(question):
            return f"ツールの結果: {found}\n{context}"
        return f"Tool findings: {found}\n{context}"

    # ------------------------------------------------------------------ synthesis
    def long_answer(self, messages: Sequence[ChatMessage]) -> str:
        prompt = _last_user_text(messages)
        sections = _sections(prompt)
        question = (sections.get("Request") or sections.get("User request")
                    or _query_text(messages))
        findings = [line.split("->", 1)[1].strip()
                    for line in sections.get("Tool calls and results", "").splitlines()
                    if "->" in line]
        step_results = sections.get("Step results", "")
        finding = _quote("; ".join(findings) or step_results, 300)
        brief = next((v for k, v in sections.items() if k.startswith("Brief answer")), "")
        match = re.search(r"Context: (\d+) earlier messages; summary: (yes|no)", brief)
        visible = int(match.group(1)) if match else None
        summary = bool(match and match.group(2) == "yes")
        if is_japanese(question):
            return _japanese_answer(question, finding, summary, visible)
        return _english_answer(question, finding, summary, visible)

    # ------------------------------------------------------------------ summariser
    def summarise(self, messages: Sequence[ChatMessage]) -> str:
        """A short factual summary: the questions asked (carried over from the previous
        summary, then the newly folded ones) and the numbers seen."""
        body = "\n".join(m.text for m in messages if m.role != "system")
        numbers = list(dict.fromkeys(_NUMBER.findall(body)))[:30]
        lines_in = [line.strip() for line in body.splitlines() if line.strip()]
        carried = [line[2:] for line in lines_in if line.startswith("- ") and (
            line.startswith("- The user asked") or line.startswith("- ユーザーの質問"))]
        asked = [line.removeprefix("[user]").strip() for line in lines_in
                 if line.startswith("[user]")]
        japanese = is_japanese(body)
        if japanese:
            lines = ["これまでの会話の要約（デモモデル）:"]
            lines += [f"- {c}" for c in carried]
            lines += [f"- ユーザーの質問: 「{_quote(q, 120)}」" for q in asked]
            if numbers:
                lines.append("数値: " + ", ".join(numbers))
        else:
            lines = ["Summary of the earlier conversation (demo model):"]
            lines += [f"- {c}" for c in carried]
            lines += [f'- The user asked: "{_quote(q, 120)}"; the demo model answered it '
                      "with a tool result and its fixed explanation." for q in asked]
            if numbers:
                lines.append("Numbers mentioned: " + ", ".join(numbers))
        return "\n".join(lines[:14])

    # ------------------------------------------------------------------ DAG
    def structured(self, system: str, messages: Sequence[ChatMessage]) -> str | None:
        """JSON for the DAG planner and analyzer, recognised by their system prompts."""
        try:
            from ctxstack.dag import _prompts as dag_prompts
        except ImportError:  # the DAG engine is optional for the demo
            return None
        question = _last_user_text(messages)
        planner = getattr(dag_prompts, "PLANNER_ROLE", None)
        analyzer = getattr(dag_prompts, "ANALYZER_ROLE", None)
        if planner and system.startswith(planner):
            return json.dumps(demo_plan(question), ensure_ascii=False)
        if analyzer and system.startswith(analyzer):
            return json.dumps(
                {"achieved": True, "confidence": 0.9, "reasoning": "demo: every step finished"},
                ensure_ascii=False,
            )
        return None


def demo_plan(question: str) -> dict[str, Any]:
    """A small plan: measure the question and, if it holds arithmetic, calculate in parallel."""
    steps: list[dict[str, Any]] = [
        {"id": "s1", "task": f"Measure this text with text_stats: {_quote(question, 200)}",
         "dependencies": [], "tool_hint": "text_stats"},
    ]
    expression = find_arithmetic(question)
    if expression:
        steps.append({"id": "s2", "task": f"Calculate {expression}", "dependencies": [],
                      "tool_hint": "calculate"})
    return {"steps": steps}


def _english_answer(question: str, finding: str, summary: bool, visible: int | None) -> str:
    quoted = _quote(question)
    finding_line = (f"The tool step reported: `{finding}`." if finding
                    else "No tool result was needed for this question.")
    seen = "not reported" if visible is None else str(visible)
    memory_line = (
        "A **conversation summary** was part of my context this turn: earlier turns were "
        "compacted to fit the budget, and the dashed line above marks where."
        if summary else
        "No conversation summary was in my context this turn: the whole history still fits."
    )
    return f"""## Answer (demo model)

You asked: "{quoted}"

{finding_line}

This reply comes from ctxstack's **offline demo model**, a deterministic stand-in for a real
LLM. It used a tool, then wrote this answer, so the tool steps, the streamed text and the
usage card below are all real output of the service. Configure `LLM_BASE_URL`,
`LLM_API_KEY` and `LLM_MODEL` to talk to a real model instead.

### What I could see
- Earlier messages of this conversation in my context: **{seen}**
- {memory_line}

### How ctxstack keeps a long conversation inside the window
1. **Budget (layer 5).** The usable input is `context_size - max_output_tokens`, taken from
   the admin's model config, then the environment, then the model (this demo model
   declares 8k - 4k), then the defaults (128k - 64k).
2. **DbMemory (layer 4).** Each turn loads the stored history once and compacts it to the
   budget: older turns become one `[Conversation summary]`, recent ones stay verbatim.
   The summary is saved as a checkpoint, so the next turn does not summarise again.
3. **ContextGuard (layer 3).** Before every model call in the agent loop, oversized
   messages are cut and the whole list is checked against the budget; if it is over, it
   is compacted with a prompt suited to the situation.
4. **CompactUtils (layer 2).** Token estimates (about 4 ASCII characters or 1.5 CJK
   characters per token), smart truncation that never splits a tool call from its result,
   and LLM compaction that keeps numbers, IDs and dates verbatim.
5. **Memories (layer 1).** The simple building blocks: window and summary memories.

The question you ask is always pinned: however hard the history is compacted, the model
sees it word for word. Messages you send while a turn runs are pinned too, and the agent
reads them at its next step.

### Why this answer is long
A real model writes as much as the question needs. The demo writes a fixed, fairly long
text on purpose, so that with a small budget you can watch compaction happen after a few
turns: look for the dashed line that says how many earlier messages were summarized, and
for the token counts on each answer's card, which include the summariser's own calls.

### What to try next
- **Click the dashed divider** once it appears: it opens *what the model remembers* — the
  summary text, the facts kept verbatim (numbers, IDs, dates) and the range of messages it
  covers. Everything above the divider reaches the model only through that summary.
- **Watch the context meter** under each answer and above the message box: it shows how
  full the context was at the last model call, split into system prompt, summary,
  history, tool outputs and the question, against the budget. Hover or tap it for details.
- **Switch to DAG mode** at the top: the question is split into a small plan whose steps
  run in parallel; the plan is drawn as a graph and each step's result opens on click.
- **Press Stop** while an answer streams: what was written so far is kept, marked as
  stopped, and stays in the conversation.
"""


def _japanese_answer(question: str, finding: str, summary: bool, visible: int | None) -> str:
    quoted = _quote(question)
    finding_line = (f"ツールの結果: `{finding}`" if finding
                    else "この質問にはツールは必要ありませんでした。")
    memory_line = (
        "今回のコンテキストには**会話の要約**が含まれていました。以前のターンは予算に収まるよう"
        "圧縮され、その位置は上の破線で示されています。"
        if summary else
        "今回のコンテキストに会話の要約はありません。履歴全体がまだ予算に収まっています。"
    )
    return f"""## 回答（デモモデル）

ご質問: 「{quoted}」

{finding_line}

この回答は ctxstack の**オフライン・デモモデル**（実際の LLM の代わりに決まった出力を返すモデル）
によるものです。ツールを使ってから回答を書いたので、ツールのステップ、ストリーミングされた文章、
使用量カードはすべてサービスの実際の出力です。実際のモデルを使うには `LLM_BASE_URL`、
`LLM_API_KEY`、`LLM_MODEL` を設定してください。

### 見えていたもの
- コンテキスト内のこの会話の過去メッセージ数: **{"不明" if visible is None else visible}**
- {memory_line}

### ctxstack が長い会話をウィンドウ内に保つ方法
1. **予算（第5層）**: 使用可能な入力は `context_size - max_output_tokens` です。
2. **DbMemory（第4層）**: ターンごとに履歴を一度読み込み、予算に合わせて圧縮します。古いターンは
   一つの `[Conversation summary]` になり、最近のものはそのまま残ります。
3. **ContextGuard（第3層）**: エージェントの各反復の前に予算を確認し、超えていれば状況に合った
   プロンプトで圧縮します。
4. **CompactUtils（第2層）**: トークン推定、ツール呼び出しと結果を分けないスマート切り詰め、
   数値や ID をそのまま残す LLM 圧縮。
5. **メモリ（第1層）**: ウィンドウメモリと要約メモリ。

質問は常にピン留めされるので、履歴がどれだけ圧縮されてもモデルはそのまま読みます。実行中に
送ったメッセージもピン留めされ、エージェントは次のステップでそれを読みます。

### この回答が長い理由
小さな予算で数ターン会話すると圧縮が起きる様子を確認できるよう、デモはわざと長めの固定文を
書きます。「… earlier messages summarized by AI」という破線（クリックするとモデルが覚えている
内容が開きます）と、要約の呼び出しも含めた
各回答のトークン数を確認してください。
"""


def build_demo_llm(
    *,
    delay: float = 0.05,
    chunk_delay: float = 0.0,
    context_size: int = 128_000,
    max_output_tokens: int = 64_000,
    name: str = DEMO_MODEL_NAME,
) -> ScriptedLLM:
    """The demo model (see the module docstring): a :class:`ScriptedLLM` whose streamed
    answers arrive at a readable pace (``chunk_delay`` seconds between deltas), as a real
    model's would. Build one per turn: it records its calls."""
    return ScriptedLLM(
        handler=DemoHandler(),
        delay=delay,
        stream_chunk=24,
        chunk_delay=chunk_delay,
        context_size=context_size,
        max_output_tokens=max_output_tokens,
        name=name,
    )


def demo_budget(budget: ModelBudget) -> ModelBudget:
    """``budget`` with the demo model's declared window wherever no one set a value.

    Only numbers that came from the library defaults (source ``"default"``, or
    ``"main:default"`` for the fast role) are replaced, with source ``"demo"``: an admin
    model config or an environment variable always wins, and a real endpoint never goes
    through here (its budget is its own).
    """
    demo = {"context_size": DEMO_CONTEXT_SIZE, "max_output_tokens": DEMO_MAX_OUTPUT_TOKENS}
    values: dict[str, int] = {}
    sources = dict(budget.sources)
    for field, value in demo.items():
        if sources.get(field) in ("default", "main:default"):
            values[field] = value
            sources[field] = "demo"
    if not values:
        return budget
    return budget.model_copy(update={**values, "sources": sources})
