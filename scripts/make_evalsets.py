"""Writes Atlas's offline eval sets (atlas/data/evalsets/*.jsonl). Written for this project: templated
arithmetic word problems and multiple-choice questions with exactly checkable answers. Deterministic:
running it again gives byte-identical files."""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "atlas" / "data" / "evalsets"
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jia", "Kofi", "Lena", "Mateo",
         "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]
THINGS = [("apples", "apple"), ("books", "book"), ("pencils", "pencil"), ("stamps", "stamp"), ("marbles", "marble"),
          ("cookies", "cookie"), ("stickers", "sticker"), ("shells", "shell"), ("cards", "card"), ("eggs", "egg")]


def arith_items(rng: random.Random, n: int) -> list[dict]:
    items = []
    templates = []

    def add(a_range, fn):
        templates.append((a_range, fn))

    def t_add(r):
        who, (things, _) = r.choice(NAMES), r.choice(THINGS)
        a, b = r.randint(3, 60), r.randint(2, 40)
        return f"{who} has {a} {things}. A friend gives {who} {b} more. How many {things} does {who} have now?", a + b

    def t_sub(r):
        who, (things, _) = r.choice(NAMES), r.choice(THINGS)
        a = r.randint(20, 90)
        b = r.randint(1, a - 1)
        return f"{who} had {a} {things} and gave away {b}. How many {things} are left?", a - b

    def t_mul(r):
        who, (things, _) = r.choice(NAMES), r.choice(THINGS)
        a, b = r.randint(2, 12), r.randint(2, 12)
        return f"{who} buys {a} boxes with {b} {things} in each box. How many {things} is that in total?", a * b

    def t_div(r):
        who, (things, _) = r.choice(NAMES), r.choice(THINGS)
        k, each = r.randint(2, 9), r.randint(2, 12)
        return (f"{who} shares {k * each} {things} equally among {k} friends. How many {things} does each friend "
                f"get?", each)

    def t_two_step(r):
        who = r.choice(NAMES)
        price, qty, paid = r.randint(2, 9), r.randint(2, 6), 0
        paid = price * qty + r.randint(1, 20)
        return (f"{who} buys {qty} notebooks at {price} dollars each and pays with {paid} dollars. How much change, "
                f"in dollars, does {who} get?", paid - price * qty)

    def t_time(r):
        who = r.choice(NAMES)
        per_day, days = r.randint(10, 45), r.randint(2, 7)
        return f"{who} reads for {per_day} minutes every day for {days} days. How many minutes is that in total?", \
            per_day * days

    def t_speed(r):
        speed, hours = r.choice([30, 40, 45, 50, 60, 70, 80]), r.randint(2, 5)
        return f"A train travels at {speed} kilometers per hour for {hours} hours. How many kilometers does it travel?", \
            speed * hours

    def t_age(r):
        who, other = r.sample(NAMES, 2)
        age, diff, years = r.randint(5, 30), r.randint(2, 15), r.randint(2, 10)
        return (f"{who} is {age} years old. {other} is {diff} years older than {who}. How old will {other} be in "
                f"{years} years?", age + diff + years)

    def t_remaining(r):
        total, a, b = r.randint(50, 120), r.randint(5, 20), r.randint(5, 20)
        return (f"A class has {total} pages of homework. On Monday they finish {a} pages and on Tuesday {b} pages. "
                f"How many pages are still to do?", total - a - b)

    def t_double(r):
        who, (things, _) = r.choice(NAMES), r.choice(THINGS)
        a, b = r.randint(3, 25), r.randint(1, 9)
        return (f"{who} has {a} {things}. {who} doubles them and then loses {b}. How many {things} does {who} have?",
                2 * a - b)

    fns = [t_add, t_sub, t_mul, t_div, t_two_step, t_time, t_speed, t_age, t_remaining, t_double]
    seen = set()
    while len(items) < n:
        fn = fns[len(items) % len(fns)]
        q, a = fn(rng)
        if q in seen:
            continue
        seen.add(q)
        items.append({"id": f"arith-{len(items) + 1:03d}", "kind": "numeric", "question": q, "answer": str(a)})
    return items


