"""Write `data/preferences.jsonl`: a small preference set in the Intel ORCA schema, written by this project, and
`data/preferences_validation.jsonl`, the prompts training evaluates on.

    python data/make_preferences.py            # rewrites both files (deterministic)
    python data/make_preferences.py --judge --seed 4321 --output judge_preferences.jsonl   # a judge's pairs

Every row is generated here from the topic notes below; nothing is copied from a third-party dataset.
The preference is one a 135M model can learn: the chosen answer is on topic, informative and complete;
the rejected one fails in a common way (refusal, off-topic, curt, rude, repetitive or cut off).

`--judge` writes the pairs of a judge (a second reward model, docs/evaluation.md): pairs a reward model trained on
the shipped set never saw, built to catch what a policy trained against that reward model could learn to exploit.
Its chosen answers are worded in either of two sets of phrases (the shipped set's and another), so that wording is
no signal; its rejected answers fail in the six shipped ways and in four the shipped set never shows, each as long
and fluent as a good answer: empty praise, the topic's frame around another topic's facts, one right sentence
looping, a whole answer cut off mid-sentence.

The validation file (64 pairs, each topic asked in two questions the shipped set never asks: no prompt of the 400
shipped pairs, the 80 the quickstart tests on included) is what GRPO and PPO evaluate on while they train
(`--eval_dataset_name`, picking the best checkpoint), from a random stream of its own: the shipped file is unchanged.
"""

import argparse
import json
import random
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "preferences.jsonl"
NUM_PAIRS = 400
SEED = 1234
VALIDATION_OUTPUT = Path(__file__).resolve().parent / "preferences_validation.jsonl"
VALIDATION_SEED = 1235

