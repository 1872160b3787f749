"""Sentence material for the synthetic conversations, per language.

Filler sentences carry no exact values on purpose (only small counts), so a planted fact
is the only place its value occurs. Every template is one sentence; ``{cn}`` is a project
codename, ``{svc}`` a service name, ``{n}`` a small number.
"""

from __future__ import annotations

from typing import Literal

Lang = Literal["en", "zh", "ja"]

CODENAMES = [
    "Osprey", "Kestrel", "Marlin", "Heron", "Lynx", "Puffin", "Otter", "Condor", "Ibis",
    "Falcon", "Badger", "Wren", "Orca", "Tapir", "Gecko", "Bison", "Quokka", "Raven",
    "Sable", "Tern", "Vireo", "Walrus", "Yak", "Zebu", "Dingo", "Egret", "Finch", "Gannet",
]
SERVICES = ["billing-api", "ledger-sync", "search-indexer", "auth-gateway", "report-worker",
            "invoice-renderer", "event-bus", "image-resizer"]

FILLER: dict[Lang, list[str]] = {
    "en": [
        "I went through the {svc} dashboards again this morning.",
        "The {cn} team asked whether we can move faster on this.",
        "Let me restate where we are so nothing gets lost.",
        "The error rate on {svc} looked normal for most of the day.",
        "We should double-check the rollout plan before touching production.",
        "Nobody on the {cn} side has complained about latency so far.",
        "I think the simplest option is still the safest one here.",
        "The logs from {svc} show about {n} retries per hour, which is expected.",
        "Please keep the explanation short, the reviewers are busy.",
        "That matches what the on-call engineer told me yesterday.",
        "The migration notes for {cn} are mostly complete now.",
        "We can revisit the caching question after the release.",
        "I would rather not change the schema twice in one week.",
        "The staging environment behaved the same way as production.",
        "It took {n} minutes for the nightly job to finish last time.",
        "Good point, the monitoring alerts need a clearer owner.",
        "The {svc} deployment went out without any incident.",
        "Let us write the follow-up tasks down before we forget them.",
        "I checked the runbook and the steps are still accurate.",
        "The customer success team wants a summary by the end of the week.",
        "There were {n} open pull requests for {svc} at the last count.",
        "Understood, I will keep that in mind for the next step.",
    ],
    "zh": [
        "我今天早上又看了一遍{svc}的监控面板。",
        "{cn}团队问我们能不能加快进度。",
        "我先把目前的情况整理一下，免得遗漏。",
        "{svc}的错误率在一天的大部分时间里都很正常。",
        "在动生产环境之前，我们应该再核对一下上线计划。",
        "到目前为止，{cn}那边没有人抱怨延迟问题。",
        "我觉得最简单的方案仍然是最稳妥的。",
        "{svc}的日志显示每小时大约重试{n}次，这在预期之内。",
        "请把说明写得简短一些，评审的同事都很忙。",
        "这和值班工程师昨天告诉我的情况一致。",
        "{cn}的迁移说明现在基本完成了。",
        "缓存的问题可以等发布之后再讨论。",
        "我不希望一周之内修改两次数据库结构。",
        "预发布环境的表现和生产环境完全一样。",
        "上次夜间任务花了{n}分钟才跑完。",
        "说得对，监控告警需要一个更明确的负责人。",
        "{svc}的部署顺利完成，没有出现任何事故。",
        "我们先把后续任务记下来，以免忘记。",
        "我查看了运维手册，步骤仍然准确。",
        "客户成功团队希望在本周结束前拿到一份总结。",
    ],
    "ja": [
        "今朝もう一度{svc}のダッシュボードを確認しました。",
        "{cn}チームから、もう少し早く進められないかと聞かれました。",
        "抜け漏れがないように、現状を整理しておきます。",
        "{svc}のエラー率は一日のほとんどの時間で正常でした。",
        "本番環境に触る前に、リリース計画をもう一度確認すべきです。",
        "今のところ、{cn}側からレイテンシについての苦情は出ていません。",
        "ここでは一番シンプルな案がやはり一番安全だと思います。",
        "{svc}のログでは一時間あたり約{n}回のリトライがあり、想定どおりです。",
        "レビュー担当者が忙しいので、説明は短めにお願いします。",
        "昨日オンコール担当のエンジニアから聞いた内容と一致しています。",
        "{cn}の移行メモはほぼ完成しました。",
        "キャッシュの件はリリース後に改めて検討しましょう。",
        "一週間のうちにスキーマを二回変更するのは避けたいです。",
        "ステージング環境も本番環境と同じ挙動でした。",
        "前回は夜間ジョブが終わるまでに{n}分かかりました。",
        "確かに、監視アラートの担当者をはっきりさせる必要があります。",
        "{svc}のデプロイは問題なく完了しました。",
        "忘れないうちに、フォローアップのタスクを書き出しておきましょう。",
        "ランブックを確認しましたが、手順はまだ正確です。",
        "カスタマーサクセスチームは週末までにまとめが欲しいそうです。",
    ],
}

