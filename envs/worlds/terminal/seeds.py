"""Seed problems and primitive skills of the terminal world (Terminal-Task-Gen, methods.md §5).

A seed is a function `rng -> TaskSpec`: it draws the input files from `rng`, states the
goal without the solution, computes the expected results in Python (they go into the hidden
pytest checks as literals, never into the workspace) and gives a reference solution as tool
calls. `SEEDS` at rng seed 0 are the built-in tasks; other seeds vary the inputs.

Skills (`SKILLS`) are primitive operations of one domain that synthesis chains 3-5 at a time
(`compose_skills`): each knows its instruction phrase, its effect (a Python function used to
compute the expected result) and its shell or Python fragment (the reference solution).
"""

from __future__ import annotations

import json
import random
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from envs.workspace import TaskSpec, patch, shell, write

Seed = Callable[[random.Random], TaskSpec]
SEEDS: dict[str, Seed] = {}

WORDS = ["apple", "banana", "cherry", "delta", "echo", "falcon", "garnet", "harbor", "island", "jasper",
         "kettle", "lemon", "meadow", "nickel", "orbit", "pepper", "quartz", "river", "salmon", "timber",
         "umber", "velvet", "willow", "xenon", "yellow", "zephyr"]
FIRST = ["ada", "alan", "barbara", "claude", "dennis", "edsger", "frances", "grace", "ken", "linus",
         "margaret", "niklaus", "radia", "tim"]
LAST = ["lovelace", "turing", "liskov", "shannon", "ritchie", "dijkstra", "allen", "hopper", "thompson",
        "torvalds", "hamilton", "wirth"]
CITIES = ["Austin", "Berlin", "Cairo", "Dublin", "Lima", "Oslo", "Perth", "Quito"]


def seed(domain: str, difficulty: float = 0.3) -> Callable[[Callable[[random.Random], TaskSpec]], Seed]:
    def deco(fn: Callable[[random.Random], TaskSpec]) -> Seed:
        def make(rng: random.Random) -> TaskSpec:
            spec = fn(rng)
            spec.name, spec.domain, spec.difficulty = fn.__name__, domain, difficulty
            return spec

        SEEDS[fn.__name__] = make
        return make

    return deco


def _spec(instruction: str, files: dict[str, str], tests: str, solution: list, **kw: object) -> TaskSpec:
    return TaskSpec(name="", domain="", instruction=instruction, files=files, tests=tests,
                    solution=solution, **kw)  # type: ignore[arg-type]


def _lines(items: list[str]) -> str:
    return "".join(f"{x}\n" for x in items)


# -- text processing ----------------------------------------------------------------------

@seed("text", 0.2)
def count_error_lines(rng: random.Random) -> TaskSpec:
    levels = rng.choices(["INFO", "WARN", "ERROR", "DEBUG"], weights=[5, 2, 2, 3], k=rng.randint(25, 45))
    levels[rng.randrange(len(levels))] = "ERROR"
    log = [f"2025-01-0{1 + i % 9}T10:{i % 60:02d}:00 {lv} worker-{rng.randint(1, 4)} {rng.choice(WORDS)} done"
           for i, lv in enumerate(levels)]
    n = levels.count("ERROR")
    return _spec(
        "app.log holds the service's log. Count how many lines have the level ERROR and write just "
        "that number to error_count.txt.",
        {"app.log": _lines(log)},
        f"def test_count():\n    assert read('error_count.txt').strip() == '{n}'\n\n"
        "def test_log_untouched():\n    assert read('app.log').count('\\n') == " + str(len(log)) + "\n",
        [shell("grep -c ' ERROR ' app.log > error_count.txt")],
    )


@seed("text", 0.2)
def sort_unique_words(rng: random.Random) -> TaskSpec:
    words = [rng.choice(WORDS) for _ in range(rng.randint(20, 40))]
    want = sorted(set(words))
    return _spec(
        "words.txt has one word per line, with repeats. Write every distinct word once, in "
        "alphabetical order, one per line, to unique.txt.",
        {"words.txt": _lines(words)},
        f"def test_unique_sorted():\n    assert read('unique.txt').split() == {want!r}\n",
        [shell("sort -u words.txt > unique.txt")],
    )


@seed("text", 0.3)
def replace_hostname(rng: random.Random) -> TaskSpec:
    old, new = f"staging-{rng.randint(1, 9)}.internal", f"prod-{rng.randint(10, 99)}.example.org"
    files = {}
    counts = 0
    for name in rng.sample(WORDS, 3):
        k = rng.randint(1, 3)
        counts += k
        body = [f"# {name} service"] + [f"endpoint_{i} = https://{old}/{name}/{i}" for i in range(k)] + ["retries = 3"]
        files[f"conf/{name}.conf"] = _lines(body)
    files["conf/README"] = f"The hosts in these files were {old} before the move.\n"
    return _spec(
        f"The service moved from {old} to {new}. Update every .conf file in conf/ so that all "
        "references use the new host. Do not change any other file.",
        files,
        "import glob\n\n"
        "def test_new_host():\n"
        f"    text = ''.join(Path(p).read_text() for p in sorted(glob.glob(str(WS / 'conf/*.conf'))))\n"
        f"    assert {old!r} not in text\n    assert text.count({new!r}) == {counts}\n"
        "    assert text.count('retries = 3') == 3\n\n"
        f"def test_readme_kept():\n    assert read('conf/README') == {files['conf/README']!r}\n",
        [shell(f"sed -i 's/{old.replace('.', chr(92) + '.')}/{new}/g' conf/*.conf")],
    )