FACTS = [
    ("How many days are in a week?", "7", ["5", "6", "8"]),
    ("How many legs does a spider have?", "8", ["6", "4", "10"]),
    ("How many months are in a year?", "12", ["10", "11", "13"]),
    ("How many minutes are in an hour?", "60", ["100", "30", "24"]),
    ("How many hours are in a day?", "24", ["12", "60", "20"]),
    ("How many sides does a triangle have?", "3", ["4", "5", "6"]),
    ("How many sides does a hexagon have?", "6", ["5", "7", "8"]),
    ("What is the freezing point of water in degrees Celsius?", "0", ["100", "32", "10"]),
    ("What is the boiling point of water at sea level in degrees Celsius?", "100", ["0", "50", "212"]),
    ("Which planet is closest to the Sun?", "Mercury", ["Venus", "Earth", "Mars"]),
    ("Which planet is known as the Red Planet?", "Mars", ["Jupiter", "Venus", "Saturn"]),
    ("What is the largest ocean on Earth?", "Pacific", ["Atlantic", "Indian", "Arctic"]),
    ("What gas do plants take in from the air to make food?", "carbon dioxide", ["oxygen", "helium", "neon"]),
    ("What do bees make?", "honey", ["milk", "silk", "wax paper"]),
    ("Which animal is known for having a trunk?", "elephant", ["giraffe", "zebra", "lion"]),
    ("What color do you get by mixing blue and yellow?", "green", ["purple", "orange", "red"]),
    ("What color do you get by mixing red and white?", "pink", ["brown", "green", "blue"]),
    ("Which of these is a mammal?", "dolphin", ["shark", "salmon", "octopus"]),
    ("Which of these is a fruit?", "banana", ["carrot", "potato", "onion"]),
    ("Which of these is a vegetable?", "carrot", ["apple", "grape", "cherry"]),
    ("Which of these is a musical instrument?", "violin", ["hammer", "spoon", "ladder"]),
    ("What is the opposite of 'hot'?", "cold", ["warm", "big", "fast"]),
    ("What is the opposite of 'up'?", "down", ["left", "over", "high"]),
    ("What is the opposite of 'early'?", "late", ["soon", "quick", "first"]),
    ("What is the opposite of 'empty'?", "full", ["light", "open", "clean"]),
    ("What is the opposite of 'strong'?", "weak", ["tall", "loud", "hard"]),
    ("Which word is a synonym of 'happy'?", "glad", ["sad", "angry", "tired"]),
    ("Which word is a synonym of 'big'?", "large", ["tiny", "thin", "short"]),
    ("What is the capital of France?", "Paris", ["Berlin", "Madrid", "Rome"]),
    ("What is the capital of Japan?", "Tokyo", ["Osaka", "Kyoto", "Seoul"]),
    ("What is the capital of Italy?", "Rome", ["Milan", "Venice", "Paris"]),
    ("What is the capital of Egypt?", "Cairo", ["Lagos", "Nairobi", "Tunis"]),
    ("Which metal is liquid at room temperature?", "mercury", ["iron", "copper", "silver"]),
    ("What is the chemical symbol for water?", "H2O", ["CO2", "O2", "NaCl"]),
    ("Which shape has four equal sides and four right angles?", "square", ["circle", "triangle", "oval"]),
    ("In which season do leaves usually fall from trees?", "autumn", ["spring", "summer", "winter"]),
    ("Which direction does the Sun rise in?", "east", ["west", "north", "south"]),
    ("What do you call a baby cat?", "kitten", ["puppy", "calf", "foal"]),
    ("What do you call a baby dog?", "puppy", ["kitten", "lamb", "chick"]),
    ("Which organ pumps blood through the body?", "heart", ["lung", "liver", "kidney"]),
]


def mc_items(rng: random.Random, n: int) -> list[dict]:
    raw: list[tuple[str, str, list[str]]] = list(FACTS)
    while len(raw) < n:
        k = len(raw) % 4
        if k == 0:
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            right = a * b
            wrong = {right + d for d in (-a, a, 1, -1, b, 2)} - {right}
            raw.append((f"What is {a} times {b}?", str(right), [str(w) for w in rng.sample(sorted(wrong), 3)]))
        elif k == 1:
            nums = rng.sample(range(10, 999), 4)
            raw.append((f"Which number is the largest: {', '.join(map(str, nums))}?", str(max(nums)),
                        [str(x) for x in nums if x != max(nums)]))
        elif k == 2:
            start, step = rng.randint(1, 20), rng.randint(2, 9)
            seq = [start + step * i for i in range(4)]
            right = start + step * 4
            wrong = sorted({right + d for d in (-2, -1, 1, 2, step + 1)} - {right})
            raw.append((f"What number comes next: {', '.join(map(str, seq))}, ...?", str(right),
                        [str(w) for w in rng.sample(wrong, 3)]))
        else:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            right = a + b
            raw.append((f"What is {a} plus {b}?", str(right),
                        [str(right + d) for d in rng.sample([-10, -1, 1, 10, 2], 3)]))  # distinct offsets
    items = []
    for i, (q, right, wrong) in enumerate(raw[:n]):
        options = [right, *wrong[:3]]
        rng.shuffle(options)
        letter = "ABCD"[options.index(right)]
        items.append({"id": f"mc-{i + 1:03d}", "kind": "choice", "question": q, "choices": options, "answer": letter})
    return items


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, items in (("arith", arith_items(random.Random(20261202), 120)),
                        ("mc", mc_items(random.Random(20261203), 100))):
        with open(OUT / f"{name}.jsonl", "w") as f:
            for it in items:
                f.write(json.dumps(it) + "\n")
        print(f"{name}: {len(items)} items")


if __name__ == "__main__":
    main()
