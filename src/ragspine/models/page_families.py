"""Which ColPali family a checkpoint is: from its ``config.json`` (``architectures``, then
``model_type``), from the base model of a PEFT adapter (``vidore/colqwen2-v1.0`` is one), or a
name given explicitly (with aliases: ``colsmol``, ``colqwen2.5``)."""

from __future__ import annotations

import logging

from ragspine.models._source import ModelSource, resolve_source
from ragspine.models.colpali import FAMILIES
from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

#: Adapter chains followed when detecting a family (adapter -> base -> ...).
_MAX_ADAPTER_DEPTH = 3

_ALIASES = {
    "colqwen2.5": "colqwen2_5",
    "colqwen2-5": "colqwen2_5",
    "colsmol": "colidefics3",
    "colidefics": "colidefics3",
}
#: config.json ``architectures`` entry -> family (checked first).
_ARCHITECTURES = {c.model_class: c.family for c in FAMILIES.values()}
#: config.json ``model_type`` -> family.
_MODEL_TYPES = {
    "paligemma": "colpali",
    "qwen2_vl": "colqwen2",
    "qwen2_5_vl": "colqwen2_5",
    "idefics3": "colidefics3",
}


def canonical_family(name: str) -> str:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FAMILIES:
        raise ModelLoadError(
            f"unknown page-model family {name!r}; supported: {', '.join(sorted(FAMILIES))} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return key


def detect_family(source: ModelSource, _depth: int = 0) -> str:
    """The family of a checkpoint, from its config.json or its PEFT adapter's base model."""
    cfg = source.read_json("config.json")
    if cfg is not None:
        for arch in cfg.get("architectures") or []:
            if arch in _ARCHITECTURES:
                return _ARCHITECTURES[arch]
        model_type = cfg.get("model_type")
        if model_type in _MODEL_TYPES:
            return _MODEL_TYPES[model_type]
        raise ModelLoadError(
            f"{source.model_id}: config.json says architectures={cfg.get('architectures')} "
            f"model_type={model_type!r}, which is no supported page-model family "
            f"({', '.join(sorted(FAMILIES))}); pass family= explicitly if it is one of them"
        )
    adapter = source.read_json("adapter_config.json")
    base = (adapter or {}).get("base_model_name_or_path")
    if base and _depth < _MAX_ADAPTER_DEPTH:
        logger.info("%s is a PEFT adapter on %s", source.model_id, base)
        return detect_family(resolve_source(base), _depth + 1)
    raise ModelLoadError(
        f"{source.model_id}: found neither config.json nor an adapter_config.json with a base "
        f"model in {source.path}; cannot tell the page-model family. Pass family= explicitly "
        f"({', '.join(sorted(FAMILIES))})."
    )