@seed("text", 0.4)
def extract_emails(rng: random.Random) -> TaskSpec:
    people = rng.sample([(f, la) for f in FIRST for la in LAST], 8)
    emails = [f"{f}.{la}@{rng.choice(['mail.org', 'corp.example.com', 'uni.edu'])}" for f, la in people]
    lines = []
    for e in emails + rng.sample(emails, 3):
        lines.append(f"Reach {e.split('.')[0].title()} at <{e}> (office {rng.randint(100, 999)}).")
        lines.append(rng.choice(["No address on this line.", "Meeting moved to 3pm.", "See the wiki."]))
    rng.shuffle(lines)
    return _spec(
        "contacts.txt is a messy list of notes. Extract every email address it contains, write each "
        "distinct address once, sorted alphabetically, one per line, to emails.txt.",
        {"contacts.txt": _lines(lines)},
        f"def test_emails():\n    assert read('emails.txt').split() == {sorted(set(emails))!r}\n",
        [shell("grep -oE '[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[a-z]+' contacts.txt | sort -u > emails.txt")],
    )


@seed("text", 0.5)
def top_words(rng: random.Random) -> TaskSpec:
    vocab = rng.sample(WORDS, 8)
    counts = dict(zip(vocab, [12, 9, 7, 5, 3, 2, 2, 1], strict=True))
    tokens = [w for w, c in counts.items() for _ in range(c)]
    rng.shuffle(tokens)
    text, i = [], 0
    while i < len(tokens):
        k = rng.randint(4, 9)
        chunk = tokens[i:i + k]
        chunk[0] = chunk[0].title()
        text.append(" ".join(chunk) + rng.choice([".", "!", "?", ","]))
        i += k
    want = [f"{w} {c}" for w, c in list(counts.items())[:3]]
    return _spec(
        "essay.txt is a short text. Find the three most frequent words (case-insensitive, words are "
        "runs of letters) and write them to top3.txt, most frequent first, one per line as "
        "'<word> <count>' with the word in lowercase.",
        {"essay.txt": "\n".join(text) + "\n"},
        f"def test_top3():\n    assert read('top3.txt').strip().splitlines() == {want!r}\n",
        [shell("tr -cs 'A-Za-z' '\\n' < essay.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c "
               "| sort -rn | head -3 | awk '{print $2, $1}' > top3.txt")],
    )


@seed("text", 0.3)
def normalize_line_endings(rng: random.Random) -> TaskSpec:
    lines = [" ".join(rng.sample(WORDS, rng.randint(2, 5))) for _ in range(rng.randint(6, 12))]
    raw = "".join(line + " " * rng.randint(0, 3) + "\t" * rng.randint(0, 1) + "\r\n" for line in lines)
    return _spec(
        "notes.txt came from a Windows editor. Convert it in place to Unix line endings and remove "
        "trailing spaces and tabs from every line; keep the words and the line order as they are.",
        {"notes.txt": raw},
        f"def test_clean():\n    assert (WS / 'notes.txt').read_bytes() == {_lines(lines).encode()!r}\n",
        [shell("sed -i 's/\\r$//; s/[ \\t]*$//' notes.txt")],
    )


@seed("text", 0.3)
def bash_users(rng: random.Random) -> TaskSpec:
    users = rng.sample(FIRST, 9)
    rows, want = [], []
    for i, u in enumerate(users):
        sh_ = rng.choice(["/bin/bash", "/bin/sh", "/usr/sbin/nologin", "/bin/zsh"])
        rows.append(f"{u}:x:{1000 + i}:{1000 + i}:{u.title()}:/home/{u}:{sh_}")
        if sh_ == "/bin/bash":
            want.append(u)
    if not want:
        rows[0] = rows[0].rsplit(":", 1)[0] + ":/bin/bash"
        want = [users[0]]
    return _spec(
        "users.txt is in /etc/passwd format. Write the names of the users whose login shell is "
        "/bin/bash to bash_users.txt, one per line, in the order they appear.",
        {"users.txt": _lines(rows)},
        f"def test_users():\n    assert read('bash_users.txt').split() == {want!r}\n",
        [shell("awk -F: '$7 == \"/bin/bash\" {print $1}' users.txt > bash_users.txt")],
    )


# -- file system -----------------------------------------------------------------------------

@seed("files", 0.3)
def organize_by_extension(rng: random.Random) -> TaskSpec:
    exts = {"jpg": "images", "png": "images", "txt": "docs", "pdf": "docs"}
    files = {f"inbox/{w}.{rng.choice(list(exts))}": f"{w} {i}\n" for i, w in enumerate(rng.sample(WORDS, 8))}
    want = sorted(f"{exts[p.rsplit('.', 1)[1]]}/{p.split('/')[1]}" for p in files)
    return _spec(
        "Sort the files in inbox/: move images (.jpg, .png) into a folder images/ and documents "
        "(.txt, .pdf) into a folder docs/, both at the top of the workspace. inbox/ should end up empty.",
        files,
        "def test_sorted():\n"
        "    got = sorted(str(p.relative_to(WS)) for d in ('images', 'docs') for p in (WS / d).iterdir())\n"
        f"    assert got == {want!r}\n"
        "    assert not any((WS / 'inbox').iterdir())\n",
        [shell("mkdir -p images docs && mv inbox/*.jpg inbox/*.png images/ 2>/dev/null; "
               "mv inbox/*.txt inbox/*.pdf docs/ 2>/dev/null; true")],
    )


