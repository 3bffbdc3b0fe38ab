"""One small adapter over the two kinds of CLIP model the toolkit loads, so the text classifier and
the zero-shot module are written once:

- an open_clip model (`encode_image`, `encode_text`, `logit_scale`) with open_clip's tokenizer
  (a callable from a list of strings to a LongTensor of token ids);
- a transformers `CLIPModel` (`get_image_features`, `get_text_features`, `logit_scale`) with its
  Hugging Face tokenizer (called with padding and truncation, returning input ids and a mask).

Both store the log of the logit scale, as CLIP does; `logit_scale()` returns its exponential.
Features come back unnormalised, as float32, whatever the model's own precision.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Sequence

import torch

from builder.core.errors import UsageError


class EncoderError(UsageError, ValueError):
    """A model or tokenizer the zero-shot classifier cannot use."""


class ClipEncoders(torch.nn.Module, abc.ABC):
    """Image and text features and the logit scale of one CLIP model."""

    kind = "clip"

    def __init__(self, model: torch.nn.Module, tokenizer) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def logit_scale(self) -> torch.Tensor:
        return self.model.logit_scale.exp().float()

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return self._image_features(images.to(self.device, self.dtype)).float()

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        tokens = {name: value.to(self.device) for name, value in self.tokenize(texts).items()}
        return self._text_features(tokens).float()

    def tokens_digest(self, texts: Sequence[str]) -> str:
        """sha256 of the tokenizer's class and the token ids it gives `texts`: the same weights read
        through another tokenizer embed other text, so the cache key includes this."""
        digest = hashlib.sha256(f"{type(self.tokenizer).__module__}.{type(self.tokenizer).__qualname__}".encode())
        for name, value in sorted(self.tokenize(texts).items()):
            digest.update(name.encode())
            digest.update(value.to(torch.int64).contiguous().numpy().tobytes())
        return digest.hexdigest()

    @abc.abstractmethod
    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """The model's text inputs for `texts`, on the CPU."""

    @abc.abstractmethod
    def _image_features(self, images: torch.Tensor) -> torch.Tensor: ...

    @abc.abstractmethod
    def _text_features(self, tokens: dict[str, torch.Tensor]) -> torch.Tensor: ...


class OpenClipEncoders(ClipEncoders):
    kind = "open_clip"

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return {"text": self.tokenizer(list(texts))}

    def _image_features(self, images: torch.Tensor) -> torch.Tensor:
        return self.model.encode_image(images)

    def _text_features(self, tokens: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.encode_text(tokens["text"])


class HfClipEncoders(ClipEncoders):
    kind = "transformers"

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        # truncated at the text tower's positions (77 for CLIP), as CLIP's own tokenizer truncates
        limit = getattr(getattr(self.model.config, "text_config", None), "max_position_embeddings", None)
        encoded = self.tokenizer(list(texts), padding=True, truncation=True, max_length=limit, return_tensors="pt")
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    def _image_features(self, images: torch.Tensor) -> torch.Tensor:
        return _pooled(self.model.get_image_features(pixel_values=images))

    def _text_features(self, tokens: dict[str, torch.Tensor]) -> torch.Tensor:
        return _pooled(self.model.get_text_features(**tokens))


def _pooled(output) -> torch.Tensor:
    # transformers 5 returns the projected features as the output's pooler_output; 4.x returned the tensor
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def clip_encoders(model, tokenizer) -> ClipEncoders:
    """The adapter for an open_clip model or a transformers `CLIPModel` and its tokenizer."""
    if isinstance(model, ClipEncoders):
        return model
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "logit_scale"):
        raise EncoderError(
            f"a zero-shot classifier needs a CLIP model with a logit_scale (open_clip or transformers' CLIPModel), "
            f"got {type(model).__name__}"
        )
    if tokenizer is None or not callable(tokenizer):
        raise EncoderError("a zero-shot classifier needs the model's tokenizer: pass tokenizer=")
    if hasattr(model, "encode_image") and hasattr(model, "encode_text"):
        return OpenClipEncoders(model, tokenizer)
    if hasattr(model, "get_image_features") and hasattr(model, "get_text_features"):
        return HfClipEncoders(model, tokenizer)
    raise EncoderError(
        f"{type(model).__name__} has neither encode_image/encode_text (open_clip) nor "
        "get_image_features/get_text_features (transformers' CLIPModel)"
    )
