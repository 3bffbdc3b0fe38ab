"""A tiny randomly initialised Grounding DINO, built from transformers' own config classes with a
small Swin backbone, a one-layer BERT text encoder and a locally built word-level vocabulary, saved
with `save_pretrained` so tests load it through the production loader (the registry's
"grounding-dino" detector, `builder.backends.grounding_dino`), offline."""

from __future__ import annotations

from pathlib import Path

from builder.core.classes import imagenet_classes

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def encoder_and_decoder(**settings) -> dict:
    """The same settings for the detector's encoder and decoder: `ffn_dim=32` gives `encoder_ffn_dim=32`
    and `decoder_ffn_dim=32`."""
    return {f"{part}_{name}": value for part in ("encoder", "decoder") for name, value in settings.items()}


# Toy sizes, by part, for transformers' own config classes.
SWIN_BACKBONE = dict(
    image_size=64, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1], window_size=4
)
BERT_TEXT_ENCODER = dict(
    hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=64
)
DETECTOR = {
    **dict(d_model=32, num_queries=20, max_text_len=32),
    **encoder_and_decoder(ffn_dim=32, attention_heads=2, n_points=2),
    **dict(encoder_layers=1, decoder_layers=2),  # transformers ties the decoder's box heads: needs two layers
}


def vocabulary(wnids) -> list[str]:
    """Special tokens, punctuation and every lower-case word of the given classes' names."""
    names = {c.wnid: c.name for c in imagenet_classes()}
    words = sorted({word for wnid in wnids for word in names[wnid].lower().replace("-", " ").replace("'", " ").split()})
    return SPECIAL_TOKENS + [".", ",", "-", "'"] + words


def save_tiny_grounding_dino(folder: Path, wnids, seed: int = 0) -> Path:
    import torch
    from transformers import (
        BertConfig,
        BertTokenizer,
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
        SwinConfig,
    )

    words = vocabulary(wnids)
    backbone = SwinConfig(**SWIN_BACKBONE, out_features=["stage2", "stage3", "stage4"])
    text = BertConfig(vocab_size=len(words), **BERT_TEXT_ENCODER)
    config = GroundingDinoConfig(backbone_config=backbone, text_config=text, **DETECTOR)
    torch.manual_seed(seed)
    model = GroundingDinoForObjectDetection(config).eval()
    tokenizer = BertTokenizer(vocab={word: i for i, word in enumerate(words)}, do_lower_case=True)
    image_processor = GroundingDinoImageProcessor(size={"shortest_edge": 64, "longest_edge": 96})
    processor = GroundingDinoProcessor(image_processor=image_processor, tokenizer=tokenizer)
    folder = Path(folder)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
