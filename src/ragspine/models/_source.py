"""Where a model comes from, and which exact version it is (model id and revision).

A model is named by a local folder (saved with ``save_pretrained`` or sentence-transformers'
``save``) or by a Hugging Face Hub id. :func:`resolve_source` turns either into a
:class:`ModelSource` whose ``model_id`` and ``revision`` go into the library record (a library is
never searched with vectors from two models):

- a folder inside a Hugging Face cache (``.../models--org--name/snapshots/<commit>/``): the
  hub id and the commit hash;
- a Hub id: the commit the hub (or, offline, the local cache) resolves it to. Weights are then
  loaded at that exact commit, so the recorded revision is the one that was run;
- any other folder: its absolute path, and a content fingerprint (``sha256:...``) of its
  configuration files, weight index and weight files (size plus the first and last MiB of each,
  which covers the safetensors header and real tensor bytes without reading gigabytes).

Only the standard library is imported here; huggingface_hub is imported when a Hub id is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

_SNAPSHOT_RE = re.compile(
    r"models--(?P<repo>[^/\\]+)[/\\]snapshots[/\\](?P<rev>[0-9a-f]{40})(?:[/\\]|$)"
)
#: Files whose bytes define a model's configuration.
_CONFIG_FILES = (
    "config.json",
    "adapter_config.json",
    "modules.json",
    "config_sentence_transformers.json",
    "sentence_bert_config.json",
    "artifact.metadata",
    "preprocessor_config.json",
    "processor_config.json",
    "tokenizer.json",
)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_INDEX_SUFFIX = ".index.json"
_EDGE_BYTES = 1 << 20  # bytes read from each end of a weight file for the fingerprint
#: Hub files never needed to run a model with torch (skipped when a whole snapshot is fetched).
HUB_IGNORE = ["*.onnx", "*.h5", "*.msgpack", "*.ot", "onnx/*", "openvino/*", "*.tflite", "*.gguf"]


@dataclass(frozen=True)
class ModelSource:
    """A resolved model location and identity.

    ``path`` is a local folder holding at least the model's JSON files (for a Hub id: the
    cached snapshot of its ``*.json`` files; weights are fetched by ``from_pretrained`` at
    ``revision``). ``repo_id`` is set when the model comes from the Hub.
    """

    model_id: str
    revision: str
    path: Path
    repo_id: str | None = None

    @property
    def load_name(self) -> str:
        """What to hand to ``from_pretrained`` / sentence-transformers."""
        return self.repo_id if self.repo_id is not None else str(self.path)

    @property
    def is_adapter(self) -> bool:
        """A PEFT adapter repository (``adapter_config.json``), e.g. vidore/colqwen2-v1.0."""
        return (self.path / "adapter_config.json").is_file()

    @property
    def load_kwargs(self) -> dict[str, Any]:
        """Extra ``from_pretrained`` arguments pinning the Hub commit.

        For a PEFT adapter the commit is the adapter repository's, so it goes to
        ``adapter_kwargs``; a top-level ``revision`` would also be asked of the base model's
        repository, which has no such commit.
        """
        if self.repo_id is None:
            return {}
        if self.is_adapter:
            return {"adapter_kwargs": {"revision": self.revision}}
        return {"revision": self.revision}

    @property
    def file_kwargs(self) -> dict[str, Any]:
        """``from_pretrained`` arguments for files of this repository itself (processors)."""
        return {"revision": self.revision} if self.repo_id is not None else {}

    def read_json(self, filename: str) -> dict[str, Any] | None:
        """A JSON file of the model folder, or None when absent."""
        f = self.path / filename
        if not f.is_file():
            return None
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"{self.model_id}: cannot read {filename}: {e}") from e
        return data if isinstance(data, dict) else None

    def file(self, filename: str) -> Path | None:
        """A local path to ``filename`` of the model (downloaded at ``revision`` for Hub ids)."""
        local = self.path / filename
        if local.is_file():
            return local
        if self.repo_id is None:
            return None
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

        try:
            return Path(hf_hub_download(self.repo_id, filename, revision=self.revision))
        except (EntryNotFoundError, LocalEntryNotFoundError):
            return None

    def materialize(self) -> Path:
        """A local folder with every file of the model (a Hub snapshot is fetched in full)."""
        if self.repo_id is None:
            return self.path
        from huggingface_hub import snapshot_download

        try:
            return Path(
                snapshot_download(self.repo_id, revision=self.revision, ignore_patterns=HUB_IGNORE)
            )
        except Exception as e:
            raise ModelLoadError(
                f"{self.repo_id}@{self.revision}: could not fetch the model files from the "
                f"Hugging Face Hub or its local cache ({type(e).__name__}: {e})"
            ) from e


def snapshot_identity(path: Path) -> tuple[str, str] | None:
    """``(hub id, commit)`` when ``path`` lies inside a Hugging Face cache snapshot."""
    m = _SNAPSHOT_RE.search(str(path))
    if m is None:
        return None
    org_name = m.group("repo")
    repo_id = org_name.replace("--", "/", 1)
    return repo_id, m.group("rev")


def folder_fingerprint(path: Path) -> str:
    """Content fingerprint of a model folder: config files, weight index, weight files.

    Stable across copies and moves of the folder; changes when the configuration, the tokenizer
    or the weights change.
    """
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file() and _fingerprinted(p))
    if not files:
        raise ModelLoadError(
            f"{path} holds no model files (no config.json, modules.json or weights); "
            "expected a folder written by save_pretrained"
        )
    for f in files:
        rel = f.relative_to(path).as_posix()
        size = f.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with f.open("rb") as fh:
            if f.name.endswith(_WEIGHT_SUFFIXES) and size > 2 * _EDGE_BYTES:
                h.update(fh.read(_EDGE_BYTES))
                fh.seek(size - _EDGE_BYTES)
                h.update(fh.read(_EDGE_BYTES))
            else:
                h.update(fh.read())
    return "sha256:" + h.hexdigest()[:40]


def _fingerprinted(p: Path) -> bool:
    name = p.name
    if any(part.startswith(".") for part in p.parts[-2:]):
        return False
    return name in _CONFIG_FILES or name.endswith(_WEIGHT_SUFFIXES) or name.endswith(_INDEX_SUFFIX)


def _looks_like_path(name: str) -> bool:
    return (
        name.startswith(("/", ".", "~"))
        or "\\" in name
        or name.count("/") > 1
        or Path(name).expanduser().exists()
    )


def resolve_source(
    name_or_path: str | Path, *, model_id: str | None = None, hub_patterns: list[str] | None = None
) -> ModelSource:
    """Resolve a local folder or a Hub id to a :class:`ModelSource`.

    ``model_id`` overrides the recorded id (used for models shipped inside a Python package).
    ``hub_patterns`` are the files fetched up front for a Hub id (default: its JSON files).
    """
    name = str(name_or_path).strip()
    if not name:
        raise ModelLoadError("empty model name: give a Hugging Face id or a local folder")
    if _looks_like_path(name):
        path = Path(name).expanduser().resolve()
        if not path.is_dir():
            raise ModelLoadError(
                f"model folder {path} does not exist or is not a folder; give a folder written "
                "by save_pretrained, or a Hugging Face id such as 'vidore/colqwen2-v1.0'"
            )
        ident = snapshot_identity(path)
        if ident is not None:
            repo_id, rev = ident
            return ModelSource(model_id=model_id or repo_id, revision=rev, path=path)
        return ModelSource(
            model_id=model_id or str(path), revision=folder_fingerprint(path), path=path
        )
    return _resolve_hub(name, model_id=model_id, patterns=hub_patterns or ["*.json"])


def _resolve_hub(repo_id: str, *, model_id: str | None, patterns: list[str]) -> ModelSource:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - huggingface_hub comes with transformers
        from ragspine.errors import MissingExtraError

        raise MissingExtraError("huggingface-hub", "gpu", f"loading {repo_id!r}") from e
    try:
        snap = Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as e:
        raise ModelLoadError(
            f"{repo_id!r} is not a local folder, and the Hugging Face Hub could not provide it "
            f"({type(e).__name__}: {e}). Give a folder written by save_pretrained, or pre-fill "
            "the Hugging Face cache (HF_HOME) on a machine that can reach the hub."
        ) from e
    ident = snapshot_identity(snap)
    revision = ident[1] if ident else folder_fingerprint(snap)
    logger.info("resolved %s to revision %s", repo_id, revision)
    return ModelSource(model_id=model_id or repo_id, revision=revision, path=snap, repo_id=repo_id)
