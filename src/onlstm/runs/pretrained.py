"""A shared model: where to find one (a local directory or a Hub id) and its model card; the files are written by
:meth:`onlstm.runs.RunDir.save_pretrained`."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import CheckpointError
from .dirs import RunDir


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
    """The model card of a shared model: Hub metadata, what it is, how to load it, how it was trained
    (the command that reproduces its settings) and its results, when known."""
    import yaml

    kind = config.get("kind", "?")
    yaml_block = lambda data: f"```yaml\n{yaml.safe_dump(data, sort_keys=False).strip()}\n```\n"
    if command:
        training = f"The command that reproduces its settings:\n\n```\n{command}\n```\n"
    else:
        training = f"The training command is not known; `{RunDir.CONFIG}` holds every setting.\n"
    return (
        f"---\nlibrary_name: onlstm\ntags: [onlstm, ordered-neurons, {kind}]\n---\n\n# {title}\n\n"
        f"An onlstm (Ordered Neurons LSTM) model of kind `{kind}`, saved by onlstm {config.get('onlstm_version', '?')} "
        f"(`save_pretrained`): `{RunDir.CONFIG}`, `{RunDir.SHARED_WEIGHTS}` (weights, no pickled code) and "
        f"`{RunDir.VOCAB}`.\n\n## Use\n\n{usage.strip()}\n\n## Training\n\n{training}\n"
        + (f"## Results\n\n{yaml_block(results)}\n" if results else "")
        + f"## Configuration\n\n{yaml_block({'model': config.get('model')})}"
    )
