// One assistant answer on the page: its steps, the plan graph of a DAG turn, injects,
// the streamed answer, the usage card with Copy / Regenerate and the context meter, or a
// failure / "stopped" note. Live turns and reloaded history feed it the same SSE events,
// so both draw the same thing. What belongs to the whole conversation (the divider, the
// composer's meter, scrolling, asking again) goes through `hooks`.

import { decorateCodeBlocks } from "./codeblocks.js";
import { PlanView } from "./dagview.js";
import { el } from "./dom.js";
import { clip, dividerText, pretty, usageText } from "./format.js";
import { renderMarkdown } from "./markdown.js";
import { renderMeter } from "./meter.js";

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = el("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}

// ------------------------------------------------------------------ one assistant turn

/**
 * The view of one assistant answer. Live turns and reloaded history feed it the same
 * events (compact, step, inject, answer, done, error), so both draw the same thing.
 */
export class AssistantTurn {
  constructor(container) {
    this.root = el("div", "msg assistant");
    this.thinking = el("div", "thinking", "Thinking…");
    this.root.append(this.thinking);
    container.append(this.root);
    this.steps = null;
    this.stepList = null;
    this.stepCount = 0;
    this.toolSteps = new Map();
    this.answerEl = null;
    this.text = "";
    this.renderQueued = false;
    this.finished = false;
    this.replay = false; // drawing stored history: steps start collapsed
    this.context = null; // the last `context` reading (the meter)
    this.planView = null;
    this.question = null; // the question this answers (for Regenerate)
    this.hooks = {}; // onDivider(data), onContext(data), onRegenerate(turn), onRender()
  }

  append(node) {
    this.root.insertBefore(node, this.thinking.isConnected ? this.thinking : null);
  }

  ensureSteps() {
    if (!this.steps) {
      this.steps = el("details", "steps");
      this.steps.open = !this.finished && !this.replay;
      this.stepSummary = el("summary", "", "Details");
      this.stepList = el("div", "step-list");
      this.steps.append(this.stepSummary, this.stepList);
      this.append(this.steps);
    }
    return this.stepList;
  }

  countStep() {
    this.stepCount += 1;
    this.stepSummary.textContent = `${this.stepCount} step${this.stepCount === 1 ? "" : "s"}`;
  }

  handle(event, data) {
    switch (event) {
      case "compact": return this.onCompact(data);
      case "compact_start": return this.onSummarising(true);
      case "compact_end": return this.onSummarising(false);
      case "context": return this.onContext(data);
      case "step": return this.onStep(data);
      case "inject": return this.onInject(data);
      case "answer": return this.onAnswer(data);
      case "done": return this.onDone(data);
      case "error": return this.onError(data);
      default: return undefined;
    }
  }

  onCompact(data) {
    if (data?.scope === "step") {
      const what = data.hint === "step_dependency"
        ? "a dependency result over its cut was summarised for it" : "its context was compacted";
      this.ensureSteps().append(el("div", "step-note", `Step ${data.step ?? "?"}: ${what} (${data.method}).`));
      return;
    }
    if (data?.last_seq != null && data.method === "llm") {
      // The conversation's divider goes where the summarised span ends (remember.js).
      this.hooks.onDivider?.(data);
      if (data.scope === "run") {
        const turnPart = data.turn_messages ? ` and ${data.turn_messages} of this turn's tool messages` : "";
        this.ensureSteps().append(el("div", "step-note compact-note",
          `Context compacted mid-turn: ${dividerText(data)}${turnPart}.`));
      }
      return;
    }
    const divider = el("div", "compact-divider");
    divider.setAttribute("role", "separator");
    divider.dataset.method = data?.method || "";
    divider.append(el("span", "", dividerText(data)));
    if (data?.scope === "run" && this.steps) this.stepList.append(divider);
    else this.append(divider);
  }

  /** The summariser runs (compact_start) or finished (compact_end): a visible state. */
  onSummarising(running) {
    if (this.replay) return;
    this.root.classList.toggle("summarising", running);
    if (this.thinking.isConnected) {
      this.thinking.textContent = running ? "Summarising earlier messages…" : "Thinking…";
    }
  }

  onStep(data) {
    const list = this.ensureSteps();
    const kind = data?.kind;
    if (kind === "tool_call") {
      const item = el("details", "step running");
      const summary = el("summary");
      summary.append(el("span", "name", data.tool || "tool"), el("span", "status", "running…"));
      item.append(summary, el("pre", "args", pretty(data.arguments ?? {})));
      list.append(item);
      this.toolSteps.set(data.id || `${data.tool}:${this.stepCount}`, item);
      this.countStep();
    } else if (kind === "tool_result") {
      let item = this.toolSteps.get(data.id);
      if (!item) {
        item = el("details", "step");
        const summary = el("summary");
        summary.append(el("span", "name", data.tool || "tool"), el("span", "status"));
        item.append(summary);
        list.append(item);
        this.countStep();
      }
      item.classList.remove("running");
      item.classList.add(data.error ? "failed" : "ok");
      const ms = data.duration_ms != null ? ` · ${Math.round(data.duration_ms)} ms` : "";
      item.querySelector(".status").textContent = `${data.error ? "failed" : "done"}${ms}`;
      item.append(el("pre", "result", clip(pretty(data.result ?? ""), 20000)));
    } else if (kind === "dag_step" && this.planView?.step(data)) {
      // drawn on the plan graph
    } else if (kind === "dag_step") {
      const key = `dag:${data.id}`;
      let item = this.toolSteps.get(key);
      if (!item) {
        item = el("details", "step running");
        const summary = el("summary");
        summary.append(el("span", "name", `step ${data.id}`), el("span", "status"));
        item.append(summary, el("pre", "args", data.task || ""));
        list.append(item);
        this.toolSteps.set(key, item);
        this.countStep();
      }
      const status = data.status || "running";
      item.classList.toggle("running", status === "running");
      item.classList.toggle("ok", status === "done");
      item.classList.toggle("failed", status === "failed");
      item.querySelector(".status").textContent = status;
      if (data.result != null) {
        item.querySelector("pre.result")?.remove();
        item.append(el("pre", "result", clip(pretty(data.result), 20000)));
      }
    } else if (kind === "plan") {
      const steps = Array.isArray(data.steps) ? data.steps : [];
      const round = data.round > 1 ? ` (round ${data.round})` : "";
      list.append(el("div", "step-note", `Plan${round}: ${steps.length} step${steps.length === 1 ? "" : "s"}`));
      if (!this.planView) {
        const box = el("div", "plan-box");
        this.append(box);
        this.planView = new PlanView(box);
      }
      this.planView.plan(data);
    } else {
      const text = data?.text || data?.message || kind || "step";
      list.append(el("div", "step-note", clip(text, 500)));
    }
  }

  onInject(data) {
    const note = el("div", "injected", data?.text ?? "");
    if (data?.consumed === false) {
      note.classList.add("late");
      note.title = "Arrived after the answer was under way: kept in the conversation for the next turn.";
    }
    this.append(note);
  }

  onAnswer(data) {
    const delta = typeof data === "string" ? data : data?.delta ?? "";
    if (!this.answerEl) {
      this.answerEl = el("div", "answer streaming");
      this.append(this.answerEl);
    }
    this.text += delta;
    if (!this.renderQueued) {
      this.renderQueued = true;
      requestAnimationFrame(() => {
        this.renderQueued = false;
        this.answerEl.innerHTML = renderMarkdown(this.text);
        decorateCodeBlocks(this.answerEl, copyText);
        this.hooks.onRender?.();
      });
    }
  }

  setAnswer(text) {
    if (!text) return;
    if (!this.answerEl) {
      this.answerEl = el("div", "answer");
      this.append(this.answerEl);
    }
    this.text = text;
    this.answerEl.innerHTML = renderMarkdown(text);
    decorateCodeBlocks(this.answerEl, copyText);
  }

  onContext(data) {
    this.context = data;
    this.hooks.onContext?.(data);
  }

  /** Copy and Regenerate under a finished answer, and the meter of its last call. */
  addFooter(card) {
    const bar = el("div", "answer-actions");
    const copy = el("button", "btn btn-small copy-btn", "Copy");
    copy.type = "button";
    copy.addEventListener("click", async () => {
      const ok = await copyText(this.text);
      copy.textContent = ok ? "Copied" : "Copy failed";
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
    bar.append(copy);
    if (this.question) {
      const regen = el("button", "btn btn-small regen-btn", "Regenerate");
      regen.type = "button";
      regen.title = "Replace this answer with a new one (the question and its images stay)";
      regen.addEventListener("click", () => this.hooks.onRegenerate?.(this));
      bar.append(regen);
    }
    if (card) bar.append(card);
    this.append(bar);
    if (this.context) this.append(renderMeter(this.context, { label: "Context at the last call" }));
  }

  /** The client stopped the turn: keep the partial answer, say so in a neutral note. */
  markStopped() {
    if (this.root.querySelector(".turn-stopped")) return;
    if (this.answerEl) this.answerEl.innerHTML = renderMarkdown(this.text);
    decorateCodeBlocks(this.answerEl, copyText);
    this.root.classList.add("stopped");
    this.append(el("div", "turn-stopped", this.text
      ? "Stopped — the answer above is what was written before Stop. It is saved."
      : "Stopped before any answer was written."));
    this.addFooter(null);
    this.finish();
  }

  onDone(data) {
    if (!this.text && data?.answer) this.setAnswer(data.answer);
    else if (this.answerEl) this.answerEl.innerHTML = renderMarkdown(this.text);
    decorateCodeBlocks(this.answerEl, copyText);
    const usage = data?.usage || {};
    const card = el("div", "done-card");
    card.append(el("span", "usage", usageText(usage)));
    if (data?.iterations != null) {
      card.append(el("span", "", `${data.iterations} iteration${data.iterations === 1 ? "" : "s"}`));
    }
    if (data?.elapsed != null) card.append(el("span", "", `${Number(data.elapsed).toFixed(1)} s`));
    this.addFooter(card);
    this.finish();
  }

  onError(data) {
    if (data?.kind === "stopped") {
      this.markStopped();
      return;
    }
    const message = typeof data === "string" ? data : data?.message || "The turn failed.";
    this.append(el("div", "turn-error", message));
    this.finish();
  }

  finish() {
    if (this.finished) return;
    this.finished = true;
    this.thinking.remove();
    this.answerEl?.classList.remove("streaming");
    if (this.steps) this.steps.open = false;
  }
}
