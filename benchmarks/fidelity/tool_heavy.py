"""Held-out tool-heavy sessions for the truncation fill rows (issue 29).

Written apart from :mod:`benchmarks.fidelity.generator` (the development set the
truncation was built against) and after the truncation's rules were fixed; nothing in
``smart_truncate`` was changed after measuring on these. They have the shape the issue
describes — agent sessions of ~129K tokens whose tool loops return *large* outputs (log
dumps, CSV exports, HTML pages, JSON API pages, Chinese and Japanese documents; 1K–25K
tokens each, parallel calls now and then), ending with a new user question — where a walk
that stops at the first unit that does not fit keeps almost nothing.

Each session plants one fact per task in the user's request (a value the final question
could ask about) so the rows can also say how many requests survive verbatim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from benchmarks.fidelity.sizing import sizing_counter
from ctxstack.messages import ChatMessage, ToolCall

SYSTEM = ("You are a site-reliability agent. Use the tools, quote exact values from their "
          "output, and say when an output was cut.")
TASKS = [
    "Find out why checkout latency doubled after the {v} rollout.",
    "Reconcile the March invoices against export batch {v}.",
    "Check whether customer {v} was double-charged last week.",
    "请检查批次 {v} 的同步任务为什么失败。",
    "デプロイ {v} の後にエラー率が上がった原因を調べてください。",
    "Audit the access log for token {v} and list every caller.",
]
QUESTIONS = [
    "New question: which of these issues should we fix first, and why?",
    "One more thing — can you summarise what you found for the incident report?",
    "最后，请总结一下刚才的发现。",
    "最後に、見つかった問題を三行でまとめてください。",
]
SERVICES = ["checkout", "billing", "search", "auth", "ledger", "notifier"]


@dataclass(frozen=True)
class Session:
    """One held-out session and the values its task requests plant."""

    seed: int
    messages: list[ChatMessage]
    planted: list[str]

    @property
    def tokens(self) -> int:
        return sizing_counter().count_messages(self.messages)


def _log(rng: random.Random, lines: int) -> str:
    levels = ["INFO", "INFO", "INFO", "WARN", "ERROR"]
    return "\n".join(
        f"2026-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}Z {rng.choice(levels)} {rng.choice(SERVICES)} "
        f"req={rng.getrandbits(40):010x} status={rng.choice([200, 200, 201, 404, 500, 503])} "
        f"dur_ms={rng.randint(2, 4000)}"
        for _ in range(lines))


def _csv(rng: random.Random, rows: int) -> str:
    head = "invoice_id,customer,amount_eur,currency,issued,paid\n"
    return head + "\n".join(
        f"INV-{rng.randint(100000, 999999)},C{rng.randint(1000, 9999)},"
        f"{rng.uniform(5, 9000):.2f},EUR,2026-03-{rng.randint(1, 28):02d},"
        f"{rng.choice(['yes', 'no', 'partial'])}" for _ in range(rows))


def _html(rng: random.Random, blocks: int) -> str:
    words = ["latency", "regression", "cache", "replica", "timeout", "budget", "queue",
             "rollback", "shard", "index", "throttle", "retry"]
    body = "".join(
        f"<section><h2>{rng.choice(words).title()} {i}</h2><p>"
        + " ".join(rng.choice(words) for _ in range(rng.randint(30, 90)))
        + "</p></section>\n" for i in range(blocks))
    return f"<html><head><title>Runbook</title></head><body>\n{body}</body></html>"


def _cjk(rng: random.Random, sentences: int) -> str:
    zh = ["同步任务在凌晨三点失败。", "数据库连接池已满。", "重试三次后仍然超时。",
          "缓存命中率下降到百分之四十。", "请检查配置文件中的超时设置。"]
    ja = ["デプロイ後にエラー率が上昇しました。", "キャッシュの有効期限が短すぎます。",
          "レプリカの遅延が五秒を超えています。", "再試行の回数を増やしてください。"]
    pool = zh + ja
    return "".join(rng.choice(pool) for _ in range(sentences))


def _json_page(rng: random.Random, items: int) -> str:
    rows = ",".join(
        f'{{"id":"evt_{rng.getrandbits(32):08x}","service":"{rng.choice(SERVICES)}",'
        f'"amount":{rng.uniform(1, 500):.2f},"ok":{rng.choice(["true", "false"])}}}'
        for _ in range(items))
    return f'{{"page":1,"has_more":true,"data":[{rows}]}}'


OUTPUTS = {
    "read_log": lambda rng, size: _log(rng, size // 22),
    "export_csv": lambda rng, size: _csv(rng, size // 14),
    "fetch_page": lambda rng, size: _html(rng, size // 90),
    "read_doc": lambda rng, size: _cjk(rng, size // 12),
    "list_events": lambda rng, size: _json_page(rng, size // 28),
}


def session(seed: int, target_tokens: int = 129_000) -> Session:
    """One session of about ``target_tokens`` (counted as :mod:`benchmarks.fidelity.sizing`
    says), ending with a new question."""
    rng = random.Random(7_000 + seed)
    msgs = [ChatMessage.system(SYSTEM)]
    planted: list[str] = []
    call = 0
    counter = sizing_counter()
    while counter.count_messages(msgs) < target_tokens:
        value = f"{rng.choice(['R', 'B', 'C', 'T'])}-{rng.randint(10_000, 99_999)}"
        planted.append(value)
        msgs.append(ChatMessage.user(rng.choice(TASKS).format(v=value)))
        for _ in range(rng.randint(2, 6)):
            calls = []
            for _ in range(2 if rng.random() < 0.2 else 1):
                call += 1
                calls.append(ToolCall(id=f"t{seed}_{call}", name=rng.choice(list(OUTPUTS)),
                                      arguments={"target": value, "page": rng.randint(1, 9)}))
            msgs.append(ChatMessage.assistant(
                rng.choice([None, "Let me look at that.", "Checking the next source."]),
                tool_calls=calls))
            for c in calls:
                size = int(rng.choice([1_000, 3_000, 6_000, 12_000, 25_000]) * 4 * rng.uniform(0.7, 1.0))
                msgs.append(ChatMessage.tool(c.id, OUTPUTS[c.name](rng, size), name=c.name))
        msgs.append(ChatMessage.assistant(
            f"For {value}: the outputs point at {rng.choice(SERVICES)}; "
            f"{rng.randint(2, 40)} failing requests, mostly timeouts."))
    pinned = seed % 2 == 0
    msgs.append(ChatMessage.user(rng.choice(QUESTIONS), pinned=pinned,
                                 metadata={"kind": "query"} if pinned else {}))
    return Session(seed=seed, messages=msgs, planted=planted)
