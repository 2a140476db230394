"""Sharing a model (docs/sharing.md): the folder written in Hugging Face's layout (:func:`save_pretrained`, whose
rule :func:`check_share_target` a command checks before its work), its card (:func:`model_card`) and a Hub id or a
folder as a local path (:func:`pretrained_path`). Below ``runs/``: the models share themselves without it."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .checkpoint import CheckpointError, read_safetensors, save_weights
from .errors import InputError, first_line
from .files import check_output_owner, publish_folder, write_json, write_text
from .saved import RunFiles

#: The marker kind of a shared model's folder (:func:`onlstm.files.check_output_owner`).
EXPORT = "export"


#: The kinds of model an export holds (``config.json``'s ``kind``): a language model's, a logic classifier's.
EXPORTED_KINDS = ("lm", "logic-classifier")


def is_export(path: str | Path) -> bool:
    """An export written before markers: a shared model's files alone, ``config.json`` of one of
    :data:`EXPORTED_KINDS` and weights that read as safetensors (a folder of the user's that only looks like one
    is theirs)."""
    files = RunFiles(path)
    try:
        held = set(os.listdir(files.path))
    except OSError:
        return False
    names = {files.CONFIG, files.SHARED_WEIGHTS, files.VOCAB, files.CARD}
    if not (files.SHARED_WEIGHTS in held and held <= names and files.header().get("kind") in EXPORTED_KINDS):
        return False
    try:
        read_safetensors(files.path / files.SHARED_WEIGHTS, tensors=False)
    except CheckpointError:
        return False
    return True


def check_share_target(
    directory: str | Path,
    overwrite: bool = False,
    flag: str = "--to",
    overwrite_flag: str = "--overwrite",
    reads: tuple = (),
) -> Path:
    """Whether a shared model may be written into ``directory`` (:func:`save_pretrained`'s rule, for a writer to
    check before its work): a new or empty directory or an earlier export, anything else only with ``overwrite``,
    and never a training run, the root, the home folder, one that holds the working folder or one that holds a
    path the writer ``reads``."""
    files = RunFiles(directory)
    if files.path.exists() and not files.path.is_dir():
        raise InputError(f"{files.path} is a file; save_pretrained needs a directory (new or an earlier export)")
    held = [
        p.name for p in (files.resume_path, files.weights("best"), files.weights("last")) if p.exists()
    ]  # only a training writes them
    if held:
        raise InputError(f"{files.path} holds a training run ({held[0]}); save the shared model elsewhere")
    return check_output_owner(files.path, EXPORT, overwrite=overwrite, flag=flag, legacy=is_export,
                              overwrite_flag=overwrite_flag, reads=reads)  # fmt: skip


def check_run_config(run_config: object) -> dict:
    """``run_config`` of ``save_pretrained``: a dict of JSON values (it is written to config.json)."""
    if run_config is None:
        return {}
    if not isinstance(run_config, Mapping):
        raise InputError(f"run_config must be a dict (the training run's header), got {type(run_config).__name__}")
    try:
        json.dumps(run_config)  # infinities are fine: the writer turns them into strings
    except (TypeError, ValueError) as exc:
        raise InputError(f"run_config must hold JSON values only (numbers, strings, lists, dicts): {exc}") from None
    return dict(run_config)


def save_pretrained(
    directory: str | Path, model, config: dict, card: str, vocab: list[str] | None = None, overwrite: bool = False
) -> Path:
    """Write a model to share into ``directory``, all files at once (:func:`onlstm.files.publish_folder`): a new or
    empty directory or an earlier export, anything else only with ``overwrite``; never over a training run (its
    best weights would be lost)."""
    # called from Python: the message names the argument, not the command's flags
    try:
        directory = check_share_target(directory, overwrite, "directory", "overwrite=True")
    except InputError as exc:
        raise InputError(f"save_pretrained: {exc}") from None

    def write(tmp: Path) -> None:
        into = RunFiles(tmp)
        save_weights(into.shared_weights_path, model)
        if vocab is not None:
            write_json(into.vocab_path, list(vocab))
        into.write_config(config)
        write_text(into.card_path, card)

    return publish_folder(directory, EXPORT, write)


def pretrained_path(name_or_path: str | Path) -> Path:
    """A local directory as it is; ``owner/name`` is downloaded from the Hugging Face Hub (``huggingface_hub``)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    text = str(name_or_path)
    if text.count("/") != 1 or text.startswith((".", "/", "~")):
        raise CheckpointError(f"{text} does not exist (a local directory or an owner/name Hub id was expected)")
    # runs/nonexist reads as a Hub id too; where its folder exists here, it is more likely a mistyped local path
    mistyped = f" (though {path.parent} is: mistyped?)" if path.parent.is_dir() else ""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(
            f"{text} is not a local directory{mistyped}; to download it from the Hugging Face Hub install "
            "huggingface_hub (pip install huggingface_hub), or download the model yourself and pass its local directory"
        ) from None
    try:
        return Path(snapshot_download(repo_id=text, allow_patterns=["*.json", "*.safetensors", "*.md"]))
    except Exception as exc:  # the Hub client's errors (not found, offline, ...) become one line
        raise CheckpointError(
            f"{text} is not a local directory{mistyped} and cannot be downloaded from the Hugging Face Hub "
            f"({type(exc).__name__}: {first_line(exc)})"
        ) from None