@seed("files", 0.3)
def find_large_files(rng: random.Random) -> TaskSpec:
    files, want = {}, []
    for i, w in enumerate(rng.sample(WORDS, 10)):
        size = rng.choice([10, 200, 999, 1000, 1001, 1500, 4000])
        path = f"data/{'sub/' if i % 3 == 0 else ''}{w}.bin"
        files[path] = "x" * (size - 1) + "\n"
        if size > 1000:
            want.append(path)
    if not want:
        files["data/big.bin"] = "y" * 2000 + "\n"
        want.append("data/big.bin")
    return _spec(
        "List every file under data/ (including subfolders) that is larger than 1000 bytes. Write "
        "their paths relative to the workspace (like data/x.bin), sorted, one per line, to large.txt.",
        files,
        f"def test_large():\n    assert read('large.txt').split() == {sorted(want)!r}\n",
        [shell("find data -type f -size +1000c | sort > large.txt")],
    )


@seed("files", 0.4)
def rename_lowercase(rng: random.Random) -> TaskSpec:
    names = [f"{w.title()} {rng.choice(['Trip', 'DAY', 'Pic'])} {i}.JPG" for i, w in enumerate(rng.sample(WORDS, 6))]
    files = {f"photos/{n}": f"image {i}\n" for i, n in enumerate(names)}
    want = sorted(n.lower().replace(" ", "_") for n in names)
    return _spec(
        "Rename every file in photos/ so that its name is all lowercase and spaces are replaced by "
        "underscores (for example 'My File.JPG' becomes 'my_file.jpg'). Keep the contents.",
        files,
        f"def test_names():\n    assert sorted(p.name for p in (WS / 'photos').iterdir()) == {want!r}\n\n"
        "def test_contents():\n"
        f"    for i, n in enumerate({names!r}):\n"
        "        assert (WS / 'photos' / n.lower().replace(' ', '_')).read_text() == f'image {i}\\n'\n",
        [shell("cd photos && for f in *; do n=$(printf '%s' \"$f\" | tr 'A-Z ' 'a-z_'); "
               "[ \"$f\" = \"$n\" ] || mv \"$f\" \"$n\"; done")],
    )


@seed("files", 0.4)
def remove_empty(rng: random.Random) -> TaskSpec:
    files, keep = {}, []
    for i, w in enumerate(rng.sample(WORDS, 9)):
        path = f"project/{rng.choice(['src', 'docs', 'tmp/cache'])}/{w}.txt"
        files[path] = "" if i % 3 == 0 else f"{w}\n"
        if i % 3:
            keep.append(path)
    files["project/old/empty.txt"] = ""
    return _spec(
        "Clean up project/: delete every empty file, then every folder that is left empty. Keep all "
        "files that have content, and keep project/ itself.",
        files,
        "def test_tree():\n"
        "    got = sorted(str(p.relative_to(WS)) for p in (WS / 'project').rglob('*') if p.is_file())\n"
        f"    assert got == {sorted(keep)!r}\n"
        "    assert all(any(d.iterdir()) for d in (WS / 'project').rglob('*') if d.is_dir())\n",
        [shell("find project -type f -empty -delete && find project -mindepth 1 -depth -type d -empty -delete")],
    )


@seed("files", 0.3)
def backup_archive(rng: random.Random) -> TaskSpec:
    files = {f"src/{w}.py": f"print({w!r})\n" for w in rng.sample(WORDS, 4)}
    files["src/lib/util.py"] = "X = 1\n"
    files["notes.txt"] = "not part of the backup\n"
    want = sorted(files)
    want.remove("notes.txt")
    return _spec(
        "Create a gzip-compressed tar archive backup.tar.gz with the src/ folder (member paths must "
        "start with src/). Leave src/ in place.",
        files,
        "import tarfile\n\n"
        "def test_archive():\n"
        "    with tarfile.open(WS / 'backup.tar.gz', 'r:gz') as tar:\n"
        "        names = sorted(m.name for m in tar.getmembers() if m.isfile())\n"
        f"    assert names == {want!r}\n"
        "    assert (WS / 'src').is_dir()\n",
        [shell("tar czf backup.tar.gz src")],
    )


@seed("files", 0.2)
def make_scripts_executable(rng: random.Random) -> TaskSpec:
    sh_files = [f"scripts/{w}.sh" for w in rng.sample(WORDS, 4)]
    other = [f"scripts/{w}.txt" for w in rng.sample(WORDS, 2)]
    files = {p: "#!/bin/sh\necho ok\n" for p in sh_files} | {p: "notes\n" for p in other}
    return _spec(
        "Make every .sh file in scripts/ executable. The other files in scripts/ must stay "
        "non-executable.",
        files,
        f"def test_modes():\n    for p in {sh_files!r}:\n        assert os.access(WS / p, os.X_OK), p\n"
        f"    for p in {other!r}:\n        assert not os.access(WS / p, os.X_OK), p\n",
        [shell("chmod +x scripts/*.sh")],
    )


