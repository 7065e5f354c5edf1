"""Tests you can find: every product module has a test file named after it, in the tests
folder that mirrors its package (`rollout/parsing/text.py` → `tests/rollout/parsing/test_text.py`);
a world folder's modules are tested by `tests/envs/worlds/test_<world>.py` (and, for every
world at once, by `tests/contracts/`)."""

from __future__ import annotations

from pathlib import Path

from tests.paths import ROOT

LAYERS = ("data", "envs", "verifiers", "rollout", "synthesis", "curation", "train", "pipelines")


def expected_test_file(module: Path) -> Path:
    """The test file a product module (a path relative to the repository) is tested in."""
    parts = module.parts
    if parts[:2] == ("envs", "worlds") and len(parts) > 3:
        return Path("tests", "envs", "worlds", f"test_{parts[2]}.py")
    return Path("tests", *parts[:-1], f"test_{module.stem}.py")


def product_modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for layer in LAYERS for p in (ROOT / layer).rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def test_the_rule_maps_modules_to_test_files() -> None:
    assert expected_test_file(Path("rollout/parsing/text.py")) == Path("tests/rollout/parsing/test_text.py")
    assert expected_test_file(Path("data/store.py")) == Path("tests/data/test_store.py")
    assert expected_test_file(Path("envs/worlds/clinic/design.py")) == Path("tests/envs/worlds/test_clinic.py")


def test_every_product_module_has_its_test_file() -> None:
    modules = product_modules()
    assert len(modules) > 150  # the layers were found
    missing = [f"{m} → {expected_test_file(m)}" for m in modules if not (ROOT / expected_test_file(m)).is_file()]
    assert not missing, "modules without their test file:\n" + "\n".join(missing)


def test_test_folders_are_packages_named_after_layers() -> None:
    """Each test folder is a package (no two test files collide by name) and mirrors a product
    folder, or is one of the folders that test across layers."""
    across = {"contracts", "e2e", "bench", "fakes", "fixtures"}
    for folder in (ROOT / "tests").rglob("*"):
        if not folder.is_dir() or folder.name == "__pycache__" or "fixtures" in folder.parts or "fakes" in folder.parts:
            continue
        rel = folder.relative_to(ROOT / "tests")
        assert (folder / "__init__.py").is_file(), f"tests/{rel} has no __init__.py"
        assert rel.parts[0] in across or (ROOT / rel).is_dir(), f"tests/{rel} mirrors no product folder"