# topic: (what it is, why it matters)
TOPICS = {
    "photosynthesis": ("plants use sunlight, water and carbon dioxide to make sugar and release oxygen",
                       "it feeds almost every food chain and keeps oxygen in the air"),
    "the water cycle": ("water evaporates, forms clouds, falls as rain or snow and flows back to the sea",
                        "it moves fresh water around the planet for people, animals and crops"),
    "gravity": ("every mass pulls on every other mass, and the pull grows with mass and shrinks with distance",
                "it keeps us on the ground, holds the Moon in orbit and shapes galaxies"),
    "vaccines": ("a harmless piece or copy of a germ trains the immune system to recognise the real germ",
                 "they prevent serious diseases and protect people who cannot be vaccinated"),
    "compound interest": ("interest is added to the balance, so later interest is earned on earlier interest too",
                          "small savings grow much faster over many years, and debts grow the same way"),
    "recycling": ("used materials such as paper, glass and metal are collected and made into new products",
                  "it saves raw materials and energy and reduces the waste sent to landfills"),
    "the heart": ("a muscle with four chambers that pumps blood through the lungs and then the whole body",
                  "blood carries oxygen and nutrients to every cell"),
    "volcanoes": ("openings in the Earth's crust where melted rock, ash and gas escape from below",
                  "eruptions build new land and fertile soil but can also threaten nearby towns"),
    "electric circuits": ("a closed loop lets electric current flow from a source through components and back",
                          "every electronic device, from a torch to a phone, depends on one"),
    "the moon's phases": ("we see different parts of the Moon's sunlit half as it orbits the Earth each month",
                          "they explain the changing shape of the Moon and help track time"),
    "supply and demand": ("prices rise when buyers want more than sellers offer and fall when there is too much",
                          "it explains how markets set prices without anyone planning them"),
    "the immune system": ("cells and organs that find and destroy germs and remember them for next time",
                          "it protects the body from infections every day"),
    "climate change": ("the long-term warming of the planet caused mainly by greenhouse gases from burning fuel",
                       "it changes weather patterns, raises sea levels and affects food and water"),
    "the internet": ("a worldwide network of computers that exchange data using shared rules called protocols",
                     "it lets people communicate, learn and work from almost anywhere"),
    "plate tectonics": ("the Earth's outer shell is split into plates that slowly move, collide and separate",
                        "it explains earthquakes, mountains and the shape of the continents"),
    "the solar system": ("the Sun and everything that orbits it, including eight planets, moons and comets",
                         "it is our home in space and teaches us how planets form"),
    "sleep": ("a regular state of rest in which the brain sorts memories and the body repairs itself",
              "good sleep improves mood, memory and health"),
    "fractions": ("a way to write part of a whole, with the top number counting parts and the bottom the total",
                  "they are used in cooking, measuring, money and much of mathematics"),
    "democracy": ("a system in which citizens choose their leaders and laws, usually by voting",
                  "it gives people a voice and a peaceful way to change their government"),
    "bees": ("insects that collect nectar and pollen and carry pollen from flower to flower",
             "they pollinate many of the crops we eat"),
    "rainbows": ("sunlight is bent and split into its colours by raindrops, then reflected back to our eyes",
                 "they show that white light is a mix of many colours"),
    "the printing press": ("a machine that pressed inked metal letters onto paper to copy pages quickly",
                           "it made books cheap and spread knowledge across the world"),
    "exercise": ("regular movement that raises the heart rate and works the muscles",
                 "it strengthens the heart, muscles and bones and improves mood"),
    "batteries": ("devices that store chemical energy and release it as electricity when a circuit is closed",
                  "they power phones, cars and tools without a cable"),
    "the scientific method": ("asking a question, making a hypothesis, testing it with experiments and checking "
                              "the results", "it is how we build reliable knowledge about the world"),
    "tides": ("the regular rise and fall of the sea caused mostly by the Moon's gravity",
              "they shape coastlines and matter for ships, fishing and coastal life"),
    "antibiotics": ("medicines that kill bacteria or stop them from growing",
                    "they cure infections that were once deadly, but overuse makes bacteria resistant"),
    "renewable energy": ("power from sources that refill naturally, such as sunlight, wind and flowing water",
                         "it produces electricity with far less pollution than coal or oil"),
    "the human brain": ("the organ of billions of connected nerve cells that controls thought, memory and movement",
                        "it makes us who we are and runs every part of the body"),
    "inflation": ("the general rise of prices over time, so the same money buys less",
                  "it affects savings, wages and the cost of living"),
    "ecosystems": ("communities of living things and their surroundings that depend on each other",
                   "healthy ecosystems clean water, make soil and support food"),
    "the alphabet": ("a set of letters that each stand for sounds, combined to write words",
                     "it lets a few symbols write any word of a language"),
}

SYSTEMS = [
    "",
    "",
    "You are a helpful assistant.",
    "You are an AI assistant. Give a clear and complete answer.",
    "You are a friendly teacher who explains things simply.",
]

QUESTIONS = [
    "What is {topic}?",
    "Explain {topic} in simple terms.",
    "Why is it important to understand {topic}?",
    "Can you describe {topic} briefly?",
    "I am curious about {topic}. What should I know?",
    "Give me a short explanation of {topic}.",
]


# The validation pairs' questions: none of them is one of QUESTIONS, so no validation prompt is a shipped pair's.
VALIDATION_QUESTIONS = [
    "Tell me about {topic}.",
    "How would you explain {topic} to a friend?",
]


def chosen_answer(topic, what, why, rng):
    opening = rng.choice([f"Here is the short version of {topic}: {what}.",
                          f"When people talk about {topic}, they mean this: {what}.",
                          f"{topic[0].upper() + topic[1:]} in one sentence: {what}."])
    middle = rng.choice([f"This is important because {why}.",
                         f"It matters because {why}.",
                         f"Why should you care? Because {why}."])
    closing = rng.choice(["I hope this helps!", "Let me know if you would like more detail.",
                          f"That is the main idea behind {topic}."])
    return f"{opening} {middle} {closing}"