@seed("files", 0.5)
def list_duplicates(rng: random.Random) -> TaskSpec:
    contents = [f"blob {rng.randint(0, 10**6)}\n" for _ in range(4)]
    files = {}
    for i, w in enumerate(rng.sample(WORDS, 10)):
        files[f"store/{w}.dat"] = contents[i % 4] if i < 7 else f"unique {i}\n"
    groups: dict[str, list[str]] = {}
    for p in sorted(files):
        groups.setdefault(files[p], []).append(p)
    want = sorted(p for g in groups.values() for p in g[1:])
    script = ("import hashlib, pathlib\nseen = {}\ndups = []\n"
              "for p in sorted(pathlib.Path('store').rglob('*')):\n"
              "    if p.is_file():\n        h = hashlib.sha256(p.read_bytes()).hexdigest()\n"
              "        if h in seen:\n            dups.append(str(p))\n        else:\n            seen[h] = p\n"
              "pathlib.Path('duplicates.txt').write_text(''.join(d + '\\n' for d in sorted(dups)))\n")
    return _spec(
        "Some files in store/ have identical contents. For each group of identical files, the path "
        "that sorts first is the original; list every other member (the duplicates) in "
        "duplicates.txt, as paths like store/x.dat, sorted, one per line. Do not delete anything.",
        files,
        f"def test_dups():\n    assert read('duplicates.txt').split() == {want!r}\n"
        f"    assert len(list((WS / 'store').iterdir())) == {len(files)}\n",
        [write("find_dups.py", script), shell("python3 find_dups.py")],
    )


# -- data wrangling --------------------------------------------------------------------------

def _people(rng: random.Random, n: int) -> list[dict[str, str]]:
    names = rng.sample([f"{f}_{la}" for f in FIRST for la in LAST], n)
    return [{"name": nm, "city": rng.choice(CITIES[:4]), "age": str(rng.randint(19, 70)),
             "score": str(rng.randint(0, 100))} for nm in names]


def _csv(rows: list[dict[str, str]], cols: list[str]) -> str:
    return ",".join(cols) + "\n" + "".join(",".join(r[c] for c in cols) + "\n" for r in rows)


@seed("data", 0.4)
def totals_per_region(rng: random.Random) -> TaskSpec:
    rows = [{"region": rng.choice(["north", "south", "east", "west"]), "amount": str(rng.randint(5, 500))}
            for _ in range(rng.randint(15, 30))]
    totals: Counter[str] = Counter()
    for r in rows:
        totals[r["region"]] += int(r["amount"])
    want = [{"region": k, "total": str(totals[k])} for k in sorted(totals)]
    script = ("import csv, collections\nt = collections.Counter()\n"
              "for r in csv.DictReader(open('sales.csv')):\n    t[r['region']] += int(r['amount'])\n"
              "with open('totals.csv', 'w', newline='') as f:\n    w = csv.writer(f, lineterminator='\\n')\n"
              "    w.writerow(['region', 'total'])\n    for k in sorted(t):\n        w.writerow([k, t[k]])\n")
    return _spec(
        "sales.csv lists sales with a region and an amount. Write totals.csv with the header "
        "region,total and one row per region holding the sum of its amounts, sorted by region.",
        {"sales.csv": _csv(rows, ["region", "amount"])},
        f"def test_totals():\n    assert rows('totals.csv') == {want!r}\n"
        "    assert read('totals.csv').splitlines()[0] == 'region,total'\n",
        [write("totals.py", script), shell("python3 totals.py")],
    )


@seed("data", 0.3)
def filter_employees(rng: random.Random) -> TaskSpec:
    people = _people(rng, 14)
    city, age = rng.choice(CITIES[:4]), rng.randint(30, 45)
    people[0]["city"], people[0]["age"] = city, str(age + 5)
    want = [p for p in people if p["city"] == city and int(p["age"]) > age]
    return _spec(
        f"people.csv has the columns name,city,age,score. Write filtered.csv with the same header and "
        f"only the rows of people who live in {city} and are older than {age}, in the original order.",
        {"people.csv": _csv(people, ["name", "city", "age", "score"])},
        f"def test_filtered():\n    assert rows('filtered.csv') == {want!r}\n"
        "    assert read('filtered.csv').splitlines()[0] == 'name,city,age,score'\n",
        [shell(f"awk -F, 'NR == 1 || ($2 == \"{city}\" && $3 > {age})' people.csv > filtered.csv")],
    )


@seed("data", 0.4)
def json_to_csv(rng: random.Random) -> TaskSpec:
    pairs = list(zip(rng.sample(FIRST, 6), rng.sample(LAST, 6), strict=True))
    ids = rng.sample(range(1, 99), 6)
    users = [{"id": i, "name": f"{f} {la}".title(), "email": f"{f}@{la}.dev", "active": rng.random() < 0.5}
             for i, (f, la) in zip(ids, pairs, strict=True)]
    want = [{"id": str(u["id"]), "name": u["name"], "email": u["email"]} for u in sorted(users, key=lambda u: u["id"])]
    script = ("import csv, json\nusers = sorted(json.load(open('users.json')), key=lambda u: u['id'])\n"
              "with open('users.csv', 'w', newline='') as f:\n    w = csv.writer(f, lineterminator='\\n')\n"
              "    w.writerow(['id', 'name', 'email'])\n"
              "    for u in users:\n        w.writerow([u['id'], u['name'], u['email']])\n")
    return _spec(
        "users.json is a list of user objects. Convert it to users.csv with exactly the columns "
        "id,name,email (in that order, with that header), one row per user, sorted by id.",
        {"users.json": json.dumps(users, indent=2) + "\n"},
        f"def test_csv():\n    assert rows('users.csv') == {want!r}\n"
        "    assert read('users.csv').splitlines()[0] == 'id,name,email'\n",
        [write("convert.py", script), shell("python3 convert.py")],
    )


