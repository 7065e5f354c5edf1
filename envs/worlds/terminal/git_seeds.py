"""The terminal world's git seeds (see `seeds.py`): registered in `GIT_SEEDS`, which
`seeds.py` appends to `SEEDS` after its own."""

from __future__ import annotations

import random

from envs.workspace import TaskSpec, shell, write
from envs.worlds.terminal.common import (
    WORDS,
    Seed,
    make_spec,
    registrar,
)

GIT_SEEDS: dict[str, Seed] = {}
seed = registrar(GIT_SEEDS)


# -- git ---------------------------------------------------------------------------------------

GIT_INIT = "git init -q -b main && git add -A && git commit -q -m 'Initial commit'"


@seed("git", 0.3)
def git_commit_changes(rng: random.Random) -> TaskSpec:
    msg = f"Update {rng.choice(WORDS)} docs"
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
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
    return make_spec(
        "Make git ignore all .log files and the build/ folder in this repository, using a "
        ".gitignore at the top. notes.txt is new and must still show up as untracked. Do not commit.",
        files,
        "def test_status():\n"
        "    assert sorted(sh('git status --porcelain --untracked-files=all').stdout.splitlines()) == "
        "['?? .gitignore', '?? notes.txt']\n",
        [write(".gitignore", "*.log\nbuild/\n")],
        setup=["git init -q -b main && git add main.py && git commit -q -m 'Initial commit'"],
    )
