"""A model to share in Hugging Face's layout (config.json, model.safetensors, vocab.json, a model card)."""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from ..checkpoint import (
    PRETRAINED_WEIGHTS,
    CheckpointError,
    atomic_write,
    save_weights,
    write_json,
)
from ..errors import InputError

# --------------------------------------------------------------------------- sharing a model


def save_pretrained(
    directory: str | Path, model: nn.Module, config: dict, card: str, vocab: list[str] | None = None
) -> Path:
    """Write a model to share in Hugging Face's layout: ``config.json`` (``config``, the same content as a
    run's, so :func:`load_run` reads it), ``model.safetensors``, ``vocab.json`` and ``README.md`` (``card``).

    A directory that holds a training run is refused (its ``model.best`` would sit beside the shared
    weights); an earlier export is overwritten file by file, each written atomically."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory} is a file; save_pretrained needs a directory (new or an earlier export)")
    run_files = [
        n
        for n in ("resume.safetensors", "model.best.safetensors", "model.last.safetensors")
        if (directory / n).exists()
    ]
    if run_files:
        raise InputError(f"{directory} holds a training run ({run_files[0]}); save the shared model elsewhere")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {directory}: {exc.strerror}; choose another directory") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{directory} is not writable; choose another directory")
    save_weights(directory / PRETRAINED_WEIGHTS, model)
    if vocab is not None:
        write_json(directory / "vocab.json", list(vocab))
    write_json(directory / "config.json", config)
    atomic_write(directory / "README.md", lambda tmp: Path(tmp).write_text(card, encoding="utf-8"))
    return directory


def pretrained_path(name_or_path: str | Path) -> Path:
    """A local directory as it is; otherwise ``owner/name`` is taken for a Hugging Face Hub id and
    downloaded with ``huggingface_hub`` (not a dependency of onlstm: install it to use the Hub)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    text = str(name_or_path)
    if text.count("/") != 1 or text.startswith((".", "/", "~")):
        raise CheckpointError(f"{text} does not exist (a local directory or an owner/name Hub id was expected)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(
            f"{text} is not a local directory; to download it from the Hugging Face Hub install huggingface_hub "
            "(pip install huggingface_hub), or download the model yourself and pass its local directory"
        ) from None
    try:
        return Path(snapshot_download(repo_id=text, allow_patterns=["*.json", "*.safetensors", "*.md"]))
    except Exception as exc:  # the Hub client's errors (not found, offline, ...) become one line
        raise CheckpointError(
            f"{text}: cannot download from the Hugging Face Hub ({type(exc).__name__}: {exc})"
        ) from None


def model_card(title: str, config: dict, usage: str, command: str | None, results: dict | None) -> str:
    """The ``README.md`` of a shared model: Hub metadata, what it is, how to load it, how it was trained
    (the command that reproduces its settings) and its results, when known."""
    import yaml

    kind = config.get("kind", "?")
    lines = [
        "---",
        "library_name: onlstm",
        f"tags: [onlstm, ordered-neurons, {kind}]",
        "---",
        "",
        f"# {title}",
        "",
        f"An onlstm (Ordered Neurons LSTM) model of kind `{kind}`, saved by onlstm "
        f"{config.get('onlstm_version', '?')} (`save_pretrained`): `config.json`, `model.safetensors` "
        "(weights, no pickled code) and `vocab.json`.",
        "",
        "## Use",
        "",
        usage.strip(),
        "",
        "## Training",
        "",
    ]
    if command:
        lines += ["The command that reproduces its settings:", "", "```", command, "```", ""]
    else:
        lines += ["The training command is not known; `config.json` holds every setting.", ""]
    if results:
        lines += ["## Results", "", "```yaml", yaml.safe_dump(results, sort_keys=False).strip(), "```", ""]
    lines += [
        "## Configuration",
        "",
        "```yaml",
        yaml.safe_dump({"model": config.get("model")}, sort_keys=False).strip(),
        "```",
        "",
    ]
    return "\n".join(lines)