@seed("data", 0.3)
def csv_to_json_map(rng: random.Random) -> TaskSpec:
    items = {f"SKU-{rng.randint(100, 999)}{c}": rng.randint(0, 50) for c in string.ascii_uppercase[:7]}
    lines = ["sku,description,qty"] + [f"{k},{rng.choice(WORDS)} part,{v}" for k, v in items.items()]
    return _spec(
        "inventory.csv lists parts. Write inventory.json: a JSON object that maps each sku to its "
        "quantity as an integer.",
        {"inventory.csv": _lines(lines)},
        f"def test_json():\n    assert json.loads(read('inventory.json')) == {items!r}\n",
        [shell("python3 -c \"import csv, json; json.dump({r['sku']: int(r['qty']) for r in "
               "csv.DictReader(open('inventory.csv'))}, open('inventory.json', 'w'))\"")],
    )


@seed("data", 0.3)
def update_json_config(rng: random.Random) -> TaskSpec:
    cfg = {"name": rng.choice(WORDS), "debug": True, "max_workers": rng.randint(2, 4),
           "db": {"host": "localhost", "port": rng.randint(5000, 6000)}, "features": rng.sample(WORDS, 3)}
    workers = rng.randint(8, 32)
    want = json.loads(json.dumps(cfg))
    want["debug"], want["max_workers"] = False, workers
    return _spec(
        f"Edit config.json: turn debug off and set max_workers to {workers}. Everything else must stay "
        "exactly as it is, and the file must remain valid JSON.",
        {"config.json": json.dumps(cfg, indent=4) + "\n"},
        f"def test_config():\n    assert json.loads(read('config.json')) == {want!r}\n",
        [shell(f"python3 -c \"import json; c = json.load(open('config.json')); c['debug'] = False; "
               f"c['max_workers'] = {workers}; json.dump(c, open('config.json', 'w'), indent=4)\"")],
    )


@seed("data", 0.5)
def join_orders(rng: random.Random) -> TaskSpec:
    customers = {f"C{i}": f"{f.title()} {la.title()}" for i, (f, la) in
                 enumerate(zip(rng.sample(FIRST, 5), rng.sample(LAST, 5), strict=True), start=1)}
    orders = [(f"O{100 + i}", rng.choice(list(customers)), rng.randint(10, 300)) for i in range(8)]
    want = [{"order_id": o, "customer": customers[c], "amount": str(a)} for o, c, a in orders]
    script = ("import csv\nnames = {r['id']: r['name'] for r in csv.DictReader(open('customers.csv'))}\n"
              "with open('report.csv', 'w', newline='') as f:\n    w = csv.writer(f, lineterminator='\\n')\n"
              "    w.writerow(['order_id', 'customer', 'amount'])\n"
              "    for r in csv.DictReader(open('orders.csv')):\n"
              "        w.writerow([r['order_id'], names[r['customer_id']], r['amount']])\n")
    return _spec(
        "orders.csv refers to customers by id; customers.csv has their names. Write report.csv with "
        "the header order_id,customer,amount: one row per order, in the order of orders.csv, with "
        "the customer's name instead of the id.",
        {"customers.csv": _lines(["id,name"] + [f"{k},{v}" for k, v in customers.items()]),
         "orders.csv": _lines(["order_id,customer_id,amount"] + [f"{o},{c},{a}" for o, c, a in orders])},
        f"def test_report():\n    assert rows('report.csv') == {want!r}\n",
        [write("join.py", script), shell("python3 join.py")],
    )


@seed("data", 0.4)
def status_counts(rng: random.Random) -> TaskSpec:
    statuses = rng.choices(["200", "301", "404", "500"], weights=[8, 1, 2, 1], k=rng.randint(20, 35))
    lines = [f"10.0.0.{rng.randint(1, 40)} - - [06/Jan/2025:10:{i % 60:02d}:00] \"GET /{rng.choice(WORDS)} "
             f"HTTP/1.1\" {s} {rng.randint(100, 5000)}" for i, s in enumerate(statuses)]
    want = dict(Counter(statuses))
    return _spec(
        "access.log is a web server log in the common log format. Write status_counts.json: a JSON "
        "object mapping each HTTP status code (as a string) to the number of requests with it.",
        {"access.log": _lines(lines)},
        f"def test_counts():\n    assert json.loads(read('status_counts.json')) == {want!r}\n",
        [shell("python3 -c \"import json, collections; c = collections.Counter(l.split()[-2] for l in "
               "open('access.log') if l.strip()); json.dump(c, open('status_counts.json', 'w'))\"")],
    )