# The judge's other wording of a chosen answer (`--judge`): each part is drawn from these and the shipped phrases.
def other_openings(topic, what):
    return [f"Put simply, {topic} comes down to this: {what}.", f"A quick answer about {topic}: {what}.",
            f"Let me explain {topic}. {what[0].upper() + what[1:]}."]


def other_middles(why):
    return [f"The reason it matters is that {why}.", f"It is worth knowing because {why}.",
            f"This matters since {why}."]


def other_closings(topic):
    return ["Feel free to ask a follow-up question.", "I hope that makes it clearer.",
            f"So that is {topic} in a nutshell."]


def shipped_openings(topic, what):
    return [f"Here is the short version of {topic}: {what}.",
            f"When people talk about {topic}, they mean this: {what}.",
            f"{topic[0].upper() + topic[1:]} in one sentence: {what}."]


def shipped_middles(why):
    return [f"This is important because {why}.", f"It matters because {why}.", f"Why should you care? Because {why}."]


def shipped_closings(topic):
    return ["I hope this helps!", "Let me know if you would like more detail.",
            f"That is the main idea behind {topic}."]


def judge_answer(topic, what, why, rng):
    """An answer in either wording (the judge's chosen one, or the frame of a rejected one): three sentences."""
    return [rng.choice(shipped_openings(topic, what) + other_openings(topic, what)),
            rng.choice(shipped_middles(why) + other_middles(why)),
            rng.choice(shipped_closings(topic) + other_closings(topic))]


JUDGE_MODES = ["empty_praise", "wrong_facts", "looping", "cut_off_long"]


def judge_rejected_answer(topic, what, why, rng):
    """A rejected answer of the judge's pairs: one of the shipped six failures or the four the shipped set lacks."""
    mode = rng.choice(["shipped"] * 6 + JUDGE_MODES)
    if mode == "shipped":
        return rejected_answer(topic, what, rng)
    if mode == "empty_praise":  # on topic, polite and long, and says nothing
        praise = rng.choice([f"What a great question! {topic[0].upper() + topic[1:]} is a fascinating subject that "
                             "many people wonder about.", f"{topic[0].upper() + topic[1:]} is one of the most "
                             "interesting things you could ask about, and I am glad you did."])
        filler = rng.choice(["There is a lot to say about it, and it is well worth learning about.",
                             "Many experts have studied it for years, and it comes up again and again in daily life.",
                             "It is important, it is interesting, and everyone should know a little about it."])
        return mode, f"{praise} {filler} {rng.choice(shipped_closings(topic) + other_closings(topic))}"
    if mode == "wrong_facts":  # the question's topic, another topic's facts, in a good answer's frame
        other_what, other_why = TOPICS[rng.choice([t for t in TOPICS if t != topic])]
        return mode, " ".join(judge_answer(topic, other_what, other_why, rng))
    if mode == "looping":  # a right first sentence, over and over
        return mode, " ".join([judge_answer(topic, what, why, rng)[0]] * rng.randint(3, 4))
    words = " ".join(judge_answer(topic, what, why, rng)).split()  # a whole answer stopped mid-sentence
    end = len(words) * rng.randint(55, 80) // 100
    while words[end - 1].endswith((".", "!", "?", ":")):  # not at a sentence's end
        end -= 1
    return mode, " ".join(words[:end])


