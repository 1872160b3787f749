"""Long multi-session dialogues whose answers are phrases, not numbers (issue 14, set ii).

**Source.** Written for the recall benchmark by hand (topics, wording, values), apart from
the fact extractor and from the fidelity generator: nothing here was chosen by looking at
what the extractor or the archive's search matches, and the figures were measured once on
it, not tuned against it. Conversations are generated deterministically from a seed: the
same seed gives the same dialogue.

**Shape.** A personal-assistant chat over several *sessions* (each opened by the user
after a break), each session many turns of small talk and errands. A handful of *facts*
— a preference, a place, a plan, a reason, a name — are each stated exactly once, by the
user, never in the first sentence of a message (the benchmark's lossy summariser keeps
first sentences only, so it cannot carry a fact). The same topics also come up elsewhere
*without* the answer ("I still haven't decided about the anniversary dinner"), so a
search for the topic has to rank the one message that answers above those that only
mention it. The question names the topic, never the answer. Answers are multi-word
phrases no numeric or identifier pattern can catch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC


@dataclass(frozen=True)
class Topic:
    """One kind of fact: how it is stated (``{v}`` is the answer), the answers it may
    have, how it is asked about, and mentions of the topic that do not answer it."""

    plants: tuple[str, ...]
    values: tuple[str, ...]
    question: str
    mentions: tuple[str, ...]


TOPICS: tuple[Topic, ...] = (
    Topic(
        plants=("For our anniversary dinner I would like to go to {v}.",
                "I have decided the anniversary dinner should be at {v}.",
                "My pick for the anniversary dinner is {v}, please remember that."),
        values=("the little Basque place on Harrow Lane", "a table on the terrace at Villa Serrano",
                "the oyster bar by the old ferry pier", "the garden room at the Linden Hotel"),
        question="Where did I want to have the anniversary dinner?",
        mentions=("I keep going back and forth about the anniversary dinner.",
                  "The anniversary dinner is still a few weeks away, no rush.")),
    Topic(
        plants=("When you order for me, I take my coffee as {v}.",
                "Just so you know how I take my coffee: {v}.",
                "For the record, my coffee order is {v}."),
        values=("an oat milk flat white with no sugar",
                "a double espresso with a splash of cold milk",
                "black filter coffee and never decaf", "a cortado with a cinnamon stick"),
        question="How do I take my coffee?",
        mentions=("The coffee at the office has been terrible all week.",
                  "I had far too much coffee yesterday afternoon.")),
    Topic(
        plants=("My daughter's piano teacher is {v}, in case the school calls.",
                "The piano teacher my daughter sees every Thursday is {v}.",
                "If anyone asks, my daughter's piano teacher is {v}."),
        values=("Mrs Ingrid Halvorsen", "a retired organist called Tobias Brandt",
                "Ms Adaeze Umeh from the conservatory", "Mr Pelle Lindqvist"),
        question="Who is my daughter's piano teacher?",
        mentions=("My daughter has a piano lesson again this week.",
                  "The piano recital got moved, my daughter is a little nervous.")),
    Topic(
        plants=("I turned down the offer from the logistics firm because {v}.",
                "The real reason I said no to the logistics firm is that {v}.",
                "I declined the logistics job in the end, mainly because {v}."),
        values=("the commute would have eaten three hours a day",
                "they wanted me to relocate to Rotterdam within a month",
                "the team had no budget for the research I care about",
                "the contract banned any side projects"),
        question="Why did I turn down the job offer from the logistics firm?",
        mentions=("The recruiter from the logistics firm emailed me again.",
                  "I am still a bit unsure about the logistics firm decision.")),
    Topic(
        plants=("For the summer holiday the plan is to {v}.",
                "We finally agreed on the summer holiday: we will {v}.",
                "This summer we are going to {v}, the whole family agreed."),
        values=("rent a canal boat and drift from Llangollen to Chirk",
                "walk the coastal path from Porto up to Vigo",
                "spend a week at a farm stay near Matera",
                "take the night train to Vienna and cycle along the Danube"),
        question="What is our plan for the summer holiday?",
        mentions=("Everyone has an opinion about the summer holiday this year.",
                  "We should book something for the summer holiday soon.")),
    Topic(
        plants=("For my father's birthday present I settled on {v}.",
                "I know what to get my father for his birthday now: {v}.",
                "The birthday present for my father will be {v}."),
        values=("a hand-bound notebook with his initials",
                "a day of fly fishing lessons on the river Test",
                "a restored vintage Leica lens", "a framed map of the valley where he was born"),
        question="What birthday present did I choose for my father?",
        mentions=("My father's birthday is coming up and I am stuck for ideas.",
                  "My father says he does not want anything for his birthday, as always.")),
    Topic(
        plants=("We hid the spare house key {v}, do not tell anyone.",
                "The spare house key is now {v}.",
                "If I lock myself out again, the spare house key is {v}."),
        values=("under the blue flowerpot by the shed",
                "inside the hollow garden gnome near the gate",
                "taped behind the electricity meter cover",
                "in the bird box on the apple tree"),
        question="Where is the spare house key hidden?",
        mentions=("I nearly lost my house keys on the bus today.",
                  "We should get the locks on the back door checked.")),
    Topic(
        plants=("My grandmother grew up in {v}, she told me the whole story.",
                "It turns out my grandmother grew up in {v}.",
                "Grandma finally told me where she grew up: {v}."),
        values=("a fishing village on the island of Hiiumaa", "a hill town above Lake Orta",
                "a farm outside Ballina in County Mayo",
                "a mining settlement in the Harz mountains"),
        question="Where did my grandmother grow up?",
        mentions=("My grandmother called again, she sounded well.",
                  "I want to write down more of my grandmother's stories.")),
    Topic(
        plants=("For the book club I picked {v}.",
                "My choice for the book club this round is {v}.",
                "I am proposing {v} for the book club."),
        values=("a novel about lighthouse keepers called The Far Lamp",
                "an old travel memoir about crossing the Andes by mule",
                "a slim essay collection on walking in cities",
                "a thriller set on a night ferry to Helsinki"),
        question="Which book did I pick for the book club?",
        mentions=("The book club meets at Anna's place next time.",
                  "Half the book club never finishes the book anyway.")),
    Topic(
        plants=("At work the new rule is {v}.",
                "My manager announced a new rule today: {v}.",
                "Remember the new rule at work: {v}."),
        values=("no meetings on Wednesday mornings",
                "every release needs a second reviewer from another team",
                "all travel gets booked through the front office",
                "nobody deploys after three on a Friday"),
        question="What is the new rule at work?",
        mentions=("Work has been a lot of rules and paperwork lately.",
                  "My manager is in a good mood this week, for once.")),
)

LEADS = (
    "Oh, one more thing.", "Before I forget.", "Something I meant to tell you.",
    "Quick note for later.", "Also, this matters.", "By the way.",
)
SMALL_TALK = (
    "The weather was grey again and the trains were late.",
    "I spent most of the morning answering emails.",
    "We went for a long walk along the river after lunch.",
    "The neighbours are renovating their kitchen, so it was noisy.",
    "I tried a new recipe for lentil soup and it turned out fine.",
    "The cat knocked a glass off the table at six in the morning.",
    "My sister called and we talked for almost an hour.",
    "I finally fixed the squeaky door in the hallway.",
    "The supermarket had run out of bread again.",
    "I watched half of a documentary about glaciers before falling asleep.",
    "Traffic into town was slow because of the roadworks.",
    "I need to remember to water the plants on the balcony.",
    "The gym was almost empty this evening, which was nice.",
    "We played a board game with the kids until late.",
    "I started reorganising the bookshelf and gave up halfway.",
)
REQUESTS = (
    "Can you remind me to call the dentist tomorrow?",
    "Could you draft a short reply to my landlord about the heating?",
    "What is a good way to keep basil alive indoors?",
    "Can you suggest something quick for dinner tonight?",
    "Help me plan the errands for Saturday morning.",
    "Can you summarise what we talked about last time, briefly?",
    "Any tips for sleeping better when it is warm?",
    "Remind me what I still have to do this week.",
)
REPLIES = (
    "Of course. I have noted that and will bring it up again when it is relevant.",
    "Sure. Here is a short suggestion, and tell me if you want more detail.",
    "That sounds like a busy day. I can help you split it into smaller steps.",
    "Understood. I will keep it brief and practical.",
    "Good idea. A simple plan usually works better than a perfect one.",
    "Happy to help. Let me know how it goes and we can adjust.",
    "Noted. That is a reasonable way to handle it.",
    "Thanks for telling me. I will keep that in mind for later conversations.",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class PhraseDialogue(BaseModel):
    """One multi-session dialogue and its facts as (answer phrase, question) pairs."""

    model_config = ConfigDict(frozen=True)

    messages: list[ChatMessage]
    facts: list[tuple[str, str]]
    sessions: int


def _chatter(rng: random.Random, sentences: int) -> str:
    return " ".join(rng.sample(SMALL_TALK, sentences))


def phrase_dialogue(
    seed: int, *, sessions: int = 8, turns: int = 40, n_facts: int = 6
) -> PhraseDialogue:
    """One dialogue: ``sessions`` sessions of ``turns`` user/assistant exchanges, with
    ``n_facts`` topics answered once each (in different sessions) and mentioned without
    their answer elsewhere; the questions come last."""
    rng = random.Random(f"phrases-{seed}")
    topics = rng.sample(TOPICS, n_facts)
    values = [rng.choice(t.values) for t in topics]
    slots = [(s, t) for s in range(sessions) for t in range(turns)]
    planted = dict(zip(rng.sample(slots, n_facts), range(n_facts), strict=True))
    mentioned = {slot: rng.randrange(n_facts)
                 for slot in rng.sample([s for s in slots if s not in planted], 2 * n_facts)}
    msgs = [ChatMessage.system("You are a friendly personal assistant. Remember what the "
                               "user tells you across sessions.")]
    for s in range(sessions):
        for t in range(turns):
            opening = f"(New session, {DAYS[(seed + s) % 7]}.) Hi again. " if t == 0 else ""
            text = opening + _chatter(rng, rng.randint(1, 3))
            if (s, t) in planted:
                k = planted[(s, t)]
                plant = rng.choice(topics[k].plants).format(v=values[k])
                text = f"{rng.choice(LEADS)} {plant} {_chatter(rng, 1)}"
                text = opening + text
            elif (s, t) in mentioned:
                text += " " + rng.choice(topics[mentioned[(s, t)]].mentions)
            if rng.random() < 0.4:
                text += " " + rng.choice(REQUESTS)
            msgs.append(ChatMessage.user(text))
            msgs.append(ChatMessage.assistant(
                " ".join(rng.sample(REPLIES, rng.randint(1, 2)))))
    msgs.append(ChatMessage.user("Let us pick up where we left off.", pinned=True,
                                 metadata={"kind": "query"}))
    return PhraseDialogue(messages=msgs, facts=[(v, t.question) for v, t in
                                                zip(values, topics, strict=True)],
                          sessions=sessions)


def dialogue_tokens(dialogue: PhraseDialogue) -> int:
    """The dialogue's size by the heuristic counter (for the report)."""
    return HEURISTIC.count_messages(dialogue.messages)
