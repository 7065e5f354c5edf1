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

from envs.workspace import TaskSpec, patch, shell, write
from envs.worlds.terminal.common import (
    CITIES,
    FIRST,
    LAST,
    WORDS,
    Seed,
    draw_people,
    make_spec,
    registrar,
    text_lines,
    to_csv,
)
from envs.worlds.terminal.git_seeds import GIT_SEEDS
from envs.worlds.terminal.skills import SKILLS, Skill, compose_skills  # noqa: F401  (re-exported)

SEEDS: dict[str, Seed] = {}
seed = registrar(SEEDS)


# -- text processing ----------------------------------------------------------------------

@seed("text", 0.2)
def count_error_lines(rng: random.Random) -> TaskSpec:
    levels = rng.choices(["INFO", "WARN", "ERROR", "DEBUG"], weights=[5, 2, 2, 3], k=rng.randint(25, 45))
    levels[rng.randrange(len(levels))] = "ERROR"
    log = [f"2025-01-0{1 + i % 9}T10:{i % 60:02d}:00 {lv} worker-{rng.randint(1, 4)} {rng.choice(WORDS)} done"
           for i, lv in enumerate(levels)]
    n = levels.count("ERROR")
    return make_spec(
        "app.log holds the service's log. Count how many lines have the level ERROR and write just "
        "that number to error_count.txt.",
        {"app.log": text_lines(log)},
        f"def test_count():\n    assert read('error_count.txt').strip() == '{n}'\n\n"
        "def test_log_untouched():\n    assert read('app.log').count('\\n') == " + str(len(log)) + "\n",
        [shell("grep -c ' ERROR ' app.log > error_count.txt")],
    )


@seed("text", 0.2)
def sort_unique_words(rng: random.Random) -> TaskSpec:
    words = [rng.choice(WORDS) for _ in range(rng.randint(20, 40))]
    want = sorted(set(words))
    return make_spec(
        "words.txt has one word per line, with repeats. Write every distinct word once, in "
        "alphabetical order, one per line, to unique.txt.",
        {"words.txt": text_lines(words)},
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
        files[f"conf/{name}.conf"] = text_lines(body)
    files["conf/README"] = f"The hosts in these files were {old} before the move.\n"
    return make_spec(
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
    return make_spec(
        "contacts.txt is a messy list of notes. Extract every email address it contains, write each "
        "distinct address once, sorted alphabetically, one per line, to emails.txt.",
        {"contacts.txt": text_lines(lines)},
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
    return make_spec(
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
    return make_spec(
        "notes.txt came from a Windows editor. Convert it in place to Unix line endings and remove "
        "trailing spaces and tabs from every line; keep the words and the line order as they are.",
        {"notes.txt": raw},
        f"def test_clean():\n    assert (WS / 'notes.txt').read_bytes() == {text_lines(lines).encode()!r}\n",
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
    return make_spec(
        "users.txt is in /etc/passwd format. Write the names of the users whose login shell is "
        "/bin/bash to bash_users.txt, one per line, in the order they appear.",
        {"users.txt": text_lines(rows)},
        f"def test_users():\n    assert read('bash_users.txt').split() == {want!r}\n",
        [shell("awk -F: '$7 == \"/bin/bash\" {print $1}' users.txt > bash_users.txt")],
    )


# -- file system -----------------------------------------------------------------------------

@seed("files", 0.3)
def organize_by_extension(rng: random.Random) -> TaskSpec:
    exts = {"jpg": "images", "png": "images", "txt": "docs", "pdf": "docs"}
    files = {f"inbox/{w}.{rng.choice(list(exts))}": f"{w} {i}\n" for i, w in enumerate(rng.sample(WORDS, 8))}
    want = sorted(f"{exts[p.rsplit('.', 1)[1]]}/{p.split('/')[1]}" for p in files)
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
        "Some files in store/ have identical contents. For each group of identical files, the path "
        "that sorts first is the original; list every other member (the duplicates) in "
        "duplicates.txt, as paths like store/x.dat, sorted, one per line. Do not delete anything.",
        files,
        f"def test_dups():\n    assert read('duplicates.txt').split() == {want!r}\n"
        f"    assert len(list((WS / 'store').iterdir())) == {len(files)}\n",
        [write("find_dups.py", script), shell("python3 find_dups.py")],
    )


# -- data wrangling --------------------------------------------------------------------------

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
    return make_spec(
        "sales.csv lists sales with a region and an amount. Write totals.csv with the header "
        "region,total and one row per region holding the sum of its amounts, sorted by region.",
        {"sales.csv": to_csv(rows, ["region", "amount"])},
        f"def test_totals():\n    assert rows('totals.csv') == {want!r}\n"
        "    assert read('totals.csv').splitlines()[0] == 'region,total'\n",
        [write("totals.py", script), shell("python3 totals.py")],
    )


@seed("data", 0.3)
def filter_employees(rng: random.Random) -> TaskSpec:
    people = draw_people(rng, 14)
    city, age = rng.choice(CITIES[:4]), rng.randint(30, 45)
    people[0]["city"], people[0]["age"] = city, str(age + 5)
    want = [p for p in people if p["city"] == city and int(p["age"]) > age]
    return make_spec(
        f"people.csv has the columns name,city,age,score. Write filtered.csv with the same header and "
        f"only the rows of people who live in {city} and are older than {age}, in the original order.",
        {"people.csv": to_csv(people, ["name", "city", "age", "score"])},
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
    return make_spec(
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
    return make_spec(
        "inventory.csv lists parts. Write inventory.json: a JSON object that maps each sku to its "
        "quantity as an integer.",
        {"inventory.csv": text_lines(lines)},
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
    return make_spec(
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
    return make_spec(
        "orders.csv refers to customers by id; customers.csv has their names. Write report.csv with "
        "the header order_id,customer,amount: one row per order, in the order of orders.csv, with "
        "the customer's name instead of the id.",
        {"customers.csv": text_lines(["id,name"] + [f"{k},{v}" for k, v in customers.items()]),
         "orders.csv": text_lines(["order_id,customer_id,amount"] + [f"{o},{c},{a}" for o, c, a in orders])},
        f"def test_report():\n    assert rows('report.csv') == {want!r}\n",
        [write("join.py", script), shell("python3 join.py")],
    )


@seed("data", 0.4)
def status_counts(rng: random.Random) -> TaskSpec:
    statuses = rng.choices(["200", "301", "404", "500"], weights=[8, 1, 2, 1], k=rng.randint(20, 35))
    lines = [f"10.0.0.{rng.randint(1, 40)} - - [06/Jan/2025:10:{i % 60:02d}:00] \"GET /{rng.choice(WORDS)} "
             f"HTTP/1.1\" {s} {rng.randint(100, 5000)}" for i, s in enumerate(statuses)]
    want = dict(Counter(statuses))
    return make_spec(
        "access.log is a web server log in the common log format. Write status_counts.json: a JSON "
        "object mapping each HTTP status code (as a string) to the number of requests with it.",
        {"access.log": text_lines(lines)},
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
    return make_spec(
        "contacts.csv (header first,last,phone) has duplicate rows. Rewrite it in place without "
        "duplicates, sorted by last name and then first name, keeping the header.",
        {"contacts.csv": to_csv(rows_, ["first", "last", "phone"])},
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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


SEEDS.update(GIT_SEEDS)  # the git seeds (git_seeds.py) come last