def model_card(
    title: str, config: dict, usage: str, command: str | None, results: dict | None, headline: str = ""
) -> str:
    """A shared model's card: Hub metadata, what it is, how to load it, the command that reproduces its
    settings and its results, when known: in words first (``headline``, the model kind's figures, then how long it
    trained and why it stopped), then the run's own ``results.json`` as YAML."""
    kind = config.get("kind", "?")
    yaml_block = lambda data: f"```yaml\n{simple_yaml(data)}\n```\n"
    if command:
        training = f"The command that reproduces its settings:\n\n```\n{command}\n```\n"
    else:
        training = f"The training command is not known; `{RunFiles.CONFIG}` holds every setting.\n"
    shown = ""
    # the headline in words first: results.json's own keys (``best`` is a score) are the run's, not a reader's
    if results:
        words = " ".join(w for w in (headline.strip(), stop_words(results)) if w)
        shown = "## Results\n\n" + (f"{words}\n\n" if words else "") + yaml_block(results) + "\n"
    return (
        f"---\nlibrary_name: onlstm\ntags: [onlstm, ordered-neurons, {kind}]\n---\n\n# {title}\n\n"
        f"An onlstm (Ordered Neurons LSTM) model of kind `{kind}`, saved by onlstm {config.get('onlstm_version', '?')} "
        f"(`save_pretrained`): `{RunFiles.CONFIG}`, `{RunFiles.SHARED_WEIGHTS}` (weights, no pickled code) and "
        f"`{RunFiles.VOCAB}`.\n\n## Use\n\n{usage.strip()}\n\n## Training\n\n{training}\n"
        + shown
        + f"## Configuration\n\n{yaml_block({'model': config.get('model')})}"
    )


#: Why a run stopped (``results.json``'s ``stopped_by``, the engine's ``STATUS`` keys), as a card says it.
STOPPED_BY = {
    "epochs": "by its limit of epochs",
    "patience": "by its patience (validation no longer improving)",
    "max_steps": "by its limit of updates",
    "time_limit": "by its time limit",
    "diverged": "because it diverged",
}


def stop_words(results: dict) -> str:
    """How long a run trained and why it stopped, from its ``results.json``, for a card's headline ("" if unknown)."""
    why = STOPPED_BY.get(str(results.get("stopped_by")))
    if isinstance(results.get("epochs"), (int, float)) and why:
        return f"Trained {results['epochs']:g} epochs, stopped {why}."
    return ""


def simple_yaml(data: Any, indent: int = 0) -> str:
    """JSON-like data (dicts, lists, strings, numbers, booleans, None) as block YAML, with JSON's notation for
    scalars and lists of scalars (valid YAML): the card is written without pyyaml, which is not a core package."""
    pad = " " * indent
    if isinstance(data, dict) and data:
        lines = []
        for key, value in data.items():
            nested = bool(value) if isinstance(value, dict) else isinstance(value, list) and not _flat(value)
            head = f"{pad}{json.dumps(str(key)) if _needs_quotes(str(key)) else key}:"
            lines.append(f"{head}\n{simple_yaml(value, indent + 2)}" if nested else f"{head} {simple_yaml(value)}")
        return "\n".join(lines)
    if isinstance(data, list) and not _flat(data):
        return "\n".join(f"{pad}- " + simple_yaml(item, indent + 2).lstrip() for item in data)
    if isinstance(data, float) and not math.isfinite(data):  # JSON's NaN and Infinity are not YAML's
        return pad + {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}[str(data)]
    return pad + json.dumps(data)


def _flat(items: list) -> bool:
    return not any(isinstance(item, (dict, list)) for item in items)


def _needs_quotes(key: str) -> bool:
    return not key or not all(c.isalnum() or c in "_-." for c in key)
