"""The on-disk cache of text classifiers: embedding 1000 classes x 80 templates takes minutes on a
CPU, and the result depends only on the model, the tokenizer, the names and the templates.

- The key is a sha256 over the model's weights (`weights_fingerprint`: every state_dict tensor in
  order, with its name, dtype and shape), the tokenizer (`ClipEncoders.tokens_digest`), the class
  names, the templates and the recipe's version. Any change is a miss.
- An entry is a safetensors file `<key>.safetensors` (never a pickle) holding one float32 tensor
  [classes, dim], with the key in its metadata. It is written under a temporary name and renamed
  when whole, so a reader never sees half a file.
- A read checks the key, dtype, shape, finiteness and unit-norm rows; anything else (truncated,
  foreign, edited) is a miss, and the entry is rebuilt and replaced.
- The folder: the `cache_dir` argument, else $HSI_ZERO_SHOT_CACHE, else `$HF_HOME/hsi/zero-shot`
  (the user's Hugging Face cache, where the toolkit keeps its other caches; `HF_HOME` defaults to
  ~/.cache/huggingface).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

CACHE_VARIABLE = "HSI_ZERO_SHOT_CACHE"
RECIPE = "clip-zero-shot-v1: mean of L2-normalised template embeddings, L2-normalised, float32"
TENSOR = "text_classifier"
SUFFIX = ".safetensors"
UNIT_NORM_TOLERANCE = 1e-3


def default_cache_dir() -> Path:
    """$HSI_ZERO_SHOT_CACHE, else the toolkit's folder in the user's Hugging Face cache."""
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "hsi" / "zero-shot"


def weights_fingerprint(module: torch.nn.Module) -> str:
    """sha256 over the module's state_dict: each tensor's name, dtype, shape and bytes, in order."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        # viewed as bytes, so bfloat16 (which numpy lacks) hashes like any other dtype
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def cache_key(weights: str, tokens: str, class_names: Sequence[str], templates: Sequence[str]) -> str:
    """The entry's name: sha256 of everything the text classifier depends on."""
    record = {
        "recipe": RECIPE,
        "weights": weights,
        "tokens": tokens,
        "class_names": list(class_names),
        "templates": list(templates),
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class TextClassifierCache:
    """Entries in one folder, created on the first write."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder).expanduser()

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def read(self, key: str, num_classes: int) -> torch.Tensor | None:
        """The entry's tensor [num_classes, dim], or None when there is none or it fails a check."""
        path = self.path(key)
        if path.is_symlink() or not path.is_file():
            return None
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                if (handle.metadata() or {}).get("key") != key or set(handle.keys()) != {TENSOR}:
                    return None
                tensor = handle.get_tensor(TENSOR)
        except Exception:  # noqa: BLE001 - whatever a damaged file raises, it is a miss and is rebuilt
            return None
        return tensor if _valid(tensor, num_classes) else None

    def write(self, key: str, tensor: torch.Tensor) -> Path | None:
        """Store `tensor` as the entry for `key`; a folder that cannot be written is a line on stderr,
        not a failure: the classifier is in memory and the run goes on without the cache."""
        from safetensors.torch import save_file

        path = self.path(key)
        temporary = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=f".{key}.", suffix=".tmp")
            os.close(handle)
            save_file({TENSOR: tensor.detach().to("cpu", torch.float32).contiguous()}, temporary, metadata={"key": key})
            os.replace(temporary, path)
            return path
        except OSError as error:
            print(
                f"hsi: the text classifier cache {self.folder} cannot be written ({error}); going on without it",
                file=sys.stderr,
                flush=True,
            )
            return None
        finally:
            if temporary is not None and os.path.exists(temporary):
                os.unlink(temporary)


def _valid(tensor: torch.Tensor, num_classes: int) -> bool:
    if tensor.dtype != torch.float32 or tensor.ndim != 2 or tensor.shape[0] != num_classes or tensor.shape[1] < 1:
        return False
    if not bool(torch.isfinite(tensor).all()):
        return False
    return bool(((tensor.norm(dim=1) - 1).abs() <= UNIT_NORM_TOLERANCE).all())
