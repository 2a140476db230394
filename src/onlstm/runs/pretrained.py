"""A shared model: where to find one (a local directory or a Hub id) and its model card; the files are written by
:meth:`onlstm.runs.RunDir.save_pretrained`."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import CheckpointError


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
