"""What the terminal world's seed modules share (`seeds.py`, `git_seeds.py`, `skills.py`):
the seed type and its registering decorator, TaskSpec shorthands, and word lists and
tables to draw inputs from."""

from __future__ import annotations

import random
from collections.abc import Callable

from envs.workspace import TaskSpec

Seed = Callable[[random.Random], TaskSpec]

WORDS = ["apple", "banana", "cherry", "delta", "echo", "falcon", "garnet", "harbor", "island", "jasper",
         "kettle", "lemon", "meadow", "nickel", "orbit", "pepper", "quartz", "river", "salmon", "timber",
         "umber", "velvet", "willow", "xenon", "yellow", "zephyr"]
FIRST = ["ada", "alan", "barbara", "claude", "dennis", "edsger", "frances", "grace", "ken", "linus",
         "margaret", "niklaus", "radia", "tim"]
LAST = ["lovelace", "turing", "liskov", "shannon", "ritchie", "dijkstra", "allen", "hopper", "thompson",
        "torvalds", "hamilton", "wirth"]
CITIES = ["Austin", "Berlin", "Cairo", "Dublin", "Lima", "Oslo", "Perth", "Quito"]


def registrar(into: dict[str, Seed]) -> Callable[[str, float], Callable[[Callable[[random.Random], TaskSpec]], Seed]]:
    """A `seed(domain, difficulty)` decorator: it names each seed's TaskSpec after the
    function, with its domain and difficulty, and registers the seed in `into`."""

    def seed(domain: str, difficulty: float = 0.3) -> Callable[[Callable[[random.Random], TaskSpec]], Seed]:
        def deco(fn: Callable[[random.Random], TaskSpec]) -> Seed:
            def make(rng: random.Random) -> TaskSpec:
                spec = fn(rng)
                spec.name, spec.domain, spec.difficulty = fn.__name__, domain, difficulty
                return spec

            into[fn.__name__] = make
            return make

        return deco

    return seed


def make_spec(instruction: str, files: dict[str, str], tests: str, solution: list, **kw: object) -> TaskSpec:
    return TaskSpec(name="", domain="", instruction=instruction, files=files, tests=tests,
                    solution=solution, **kw)  # type: ignore[arg-type]


def text_lines(items: list[str]) -> str:
    return "".join(f"{x}\n" for x in items)


def draw_people(rng: random.Random, n: int) -> list[dict[str, str]]:
    names = rng.sample([f"{f}_{la}" for f in FIRST for la in LAST], n)
    return [{"name": nm, "city": rng.choice(CITIES[:4]), "age": str(rng.randint(19, 70)),
             "score": str(rng.randint(0, 100))} for nm in names]


def to_csv(rows: list[dict[str, str]], cols: list[str]) -> str:
    return ",".join(cols) + "\n" + "".join(",".join(r[c] for c in cols) + "\n" for r in rows)