@seed("data", 0.4)
def dedupe_contacts(rng: random.Random) -> TaskSpec:
    people = [{"first": f.title(), "last": la.title(), "phone": f"555-{rng.randint(1000, 9999)}"}
              for f, la in zip(rng.sample(FIRST, 7), rng.sample(LAST, 7), strict=True)]
    rows_ = people + rng.sample(people, 3)
    rng.shuffle(rows_)
    want = sorted(people, key=lambda r: (r["last"], r["first"]))
    return _spec(
        "contacts.csv (header first,last,phone) has duplicate rows. Rewrite it in place without "
        "duplicates, sorted by last name and then first name, keeping the header.",
        {"contacts.csv": _csv(rows_, ["first", "last", "phone"])},
        f"def test_contacts():\n    assert rows('contacts.csv') == {want!r}\n",
        [shell("(head -1 contacts.csv; tail -n +2 contacts.csv | sort -u | sort -t, -k2,2 -k1,1) > c.tmp "
               "&& mv c.tmp contacts.csv")],
    )


# -- small scripts -----------------------------------------------------------------------------

@seed("scripts", 0.4)
def fix_median(rng: random.Random) -> TaskSpec:
    code = ("def median(values):\n    \"\"\"The median of a non-empty list of numbers.\"\"\"\n"
            "    xs = sorted(values)\n    mid = len(xs) // 2\n    return xs[mid]\n")
    odd = [rng.randint(0, 50) for _ in range(5)]
    even = [rng.randint(0, 50) for _ in range(6)]
    while sorted(even)[2] == sorted(even)[3]:  # else the buggy median is right by chance
        even = [rng.randint(0, 50) for _ in range(6)]
    s = sorted(even)
    return _spec(
        "stats.py has a median function that gives wrong answers for lists with an even number of "
        "values (the median is then the mean of the two middle values). Fix it.",
        {"stats.py": code},
        f"def test_even():\n    assert call('stats', 'median', {even!r}) == {(s[2] + s[3]) / 2!r}\n\n"
        f"def test_odd():\n    assert call('stats', 'median', {odd!r}) == {sorted(odd)[2]!r}\n",
        [patch("stats.py", "    return xs[mid]\n",
               "    if len(xs) % 2:\n        return xs[mid]\n    return (xs[mid - 1] + xs[mid]) / 2\n")],
    )


@seed("scripts", 0.3)
def greet_cli(rng: random.Random) -> TaskSpec:
    name = rng.choice(FIRST).title()
    script = ("import argparse\np = argparse.ArgumentParser()\np.add_argument('name')\n"
              "p.add_argument('--shout', action='store_true')\na = p.parse_args()\n"
              "msg = f'Hello, {a.name}!'\nprint(msg.upper() if a.shout else msg)\n")
    return _spec(
        "Write a command-line script greet.py: `python3 greet.py NAME` prints 'Hello, NAME!' and with "
        "the flag --shout prints the same greeting in uppercase. Without a name it must exit with a "
        "non-zero status.",
        {"README.md": "# tools\n"},
        f"def test_greet():\n    out = py('greet.py', {name!r})\n    assert out.stdout == 'Hello, {name}!\\n'\n\n"
        f"def test_shout():\n    assert py('greet.py', {name!r}, '--shout').stdout == 'HELLO, {name.upper()}!\\n'\n\n"
        "def test_missing_name():\n    assert py('greet.py').returncode != 0\n",
        [write("greet.py", script)],
    )


@seed("scripts", 0.4)
def implement_slugify(rng: random.Random) -> TaskSpec:
    cases = {"Hello World": "hello-world", "  Trim  me  ": "trim-me", "C'est la vie!": "c-est-la-vie",
             "already-a-slug": "already-a-slug", "Multiple---dashes": "multiple-dashes"}
    extra = " ".join(rng.sample(WORDS, 3))
    cases[extra.upper() + "?!"] = extra.replace(" ", "-")
    stub = "def slugify(text):\n    \"\"\"URL slug of `text`.\"\"\"\n    raise NotImplementedError\n"
    impl = ("import re\n\n\ndef slugify(text):\n    \"\"\"URL slug of `text`.\"\"\"\n"
            "    return '-'.join(re.findall(r'[a-z0-9]+', text.lower()))\n")
    return _spec(
        "Implement slugify(text) in text_utils.py: lowercase the text, keep only runs of ASCII letters "
        "and digits, and join those runs with single hyphens (no leading or trailing hyphen).",
        {"text_utils.py": stub},
        "import pytest\n\n"
        f"@pytest.mark.parametrize('text,slug', {sorted(cases.items())!r})\n"
        "def test_slugify(text, slug):\n    assert call('text_utils', 'slugify', text) == slug\n",
        [write("text_utils.py", impl)],
    )


@seed("scripts", 0.3)
def count_txt_script(rng: random.Random) -> TaskSpec:
    n = rng.randint(2, 6)
    files = {f"sample/{w}.txt": "x\n" for w in rng.sample(WORDS, n)} | {"sample/skip.md": "y\n"}
    return _spec(
        "Write a shell script count.sh that prints the number of .txt files directly inside the "
        "folder given as its first argument (just the number).",
        files,
        f"def test_sample():\n    assert sh('sh count.sh sample').stdout.strip() == '{n}'\n\n"
        "def test_other_folder():\n"
        "    d = WS / 'probe_dir'\n    d.mkdir()\n    (d / 'a.txt').write_text('a')\n"
        "    assert sh('sh count.sh probe_dir').stdout.strip() == '1'\n",
        [write("count.sh", "#!/bin/sh\nfind \"$1\" -maxdepth 1 -type f -name '*.txt' | wc -l | tr -d ' '\n")],
    )


