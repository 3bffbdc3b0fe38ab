"""Tiny randomly initialised CLIP models, built with each library's own classes and saved so tests
load them through the production loader (`evaluation.zero_shot.clip_models.load_clip`), offline:

- open_clip: a one-layer ViT and text tower registered as the architecture `hsi-tiny-clip` with
  open_clip's own `add_model_config`, its weights saved as a safetensors file;
- transformers: a `CLIPModel` from a `CLIPConfig` with one-layer towers, saved with save_pretrained
  beside the offline CLIP tokenizer of `tiny_sd` (open_clip's BPE vocabulary) and a
  `CLIPImageProcessor`.

Both take 32 px images (two 16 px patches a side) and embed into 16 dimensions; CLIP's vocabulary
(49,408 tokens) is kept so the real tokenizers work. Building either takes well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path

from tiny_sd import MAX_LENGTH, clip_tokenizer, special_token_ids

TINY_ARCH = "hsi-tiny-clip"
IMAGE_SIZE = 32
EMBED_DIM = 16
VOCAB_SIZE = 49408
OPENCLIP_CONFIG = {
    "embed_dim": EMBED_DIM,
    "vision_cfg": {"image_size": IMAGE_SIZE, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": MAX_LENGTH, "vocab_size": VOCAB_SIZE, "width": 32, "heads": 2, "layers": 1},
}
HF_TOWER = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2)


def register_tiny_openclip(folder: Path) -> str:
    """Register `hsi-tiny-clip` with open_clip (once per process; the config file lives in `folder`)."""
    import open_clip

    if TINY_ARCH not in open_clip.list_models():
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{TINY_ARCH}.json"
        path.write_text(json.dumps(OPENCLIP_CONFIG), "utf-8")
        open_clip.add_model_config(path)
    return TINY_ARCH


def tiny_openclip_spec(weights: Path) -> str:
    """`openclip:CONFIG.json:FILE` for tiny weights saved at `weights`: the architecture's config file
    is written beside them, so the spec loads in any process (open_clip registers it by its stem)."""
    config = weights.parent / "open_clip_configs" / f"{TINY_ARCH}.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(OPENCLIP_CONFIG), "utf-8")
    return f"openclip:{config}:{weights}"


def save_tiny_openclip(path: Path, seed: int = 0) -> Path:
    """Random weights of `hsi-tiny-clip` (registered first) saved as a safetensors file at `path`."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    register_tiny_openclip(path.parent / "open_clip_configs")
    path.parent.mkdir(parents=True, exist_ok=True)  # registering creates it only the first time in a process
    torch.manual_seed(seed)
    model = open_clip.create_model(TINY_ARCH)
    save_file({name: tensor.contiguous() for name, tensor in model.state_dict().items()}, str(path))
    return path


def save_tiny_hf_clip(folder: Path, seed: int = 0, shortest_edge: int = IMAGE_SIZE) -> Path:
    """A random `CLIPModel` with its tokenizer and image processor saved in `folder`; the processor
    resizes the shortest edge to `shortest_edge` and centre-crops 32 x 32."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    tokenizer = clip_tokenizer()
    config = CLIPConfig(
        text_config=dict(
            vocab_size=len(tokenizer), max_position_embeddings=MAX_LENGTH, **HF_TOWER, **special_token_ids(tokenizer)
        ),
        vision_config=dict(image_size=IMAGE_SIZE, patch_size=16, **HF_TOWER),
        projection_dim=EMBED_DIM,
    )
    torch.manual_seed(seed)
    CLIPModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessor(
        size={"shortest_edge": shortest_edge}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    ).save_pretrained(folder)
    return folder


def count_text_passes(monkeypatch, loaded) -> list[int]:
    """The batch size of every later pass through the text tower of `loaded` (a LoadedClip)."""
    name = "encode_text" if loaded.kind == "open_clip" else "get_text_features"
    original = getattr(loaded.model, name)
    passes: list[int] = []

    def counted(*args, **kwargs):
        tokens = args[0] if args else kwargs["input_ids"]
        passes.append(int(tokens.shape[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(loaded.model, name, counted)
    return passes
