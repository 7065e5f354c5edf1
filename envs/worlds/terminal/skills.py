"""Skills of the terminal world (see `seeds.py`): primitive operations of one domain that
synthesis chains 3-5 at a time (`compose_skills`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envs.workspace import TaskSpec, shell, write
from envs.worlds.terminal.common import (
    CITIES,
    WORDS,
    draw_people,
    text_lines,
    to_csv,
)

# -- skills: primitives combined 3-5 at a time within one domain -------------------------------

@dataclass
class Skill:
    """A primitive of one domain: phrase for the instruction, effect, reference fragment."""

    name: str
    domain: str
    phrase: str
    apply: Callable[..., object]
    fragment: str
    last: bool = False  # must come last in a chain (changes the data's shape)


def _dedupe(lines: list[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in lines if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


def text_skills(rng: random.Random) -> list[Skill]:
    word = rng.choice(WORDS[:8])
    n = rng.randint(4, 8)
    return [
        Skill("drop_blank", "text", "remove empty lines", lambda ls: [x for x in ls if x], "{ grep -v '^$' || true; }"),
        Skill("lower", "text", "convert all letters to lowercase", lambda ls: [x.lower() for x in ls],
              "tr 'A-Z' 'a-z'"),
        Skill("sort", "text", "sort the lines in byte order", sorted, "sort"),
        Skill("dedupe", "text", "drop repeated lines, keeping the first occurrence of each", _dedupe,
              "awk '!seen[$0]++'"),
        Skill("reverse", "text", "reverse the order of the lines", lambda ls: ls[::-1], "tac"),
        Skill("strip", "text", "strip leading and trailing spaces from every line",
              lambda ls: [x.strip(" ") for x in ls], "sed 's/^ *//; s/ *$//'"),
        Skill("keep_word", "text", f"keep only the lines that contain '{word}' in any letter case",
              lambda ls: [x for x in ls if word in x.lower()], f"{{ grep -iF '{word}' || true; }}"),
        Skill("head", "text", f"keep only the first {n} lines", lambda ls: ls[:n], f"head -n {n}"),
        Skill("number", "text", "prefix every line with its line number and a colon (like '3:text')",
              lambda ls: [f"{i}:{x}" for i, x in enumerate(ls, 1)], "awk '{print NR \":\" $0}'", last=True),
    ]


def data_skills(rng: random.Random) -> list[Skill]:
    age, city, top = rng.randint(25, 45), rng.choice(CITIES[:4]), rng.randint(3, 6)
    return [
        Skill("min_age", "data", f"keep only the rows with age at least {age}",
              lambda rs: [r for r in rs if int(r["age"]) >= age], f"rows = [r for r in rows if int(r['age']) >= {age}]"),
        Skill("city", "data", f"keep only the rows whose city is {city}",
              lambda rs: [r for r in rs if r["city"] == city], f"rows = [r for r in rows if r['city'] == {city!r}]"),
        Skill("sort_score", "data", "sort the rows by score, highest first (ties by name)",
              lambda rs: sorted(rs, key=lambda r: (-int(r["score"]), r["name"])),
              "rows.sort(key=lambda r: (-int(r['score']), r['name']))"),
        Skill("upper_name", "data", "write every name in uppercase",
              lambda rs: [{**r, "name": r["name"].upper()} for r in rs],
              "rows = [{**r, 'name': r['name'].upper()} for r in rows]"),
        Skill("top", "data", f"keep only the first {top} rows", lambda rs: rs[:top], f"rows = rows[:{top}]"),
        Skill("grade", "data", "add a last column grade: 'pass' if score is at least 50, else 'fail'",
              lambda rs: [{**r, "grade": "pass" if int(r["score"]) >= 50 else "fail"} for r in rs],
              "rows = [{**r, 'grade': 'pass' if int(r['score']) >= 50 else 'fail'} for r in rows]", last=True),
    ]


def files_skills(rng: random.Random) -> list[Skill]:
    def move_logs(t: dict[str, str]) -> dict[str, str]:
        return {(f"files/logs/{p[6:]}" if p.endswith(".log") and p.count("/") == 1 else p): c for p, c in t.items()}

    def drop_tmp(t: dict[str, str]) -> dict[str, str]:
        return {p: c for p, c in t.items() if not p.endswith(".tmp")}

    def jpeg(t: dict[str, str]) -> dict[str, str]:
        return {(p[:-5] + ".jpg" if p.endswith(".jpeg") else p): c for p, c in t.items()}

    def backup(t: dict[str, str]) -> dict[str, str]:
        return t | {p + ".bak": c for p, c in t.items() if p.endswith(".cfg")}

    def manifest(t: dict[str, str]) -> dict[str, str]:
        listing = "".join(p[6:] + "\n" for p in sorted(t))
        return t | {"files/MANIFEST.txt": listing}

    return [
        Skill("move_logs", "files", "move the .log files at the top of files/ into a new folder files/logs/",
              move_logs, "mkdir -p files/logs && for f in files/*.log; do [ -e \"$f\" ] && mv \"$f\" files/logs/; done; true"),
        Skill("drop_tmp", "files", "delete every file under files/ whose name ends in .tmp", drop_tmp,
              "find files -type f -name '*.tmp' -delete"),
        Skill("jpeg", "files", "rename every .jpeg file under files/ to end in .jpg instead", jpeg,
              "find files -type f -name '*.jpeg' | while read -r f; do mv \"$f\" \"${f%.jpeg}.jpg\"; done"),
        Skill("backup", "files", "put a copy of every .cfg file under files/ next to it, named <name>.cfg.bak",
              backup, "find files -type f -name '*.cfg' | while read -r f; do cp \"$f\" \"$f.bak\"; done"),
        Skill("manifest", "files", "finally write files/MANIFEST.txt listing every file under files/ "
              "(paths relative to files/, sorted, one per line, without MANIFEST.txt itself)", manifest,
              "(cd files && find . -type f | sed 's|^\\./||' | sort) > MANIFEST.tmp && mv MANIFEST.tmp files/MANIFEST.txt",
              last=True),
    ]


SKILLS: dict[str, Callable[[random.Random], list[Skill]]] = {
    "text": text_skills, "data": data_skills, "files": files_skills,
}


def _chain(rng: random.Random, skills: list[Skill], k: int) -> list[Skill]:
    body = [s for s in skills if not s.last]
    lasts = [s for s in skills if s.last]
    with_last = bool(lasts) and (len(body) < k or rng.random() < 0.5)
    return rng.sample(body, k - with_last) + ([rng.choice(lasts)] if with_last else [])


def compose_skills(domain: str, rng: random.Random, k: int) -> TaskSpec:
    """A task chaining `k` (3-5) primitive skills of `domain` on freshly drawn inputs."""
    if domain not in SKILLS:
        raise ValueError(f"unknown skill domain {domain!r}; known: {sorted(SKILLS)}")
    if not 3 <= k <= 5:
        raise ValueError("a skill chain has 3 to 5 skills")
    chain = _chain(rng, SKILLS[domain](rng), k)
    steps = "; then ".join(s.phrase for s in chain)
    names = [s.name for s in chain]

    def applied(data: Any) -> Any:  # the inputs after every skill of the chain
        for s in chain:
            data = s.apply(data)
        return data

    def spec(**kw: Any) -> TaskSpec:
        return TaskSpec(name=f"skills_{domain}", domain=domain, skills=names, difficulty=round(0.15 * k, 2), **kw)

    if domain == "text":
        lines = [(" " * rng.randint(0, 2)) + " ".join(rng.sample(WORDS[:10], 2)).title()
                 * rng.choice([1, 1, 2]) + (" " * rng.randint(0, 2)) for _ in range(14)]
        lines[3:3] = ["", lines[0], ""]
        out = applied(list(lines))
        return spec(
            instruction=f"Transform input.txt line by line and write the result to output.txt: {steps}.",
            files={"input.txt": text_lines(lines)},
            tests=f"def test_output():\n    assert read('output.txt') == {text_lines(out)!r}\n\n"
                  f"def test_input_kept():\n    assert read('input.txt') == {text_lines(lines)!r}\n",
            solution=[shell("cat input.txt | " + " | ".join(s.fragment for s in chain) + " > output.txt")],
        )
    if domain == "data":
        people = draw_people(rng, 16)
        out_rows: list[dict[str, str]] = applied([dict(r) for r in people])
        cols = ["name", "city", "age", "score"] + (["grade"] if "grade" in names else [])
        script = ("import csv\nrows = list(csv.DictReader(open('people.csv')))\n"
                  + "".join(s.fragment + "\n" for s in chain)
                  + f"with open('result.csv', 'w', newline='') as f:\n"
                    f"    w = csv.DictWriter(f, fieldnames={cols!r}, lineterminator='\\n')\n"
                    "    w.writeheader()\n    w.writerows(rows)\n")
        return spec(
            instruction=("people.csv has the columns name,city,age,score. Write result.csv (with a header "
                         f"row) from it by applying these steps in order: {steps}."),
            files={"people.csv": to_csv(people, ["name", "city", "age", "score"])},
            tests=f"def test_result():\n    assert rows('result.csv') == {out_rows!r}\n"
                  f"    assert read('result.csv').splitlines()[0] == {','.join(cols)!r}\n",
            solution=[write("transform.py", script), shell("python3 transform.py")],
        )
    tree: dict[str, str] = {}
    for i, w in enumerate(rng.sample(WORDS, 10)):
        ext = rng.choice(["log", "tmp", "jpeg", "cfg", "txt"])
        tree[f"files/{'deep/' if i % 4 == 0 else ''}{w}.{ext}"] = f"{w} {i}\n"
    for ext in ("log", "tmp", "jpeg", "cfg"):  # every skill has something to act on
        tree[f"files/extra.{ext}"] = f"extra {ext}\n"
    want = applied(dict(tree))
    return spec(
        instruction=f"Reorganize the files/ folder: {steps}. Do not change any file's contents.",
        files=tree,
        tests="def test_tree():\n"
              "    got = {str(p.relative_to(WS)): p.read_text() for p in (WS / 'files').rglob('*') if p.is_file()}\n"
              f"    assert got == {want!r}\n",
        solution=[shell(" && ".join(f"{{ {s.fragment}; }}" for s in chain))],
    )
