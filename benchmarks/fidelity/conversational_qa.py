"""Two-person multi-session chats with natural questions whose wording differs from the
evidence (issue 29, second evaluation set for the archive's ranking).

**Source.** Written by hand for this benchmark after the hybrid ranking of
:mod:`ctxstack.compaction._archive` was fixed, modelled on the shape of public
long-conversation QA sets (two friends talking over many dated sessions; questions such as
"When did Caroline go to the support group?" answered by one turn). No text is taken from
any dataset. The ranking was not changed after this set was first measured.

**Shape.** Each evidence turn states a fact in the speaker's own words (inflected verbs,
synonyms, "grandma" for "grandmother"); the question asks about it the way a reader would,
so question and evidence share the topic but rarely the exact word forms. The topics also
come up in other turns without the fact. Reachability is judged on the evidence turn's own
marker phrase (:attr:`QA.evidence`, compared case-folded), which no other turn contains.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ctxstack.messages import ChatMessage


@dataclass(frozen=True)
class Item:
    evidence: str
    """The evidence turn; ``{n}`` is the speaker's name, ``{v}`` the varying detail."""
    marker: str
    """A phrase of the evidence (after formatting) that no other turn contains."""
    question: str
    values: tuple[str, ...]
    mentions: tuple[str, ...] = ()


ITEMS: tuple[Item, ...] = (
    Item("I went to an {v} support group meeting yesterday and honestly it was so powerful.",
         "support group meeting yesterday", "When did {n} go to the {v} support group?",
         ("LGBTQ", "grief", "caregivers'"),
         ("Groups are hard for me, I never know what to say.",
          "Do you still go to that book group on Thursdays?")),
    Item("Lately I've been painting {v}, it calms me down after work.",
         "been painting", "What does {n} like to paint?",
         ("sunsets over the lake", "portraits of my neighbours", "old barns"),
         ("My art teacher said I should try watercolours.",
          "I bought new brushes but haven't used them.")),
    Item("The kids and I camped at {v} last weekend, they loved the stars.",
         "camped at", "Where did {n} go camping with the children?",
         ("Pine Hollow", "the lakeshore campground near Ely", "Moose Creek")),
    Item("We finally adopted a puppy! We named him {v}.",
         "named him", "What is the name of {n}'s dog?",
         ("Oscar", "Pickle", "Biscuit"),
         ("The neighbour's dog barks all night.", "Dogs are so much work, though.")),
    Item("I'm looking into adoption agencies because I want to give a child {v}.",
         "adoption agencies because", "Why is {n} researching adoption agencies?",
         ("a safe and loving home", "the family I never had")),
    Item("On Saturday I ran a charity 5K for {v}.",
         "ran a charity 5K", "What cause did {n}'s charity race support?",
         ("mental health awareness", "the children's hospital", "suicide prevention")),
    Item("Grandma gave me this necklace from {v} when I was ten.",
         "necklace from", "Who gave {n} the necklace, and where is it from?",
         ("Sweden", "Lisbon", "Oaxaca"),
         ("My grandmother's cooking was the best.", "I lost an earring at the gym.")),
    Item("We moved over here from {v} four years ago.",
         "moved over here from", "Which country did {n} move from?",
         ("Sweden", "Portugal", "Kenya")),
    Item("I signed up for {v} classes at the community centre.",
         "classes at the community centre", "What class did {n} enroll in?",
         ("pottery", "salsa", "life drawing"),
         ("The community centre is closed on Mondays.",)),
    Item("Right now I'm reading '{v}', it's beautifully written.",
         "right now i'm reading", "Which book is {n} currently reading?",
         ("Becoming Nicole", "The Overstory", "A Little Life"),
         ("I never finish the books I start.", "The library sale is next week.")),
    Item("My brother's wedding was in {v} in June, the whole family flew in.",
         "brother's wedding was in", "Where did {n}'s brother get married?",
         ("Santorini", "Banff", "Edinburgh")),
    Item("Weekends I volunteer at {v}, mostly walking the older dogs.",
         "weekends i volunteer at", "Where does {n} volunteer?",
         ("the animal shelter on 5th Street", "Happy Tails rescue")),
    Item("I quit my job at the bank so I could study {v}.",
         "quit my job at the bank", "Why did {n} leave the bank?",
         ("counselling", "nursing", "architecture"),
         ("Banks are so slow with everything.",)),
    Item("The concert on Friday was {v} and they were absolutely amazing.",
         "concert on friday was", "Which band did {n} see live?",
         ("Florence and the Machine", "the Lumineers", "Arcade Fire"),
         ("I haven't been to a concert in ages.",)),
)

CHATTER = (
    "How was your week?", "Work has been crazy lately.", "The weather finally turned.",
    "I made that soup recipe you sent me.", "We should catch up properly soon.",
    "The kids have a school play next month.", "I've been sleeping badly.",
    "Did you see the game last night?", "My sister is visiting this weekend.",
    "I'm trying to run more in the mornings.", "The garden is full of weeds again.",
    "That's so good to hear!", "Wow, tell me more.", "I'm really proud of you.",
    "Haha, that sounds like you.", "Take care of yourself, okay?",
    "We went to the farmers market and bought way too much.", "Our car broke down again.",
    "I'm thinking about changing my hair.", "My phone screen cracked yesterday.",
)
NAMES = (("Caroline", "Melanie"), ("Jon", "Gina"), ("Aisha", "Tom"), ("Priya", "Sam"),
         ("Lena", "Marco"), ("Nate", "Joanna"))
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


@dataclass(frozen=True)
class QA:
    question: str
    evidence: str


@dataclass(frozen=True)
class Chat:
    seed: int
    messages: list[ChatMessage]
    questions: list[QA]


def chat(seed: int, *, sessions: int = 40, turns: int = 30, n_items: int = 10) -> Chat:
    """One two-person chat; the listener's turns are ``assistant`` messages."""
    rng = random.Random(f"conversational-qa-{seed}")
    a, b = rng.choice(NAMES)
    items = rng.sample(ITEMS, n_items)
    slots = rng.sample([(s, t) for s in range(sessions) for t in range(2, turns, 2)], n_items)
    planted = dict(zip(slots, range(n_items), strict=True))
    msgs = [ChatMessage.system(f"A chat between {a} and {b}, kept across sessions.")]
    questions: list[QA] = []
    for s in range(sessions):
        for t in range(turns):
            speaker = a if t % 2 == 0 else b
            text = " ".join(rng.sample(CHATTER, rng.randint(1, 2)))
            if t == 0:
                text = f"(Session {s + 1}, {rng.randint(1, 28)} {MONTHS[(seed + s) % 12]}) " + text
            if (s, t) in planted:
                item = items[planted[(s, t)]]
                value = rng.choice(item.values)
                text = f"{rng.choice(CHATTER)} {item.evidence.format(v=value)}"
                questions.append(QA(item.question.format(n=speaker, v=value.rstrip("'")),
                                    item.marker))
            elif rng.random() < 0.15:
                item = rng.choice(items)
                if item.mentions:
                    text += " " + rng.choice(item.mentions)
            msgs.append(ChatMessage(role="user" if t % 2 == 0 else "assistant",
                                    content=f"{speaker}: {text}"))
    msgs.append(ChatMessage.user("Let us pick up where we left off.", pinned=True,
                                 metadata={"kind": "query"}))
    return Chat(seed=seed, messages=msgs, questions=questions)