OPENERS: dict[Lang, list[str]] = {
    "en": ["Quick update from my side.", "Here is where things stand.", "One more thing.",
           "Thanks, that helps.", "Let me add some context.", "Following up on the last point."],
    "zh": ["我这边简单同步一下。", "目前的情况是这样的。", "还有一件事。", "谢谢，这很有帮助。",
           "我补充一些背景。", "接着上一个问题说。"],
    "ja": ["こちらから簡単に共有します。", "現状は次のとおりです。", "もう一点あります。",
           "ありがとうございます、助かります。", "少し背景を補足します。", "前の話の続きです。"],
}

# How a fact is stated. {subject} names the fact, {value} is its exact value.
FACT_SENTENCE: dict[Lang, list[str]] = {
    "en": ["For the record, {subject} is {value}.", "Please note that {subject} is {value}.",
           "To be precise, {subject} is {value}, nothing else."],
    "zh": ["记录一下：{subject}是{value}。", "请注意，{subject}是{value}。",
           "准确地说，{subject}是{value}，不是别的。"],
    "ja": ["記録として、{subject}は{value}です。", "念のため、{subject}は{value}です。",
           "正確には、{subject}は{value}で、それ以外ではありません。"],
}
CONSTRAINT_SENTENCE: dict[Lang, str] = {
    "en": "One hard rule for the whole session: {subject} is {value}, do not deviate from it.",
    "zh": "整个会话有一条硬性规定：{subject}是{value}，不得偏离。",
    "ja": "このセッション全体の厳守ルールです：{subject}は{value}で、これから外れないでください。",
}
QUESTION: dict[Lang, str] = {
    "en": "What is {subject}?",
    "zh": "{subject}是什么？",
    "ja": "{subject}は何ですか？",
}

# Subjects by fact kind: each names one fact unambiguously through the codename.
SUBJECTS: dict[str, dict[Lang, list[str]]] = {
    "number": {
        "en": ["the approved budget for the {cn} migration",
               "the measured peak throughput of {cn}", "the reconciled balance of the {cn} account"],
        "zh": ["{cn}迁移项目的批准预算", "{cn}实测的峰值吞吐量", "{cn}账户核对后的余额"],
        "ja": ["{cn}移行プロジェクトの承認済み予算", "{cn}で計測したピークスループット",
               "{cn}口座の照合後残高"],
    },
    "id": {
        "en": ["the invoice number of the {cn} vendor", "the support ticket for the {cn} outage",
               "the change request for the {cn} rollout"],
        "zh": ["{cn}供应商的发票编号", "{cn}故障的工单号", "{cn}上线的变更申请号"],
        "ja": ["{cn}ベンダーの請求書番号", "{cn}障害のサポートチケット", "{cn}リリースの変更申請番号"],
    },
    "path": {
        "en": ["the export file path for {cn}", "the config file that {cn} reads"],
        "zh": ["{cn}的导出文件路径", "{cn}读取的配置文件"],
        "ja": ["{cn}のエクスポートファイルのパス", "{cn}が読み込む設定ファイル"],
    },
    "date": {
        "en": ["the cut-over date for {cn}", "the contract end date for {cn}"],
        "zh": ["{cn}的切换日期", "{cn}的合同到期日"],
        "ja": ["{cn}の切り替え日", "{cn}の契約終了日"],
    },
    "constraint": {
        "en": ["the only read replica allowed for {cn}", "the batch size limit for {cn}",
               "the spending cap for {cn}"],
        "zh": ["{cn}唯一允许使用的只读副本", "{cn}的批处理大小上限", "{cn}的支出上限"],
        "ja": ["{cn}で使用を許可された唯一のリードレプリカ", "{cn}のバッチサイズ上限",
               "{cn}の支出上限"],
    },
}

SYSTEM_PROMPT = (
    "You are Atlas, the operations assistant of Northwind Freight (policy {policy}). "
    "Answer precisely, quote exact values, and reply in the language the user writes in."
)
QUERY: dict[Lang, str] = {
    "en": "Before we close today (ref {ref}), answer precisely from our conversation: {question}",
    "zh": "今天结束之前（编号{ref}），请根据我们的对话准确回答：{question}",
    "ja": "今日の締めくくりに（参照{ref}）、これまでの会話から正確に答えてください：{question}",
}