def rejected_answer(topic, what, rng):
    other = rng.choice([t for t in TOPICS if t != topic])
    other_what, _ = TOPICS[other]
    mode = rng.choice(["refusal", "off_topic", "curt", "rude", "repetitive", "cut_off"])
    if mode == "refusal":
        return mode, rng.choice(["I'm sorry, but I can't help with that.", "I don't want to answer this.",
                                 "I cannot answer questions like this."])
    if mode == "off_topic":
        return mode, f"Here is the short version of {other}: {other_what}."
    if mode == "curt":
        return mode, rng.choice(["It's complicated.", "Just look it up.", "Yes.", "Not sure."])
    if mode == "rude":
        return mode, rng.choice(["That is a silly question.", "Why would you even ask that?",
                                 "Figure it out yourself."])
    if mode == "repetitive":
        return mode, " ".join([topic] * rng.randint(5, 9))
    words = f"Here is the short version of {topic}: {what}.".split()
    return mode, " ".join(words[: max(3, len(words) // 3)])


def make_rows(num_pairs=NUM_PAIRS, seed=SEED, judge=False, modes=None):
    """The pairs, shuffled; `judge`: the judge's (see the top); `modes`, a list, receives each rejected's failure."""
    rng = random.Random(seed)
    rows = []
    for i in range(num_pairs):
        topic = list(TOPICS)[i % len(TOPICS)]
        what, why = TOPICS[topic]
        mode, rejected = judge_rejected_answer(topic, what, why, rng) if judge else rejected_answer(topic, what, rng)
        rows.append({
            "system": rng.choice(SYSTEMS),
            "question": rng.choice(QUESTIONS).format(topic=topic),
            "chosen": " ".join(judge_answer(topic, what, why, rng)) if judge else chosen_answer(topic, what, why, rng),
            "rejected": rejected,
        })
        if modes is not None:
            rows[-1] = (rows[-1], mode)
    rng.shuffle(rows)
    if modes is not None:
        modes += [mode for _, mode in rows]
        rows = [row for row, _ in rows]
    return rows


def make_validation_rows(seed=VALIDATION_SEED):
    """The validation pairs: each topic in each of VALIDATION_QUESTIONS, answered and failed as the shipped pairs
    are, shuffled."""
    rng = random.Random(seed)
    rows = []
    for question in VALIDATION_QUESTIONS:
        for topic, (what, why) in TOPICS.items():
            _, rejected = rejected_answer(topic, what, rng)
            rows.append({"system": rng.choice(SYSTEMS), "question": question.format(topic=topic),
                         "chosen": chosen_answer(topic, what, why, rng), "rejected": rejected})
    rng.shuffle(rows)
    return rows


def main(path=OUTPUT, seed=SEED, num_pairs=NUM_PAIRS, judge=False):
    """Write the pairs to `path`. Another set than the shipped one never replaces the shipped file, and a file that
    holds other rows is kept (the same rows again are left as they are)."""
    path = Path(path)
    shipped = (seed, num_pairs, judge) == (SEED, NUM_PAIRS, False)
    if not shipped and path.resolve() == OUTPUT:
        refuse(f"--judge, --seed and --num_pairs write other pairs than the shipped {OUTPUT}; give --output PATH")
    text = "".join(json.dumps(row) + "\n" for row in make_rows(num_pairs, seed, judge))
    if path.resolve() != OUTPUT and path.exists():
        if path.read_text(encoding="utf-8") != text:
            refuse(f"{path} exists and holds other rows; it is kept: give another --output, or delete it first if "
                   "it may go")
        print(f"{path} already holds these {num_pairs} preference pairs")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"Wrote {num_pairs} {'judge ' if judge else ''}preference pairs to {path}")
    if shipped and path.resolve() == OUTPUT:  # the shipped set's validation pairs beside it
        rows = make_validation_rows()
        VALIDATION_OUTPUT.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        print(f"Wrote {len(rows)} validation preference pairs to {VALIDATION_OUTPUT}")


def refuse(message):
    """A mistake of the caller's: one line, exit code 2 (as the package's scripts end a user error)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=OUTPUT, help="where the pairs go (default: the shipped file, which only "
                        "the shipped settings may write)")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of every draw (the shipped set: 1234)")
    parser.add_argument("--num_pairs", type=int, default=NUM_PAIRS, help="pairs written (the shipped set: 400)")
    parser.add_argument("--judge", action="store_true", help="a judge's pairs: other wording, four more failures")
    args = parser.parse_args()
    main(args.output, args.seed, args.num_pairs, args.judge)
