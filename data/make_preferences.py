"""Write `data/preferences.jsonl`: a small preference set in the Intel ORCA schema, written by this project.

    python data/make_preferences.py            # rewrites data/preferences.jsonl (deterministic)

Every row is generated here from the topic notes below; nothing is copied from a third-party dataset.
The preference is one a 135M model can learn: the chosen answer is on topic, informative and complete;
the rejected one fails in a common way (refusal, off-topic, curt, rude, repetitive or cut off).
"""

import json
import random
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "preferences.jsonl"
NUM_PAIRS = 400
SEED = 1234

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


def make_rows(num_pairs=NUM_PAIRS, seed=SEED):
    rng = random.Random(seed)
    rows = []
    for i in range(num_pairs):
        topic = list(TOPICS)[i % len(TOPICS)]
        what, why = TOPICS[topic]
        _, rejected = rejected_answer(topic, what, rng)
        rows.append({
            "system": rng.choice(SYSTEMS),
            "question": rng.choice(QUESTIONS).format(topic=topic),
            "chosen": chosen_answer(topic, what, why, rng),
            "rejected": rejected,
        })
    rng.shuffle(rows)
    return rows


def main(path=OUTPUT):
    rows = make_rows()
    Path(path).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"Wrote {len(rows)} preference pairs to {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