@seed("scripts", 0.4)
def fix_fizzbuzz(rng: random.Random) -> TaskSpec:
    n = rng.randint(16, 40)
    code = ("import sys\n\nfor i in range(1, int(sys.argv[1]) + 1):\n"
            "    if i % 3 == 0:\n        print('Fizz')\n    elif i % 5 == 0:\n        print('Buzz')\n"
            "    elif i % 15 == 0:\n        print('FizzBuzz')\n    else:\n        print(i)\n")
    want = ["FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
            for i in range(1, n + 1)]
    return _spec(
        f"fizzbuzz.py never prints FizzBuzz for multiples of 15. Fix it so that `python3 fizzbuzz.py {n}` "
        "prints the correct sequence.",
        {"fizzbuzz.py": code},
        f"def test_output():\n    assert py('fizzbuzz.py', {n}).stdout.split() == {want!r}\n",
        [patch("fizzbuzz.py", "    if i % 3 == 0:\n", "    if i % 15 == 0:\n        print('FizzBuzz')\n"
               "    elif i % 3 == 0:\n")],
    )


@seed("scripts", 0.5)
def parse_duration(rng: random.Random) -> TaskSpec:
    cases = {"1h": 3600, "90s": 90, "2m30s": 150, "1h1m1s": 3661}
    h, m = rng.randint(2, 9), rng.randint(1, 59)
    cases[f"{h}h{m}m"] = h * 3600 + m * 60
    stub = "def parse_duration(text):\n    \"\"\"Seconds in a duration like '1h30m'.\"\"\"\n    return 0\n"
    impl = ("import re\n\n\ndef parse_duration(text):\n    \"\"\"Seconds in a duration like '1h30m'.\"\"\"\n"
            "    parts = re.fullmatch(r'(?:(\\d+)h)?(?:(\\d+)m)?(?:(\\d+)s)?', text.strip())\n"
            "    if not text.strip() or parts is None:\n        raise ValueError(f'bad duration {text!r}')\n"
            "    h, m, s = (int(g or 0) for g in parts.groups())\n    return h * 3600 + m * 60 + s\n")
    return _spec(
        "Implement parse_duration(text) in durations.py: it takes strings like '1h30m', '45s' or "
        "'2h5m10s' (hours, minutes, seconds, each part optional but in that order) and returns the "
        "total number of seconds as an int. Invalid strings raise ValueError.",
        {"durations.py": stub},
        "import pytest\n\n"
        f"@pytest.mark.parametrize('text,secs', {sorted(cases.items())!r})\n"
        "def test_parse(text, secs):\n    assert call('durations', 'parse_duration', text) == secs\n\n"
        "def test_invalid():\n"
        "    out = py('-c', 'import durations\\ntry:\\n    durations.parse_duration(\"10x\")\\n'\n"
        "             'except ValueError:\\n    print(\"raised\")')\n"
        "    assert out.stdout.strip() == 'raised'\n",
        [write("durations.py", impl)],
    )


# -- git ---------------------------------------------------------------------------------------

GIT_INIT = "git init -q -b main && git add -A && git commit -q -m 'Initial commit'"


@seed("git", 0.3)
def git_commit_changes(rng: random.Random) -> TaskSpec:
    msg = f"Update {rng.choice(WORDS)} docs"
    return _spec(
        f"This git repository has uncommitted edits. Commit all of them (including the new file) as "
        f"one commit with the message '{msg}' on the current branch.",
        {"README.md": "# project\n", "docs/guide.md": "old guide\n"},
        "def test_clean_and_committed():\n"
        "    assert sh('git status --porcelain').stdout == ''\n"
        f"    assert sh('git log -1 --format=%s').stdout.strip() == {msg!r}\n"
        "    assert sh('git rev-list --count HEAD').stdout.strip() == '2'\n"
        "    assert sh('git show HEAD:docs/new.md').stdout == 'new page\\n'\n",
        [shell(f"git add -A && git commit -q -m '{msg}'")],
        setup=[GIT_INIT, "printf 'new guide\\n' > docs/guide.md && printf 'new page\\n' > docs/new.md"],
    )


@seed("git", 0.4)
def git_feature_branch(rng: random.Random) -> TaskSpec:
    branch = f"feature/{rng.choice(WORDS)}"
    note = f"Plan: {' '.join(rng.sample(WORDS, 4))}"
    return _spec(
        f"In this git repository, create a branch {branch} from main and switch to it. On it, add a "
        f"file NOTES.md containing the single line '{note}' and commit it. main must not change.",
        {"app.py": "print('app')\n"},
        "def test_branch():\n"
        f"    assert sh('git rev-parse --abbrev-ref HEAD').stdout.strip() == {branch!r}\n"
        f"    assert sh('git show HEAD:NOTES.md').stdout == {note + chr(10)!r}\n"
        "    assert sh('git rev-list --count main').stdout.strip() == '1'\n"
        "    assert sh('git rev-parse HEAD~1').stdout == sh('git rev-parse main').stdout\n",
        [shell(f"git switch -q -c {branch}"), write("NOTES.md", note + "\n"),
         shell("git add NOTES.md && git commit -q -m 'Add notes'")],
        setup=[GIT_INIT],
    )


@seed("git", 0.4)
def git_revert_last(rng: random.Random) -> TaskSpec:
    good = f"RATE = {rng.randint(2, 9)}\n"
    bad = f"RATE = {rng.randint(100, 900)}\n"
    return _spec(
        "The latest commit in this repository broke settings.py. Undo that commit's changes by adding "
        "a new commit on top (do not rewrite or drop history).",
        {"settings.py": "RATE = 1\n", "main.py": "import settings\n"},
        "def test_reverted():\n"
        f"    assert read('settings.py') == {good!r}\n"
        "    assert sh('git rev-list --count HEAD').stdout.strip() == '4'\n"
        "    assert sh('git status --porcelain').stdout == ''\n",
        [shell("git revert --no-edit HEAD")],
        setup=[GIT_INIT, f"printf '{good.strip()}\\n' > settings.py && git commit -qam 'Tune rate'",
               f"printf '{bad.strip()}\\n' > settings.py && git commit -qam 'Experiment'"],
    )


@seed("git", 0.5)
def git_find_commit(rng: random.Random) -> TaskSpec:
    subjects = [f"{rng.choice(['Add', 'Refactor', 'Tweak', 'Document'])} {w}" for w in rng.sample(WORDS, 5)]
    culprit = rng.randint(1, 4)
    setup = [GIT_INIT]
    for i, subject in enumerate(subjects):
        line = "# TODO: remove debug hook" if i == culprit else f"# step {i}"
        setup.append(f"printf '%s\\n' '{line}' >> app.py && git commit -qam '{subject}'")
    return _spec(
        "Somebody added a line containing 'TODO: remove debug hook' to app.py. Find the commit that "
        "introduced it and write that commit's subject line (its one-line message) to culprit.txt.",
        {"app.py": "print('start')\n"},
        f"def test_culprit():\n    assert read('culprit.txt').strip() == {subjects[culprit]!r}\n",
        [shell("git log -S'TODO: remove debug hook' --format=%s -- app.py | tail -1 > culprit.txt")],
        setup=setup,
    )


@seed("git", 0.3)
def git_ignore_artifacts(rng: random.Random) -> TaskSpec:
    logs = [f"{w}.log" for w in rng.sample(WORDS, 3)]
    files = {"main.py": "print(1)\n", **{f"logs/{p}": "log\n" for p in logs[:2]}, logs[2]: "log\n",
             "build/out.o": "obj\n", "notes.txt": "keep me tracked\n"}
    return _spec(
        "Make git ignore all .log files and the build/ folder in this repository, using a "
        ".gitignore at the top. notes.txt is new and must still show up as untracked. Do not commit.",
        files,
        "def test_status():\n"
        "    assert sorted(sh('git status --porcelain --untracked-files=all').stdout.splitlines()) == "
        "['?? .gitignore', '?? notes.txt']\n",
        [write(".gitignore", "*.log\nbuild/\n")],
        setup=["git init -q -b main && git add main.py && git commit -q -m 'Initial commit'"],
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
    if domain == "text":
        lines = [(" " * rng.randint(0, 2)) + " ".join(rng.sample(WORDS[:10], 2)).title()
                 * rng.choice([1, 1, 2]) + (" " * rng.randint(0, 2)) for _ in range(14)]
        lines[3:3] = ["", lines[0], ""]
        out = list(lines)
        for s in chain:
            out = s.apply(out)  # type: ignore[assignment]
        return TaskSpec(
            name="skills_text", domain="text", skills=names, difficulty=round(0.15 * k, 2),
            instruction=f"Transform input.txt line by line and write the result to output.txt: {steps}.",
            files={"input.txt": _lines(lines)},
            tests=f"def test_output():\n    assert read('output.txt') == {_lines(out)!r}\n\n"
                  f"def test_input_kept():\n    assert read('input.txt') == {_lines(lines)!r}\n",
            solution=[shell("cat input.txt | " + " | ".join(s.fragment for s in chain) + " > output.txt")],
        )
    if domain == "data":
        people = _people(rng, 16)
        out_rows: list[dict[str, str]] = [dict(r) for r in people]
        for s in chain:
            out_rows = s.apply(out_rows)  # type: ignore[assignment]
        cols = ["name", "city", "age", "score"] + (["grade"] if "grade" in names else [])
        script = ("import csv\nrows = list(csv.DictReader(open('people.csv')))\n"
                  + "".join(s.fragment + "\n" for s in chain)
                  + f"with open('result.csv', 'w', newline='') as f:\n"
                    f"    w = csv.DictWriter(f, fieldnames={cols!r}, lineterminator='\\n')\n"
                    "    w.writeheader()\n    w.writerows(rows)\n")
        return TaskSpec(
            name="skills_data", domain="data", skills=names, difficulty=round(0.15 * k, 2),
            instruction=("people.csv has the columns name,city,age,score. Write result.csv (with a header "
                         f"row) from it by applying these steps in order: {steps}."),
            files={"people.csv": _csv(people, ["name", "city", "age", "score"])},
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
    want = dict(tree)
    for s in chain:
        want = s.apply(want)  # type: ignore[assignment]
    return TaskSpec(
        name="skills_files", domain="files", skills=names, difficulty=round(0.15 * k, 2),
        instruction=f"Reorganize the files/ folder: {steps}. Do not change any file's contents.",
        files=tree,
        tests="def test_tree():\n"
              "    got = {str(p.relative_to(WS)): p.read_text() for p in (WS / 'files').rglob('*') if p.is_file()}\n"
              f"    assert got == {want!r}\n",
        solution=[shell(" && ".join(f"{{ {s.fragment}; }}" for s in chain))],
    )
