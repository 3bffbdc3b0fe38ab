"""The `sam` masker: Segment Anything (Kirillov et al. 2023) prompted by each ground-truth box.

Per image, as SamPredictor does: resize the long side to the encoder's input size, normalise, pad
to a square and embed once; then prompt the mask decoder with every box of the image at once
(multimask_output=True) and keep, per box, the mask with the highest predicted IoU (the paper's
rule). Boxes are passed in ImageNet's VOC values as the paper's scripts did. Because every image is
padded to the same square, any images share one encoder batch.

Checkpoints are Meta's official files (vit_h by default; vit_l, vit_b), read from --sam-checkpoint
or HSI_SAM_CHECKPOINT, loaded with torch.load(map_location="cpu") so a GPU-saved file opens
anywhere, and checked against the architecture before any work.

`--sam-model auto` builds the architecture the checkpoint's tensor shapes describe instead of a
named one (image size, patch size, widths, depths, windows, global-attention blocks are all read
from the shapes; the two head counts that shapes cannot tell are read from head widths or, for the
mask decoder's transformer, are SAM's 8). It exists for fine-tuned or reduced SAMs, and the test
suite uses it for a tiny SAM. It is never a fallback: a named model whose shapes do not match the
file is an error that says what the file holds.

Determinism: on one device type, a box's mask does not depend on which other images share its
encoder batch (tested on CPU). Across device types (CPU vs CUDA) floats differ in the last bits, so
a few pixels on a mask's border can differ.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from builder.backends.base import BackendInfo, Masker
from builder.backends.loader_gate import first_line, sam_model
from builder.backends.registry import BackendUnavailable, from_setting, register_backend
from builder.backends.torch_base import (
    CheckpointConfig,
    CheckpointSource,
    TorchBackend,
    checkpoint_sha256,
    count_parameters,
    math_mode,
)
from builder.core.records import Box

SAM_MODELS = ("vit_h", "vit_l", "vit_b", "auto")
CHECKPOINT = CheckpointSource(
    what="the SAM checkpoint",
    flag="--sam-checkpoint",
    variable="HSI_SAM_CHECKPOINT",
    published="Meta's segment-anything release (github.com/facebookresearch/segment-anything, "
    "'Model Checkpoints'; e.g. https://dl.fbaipublicfiles.com/segment_anything/sam_vit_h_4b8939.pth)",
)


@dataclass(frozen=True)
class SamConfig(CheckpointConfig):
    """`batch_size` counts images per encoder call."""

    source: ClassVar[CheckpointSource] = CHECKPOINT
    checkpoint: str | None = CHECKPOINT.config_field()
    model: str = from_setting("sam_model", "vit_h")  # one of SAM_MODELS
    compile_encoder: bool = from_setting("compile_encoder", False)  # torch.compile the encoder (its input is fixed)


@dataclass(frozen=True)
class SamArchitecture:
    """What the tensor shapes of a SAM state_dict say about its architecture."""

    image_size: int
    patch_size: int
    embed_dim: int
    depth: int
    num_heads: int
    mlp_ratio: float
    window_size: int
    global_attn_indexes: tuple[int, ...]
    qkv_bias: bool
    use_rel_pos: bool
    prompt_dim: int
    mask_in_chans: int
    num_multimask_outputs: int
    decoder_depth: int
    decoder_mlp_dim: int
    decoder_heads: int
    iou_head_depth: int
    iou_head_hidden_dim: int

    def encoder_kwargs(self) -> dict[str, Any]:
        """segment-anything's `ImageEncoderViT` arguments (its norm layer apart): the fields it names
        alike, plus the input side and the neck's width, which it calls `img_size` and `out_chans`."""
        alike = {name: getattr(self, name) for name in ENCODER_GEOMETRY + ENCODER_ATTENTION}
        return {"img_size": self.image_size, "out_chans": self.prompt_dim, **alike}

    def transformer_kwargs(self) -> dict[str, Any]:
        """The arguments of the mask decoder's `TwoWayTransformer`."""
        return {
            "depth": self.decoder_depth,
            "embedding_dim": self.prompt_dim,
            "mlp_dim": self.decoder_mlp_dim,
            "num_heads": self.decoder_heads,
        }


# The SamArchitecture fields that ImageEncoderViT takes under the same name: the ViT's geometry
# and its attention.
ENCODER_GEOMETRY = ("patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio")
ENCODER_ATTENTION = ("qkv_bias", "use_rel_pos", "window_size", "global_attn_indexes")

# The geometry of Meta's three checkpoints (segment_anything/build_sam.py), to name what a file holds.
OFFICIAL = {
    "vit_h": (1280, 32, (7, 15, 23, 31)),
    "vit_l": (1024, 24, (5, 11, 17, 23)),
    "vit_b": (768, 12, (2, 5, 8, 11)),
}
SAM_DECODER_HEADS = 8
# Hinted batches kept: extract hints batch k + 1 just before it masks batch k, so two are pending
AHEAD_KEPT = 2  # every SAM's two-way transformer; head counts are invisible in shapes


def _count(state: dict, prefix: str) -> int:
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)\.")
    indexes = {int(m.group(1)) for key in state if (m := pattern.match(key))}
    return max(indexes) + 1 if indexes else 0


def infer_architecture(state: dict) -> SamArchitecture:
    """Read the architecture from a SAM state_dict; KeyError/ValueError when it is not one."""
    patch = state["image_encoder.patch_embed.proj.weight"]
    embed_dim, _, patch_size, _ = patch.shape
    grid = state["image_encoder.pos_embed"].shape[1]
    depth = _count(state, "image_encoder.blocks.")
    if depth == 0:
        raise ValueError("no image encoder blocks")
    use_rel_pos = "image_encoder.blocks.0.attn.rel_pos_h" in state
    if not use_rel_pos:
        raise ValueError("encoder without relative positions (every SAM has them)")
    spans = [state[f"image_encoder.blocks.{i}.attn.rel_pos_h"].shape[0] for i in range(depth)]
    head_dim = state["image_encoder.blocks.0.attn.rel_pos_h"].shape[1]
    global_spans = 2 * grid - 1
    windowed = sorted({s for s in spans if s != global_spans})
    if len(windowed) > 1:
        raise ValueError(f"blocks disagree on the window size ({windowed})")
    window_size = (windowed[0] + 1) // 2 if windowed else 0
    global_attn = tuple(i for i, s in enumerate(spans) if s == global_spans) if windowed else ()
    return SamArchitecture(
        image_size=int(grid * patch_size),
        patch_size=int(patch_size),
        embed_dim=int(embed_dim),
        depth=depth,
        num_heads=int(embed_dim // head_dim),
        mlp_ratio=state["image_encoder.blocks.0.mlp.lin1.weight"].shape[0] / embed_dim,
        window_size=int(window_size),
        global_attn_indexes=global_attn,
        qkv_bias="image_encoder.blocks.0.attn.qkv.bias" in state,
        use_rel_pos=use_rel_pos,
        prompt_dim=int(state["image_encoder.neck.0.weight"].shape[0]),
        mask_in_chans=int(state["prompt_encoder.mask_downscaling.6.weight"].shape[1]),
        num_multimask_outputs=_count(state, "mask_decoder.output_hypernetworks_mlps.") - 1,
        decoder_depth=_count(state, "mask_decoder.transformer.layers."),
        decoder_mlp_dim=int(state["mask_decoder.transformer.layers.0.mlp.lin1.weight"].shape[0]),
        decoder_heads=SAM_DECODER_HEADS,
        iou_head_depth=_count(state, "mask_decoder.iou_prediction_head.layers."),
        iou_head_hidden_dim=int(state["mask_decoder.iou_prediction_head.layers.0.weight"].shape[0]),
    )


def official_name(arch: SamArchitecture) -> str | None:
    for name, (dim, depth, global_attn) in OFFICIAL.items():
        if (arch.embed_dim, arch.depth, arch.global_attn_indexes, arch.image_size) == (dim, depth, global_attn, 1024):
            return name
    return None


def build_sam(arch: SamArchitecture):
    """A randomly initialised SAM of `arch`, made of segment-anything's own classes."""
    import torch
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer

    grid = arch.image_size // arch.patch_size
    return Sam(
        image_encoder=ImageEncoderViT(**arch.encoder_kwargs(), norm_layer=partial(torch.nn.LayerNorm, eps=1e-6)),
        prompt_encoder=PromptEncoder(
            embed_dim=arch.prompt_dim,
            image_embedding_size=(grid, grid),
            input_image_size=(arch.image_size, arch.image_size),
            mask_in_chans=arch.mask_in_chans,
        ),
        mask_decoder=MaskDecoder(
            transformer_dim=arch.prompt_dim,
            transformer=TwoWayTransformer(**arch.transformer_kwargs()),
            num_multimask_outputs=arch.num_multimask_outputs,
            iou_head_depth=arch.iou_head_depth,
            iou_head_hidden_dim=arch.iou_head_hidden_dim,
        ),
        pixel_mean=[123.675, 116.28, 103.53],
        pixel_std=[58.395, 57.12, 57.375],
    )


def read_state_dict(path: Path) -> dict:
    from builder.core.untrusted import UntrustedInput, load_torch

    try:
        state = load_torch(path, "SAM checkpoint")  # weights_only: tensors and plain values, one line
    except UntrustedInput as exc:
        raise CHECKPOINT.unusable(path, f"not a readable torch checkpoint: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle means an unusable file
        reason = f"not a readable torch checkpoint: {type(exc).__name__}: {first_line(exc)}"
        raise CHECKPOINT.unusable(path, reason) from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]  # training checkpoints wrap the weights
    if not isinstance(state, dict):
        raise CHECKPOINT.unusable(path, f"it holds a {type(state).__name__}, not a state_dict")
    return state


def load_sam(path: Path, model: str):
    """Build the SAM `model` names (or the file's own architecture for `auto`) and load `path`."""
    import torch

    if model not in SAM_MODELS:
        raise BackendUnavailable(f"--sam-model must be one of {', '.join(SAM_MODELS)}, got {model!r}")
    state = read_state_dict(path)
    try:
        arch = infer_architecture(state)
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        raise CHECKPOINT.unusable(path, f"not a SAM state_dict ({type(exc).__name__}: {exc})") from None
    holds = (
        official_name(arch)
        or f"a non-standard SAM (embed_dim {arch.embed_dim}, depth {arch.depth}, input {arch.image_size})"
    )
    if model != "auto" and official_name(arch) != model:
        raise CHECKPOINT.unusable(path, f"--sam-model {model} was asked for but the file holds {holds}")
    # Built on the meta device: no random initialisation (seconds for vit_h) of weights the checkpoint
    # replaces; the file's tensors are assigned. SAM's pixel mean and std are not in the state_dict
    # and its constructor makes them on the CPU whatever the default device, so they stay real.
    with torch.device("meta"):
        sam = build_sam(arch) if model == "auto" else sam_model(model)
    try:
        sam.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise CHECKPOINT.unusable(path, f"its weights do not fit {model}: {str(exc)[:300]}") from None
    left = [name for name, tensor in [*sam.named_parameters(), *sam.named_buffers()] if tensor.is_meta]
    if left:
        raise CHECKPOINT.unusable(path, f"it leaves {', '.join(left[:3])} unset")
    return sam.eval(), arch


class SamMasker(TorchBackend, Masker):
    """Per batch: the images go to the device as uint8 (from pinned memory on CUDA) and are
    resized, normalised and padded there; the encoder runs under `--precision` (bf16 autocast on
    CUDA by default), the mask decoder in float32 on float32 features, once for every box of the
    batch, and the masks come back in one device-to-host copy. `prepare_ahead` readies the next
    batch in a thread while this one runs."""

    name = "sam"

    def __init__(
        self,
        sam,
        arch: SamArchitecture,
        model: str,
        checkpoint: Path,
        sha256: str,
        device: str,
        batch_size: int,
        precision: str | None = None,
        compile_encoder: bool = False,
    ) -> None:
        super().__init__(sam, checkpoint.name, sha256, device, batch_size, "the SAM image encoder", precision)
        self.sam = sam
        self.arch = arch
        self.model = model
        self.compile_encoder = compile_encoder
        self.encoder = None  # the (compiled) image encoder of this process, made on first use
        self.compile_seconds = 0.0
        # (images, their preparation) of the batches hinted ahead, oldest first; at most AHEAD_KEPT
        self.ahead: list[tuple[list, Future]] = []
        self.preparer: ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(encoder=None, ahead=[], preparer=None)  # threads and compiled graphs stay in their process
        return state

    def info(self) -> BackendInfo:
        return self.provenance(
            {
                "model": official_name(self.arch) or "auto",
                "architecture": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.arch).items()},
                "parameters": count_parameters(self.sam),
                "box_prompt": "voc-inclusive",
                "selection": "highest-predicted-iou",
                "mask_threshold": float(self.sam.mask_threshold),
                # the encoder's math (the mask decoder always runs in float32) and how it resizes
                "precision": self.precision,
                "resize": "torch-bilinear-antialias",
            }
        )

    def prepare(self, images: Sequence[np.ndarray]) -> list[tuple[Any, tuple[int, int]]]:
        """Each image as the encoder takes it (3 x S x S, normalised and padded, on the device) and
        its resized (h, w). The resize is segment-anything's own for tensors (`apply_image_torch`:
        bilinear, antialiased), run where the encoder runs."""
        import torch
        import torch.nn.functional as F
        from segment_anything.utils.transforms import ResizeLongestSide

        device = self.ready()
        side = self.arch.image_size
        prepared = []
        for image in images:
            # torch wants writable memory; a decoded image may be a read-only view (a cheap copy)
            pixels = torch.from_numpy(image if image.flags.writeable else image.copy())
            if device.type == "cuda":
                pixels = pixels.pin_memory().to(device, non_blocking=True)
            size = ResizeLongestSide.get_preprocess_shape(image.shape[0], image.shape[1], side)
            resized = F.interpolate(
                pixels.permute(2, 0, 1).unsqueeze(0).float(), size, mode="bilinear", align_corners=False, antialias=True
            )
            prepared.append((self.sam.preprocess(resized[0]), tuple(size)))
        return prepared

    def prepare_ahead(self, images: Sequence[np.ndarray]) -> None:
        """Start preparing `images` (the next batch) in a thread; `masks_batch` of the same images
        takes the result. Any other call prepares its own, so this changes speed only."""
        if self.preparer is None:
            self.preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sam-prepare")
        self.ahead = [*self.ahead, (list(images), self.preparer.submit(self.prepare, list(images)))][-AHEAD_KEPT:]

    def prepared(self, images: Sequence[np.ndarray]) -> list[tuple[Any, tuple[int, int]]]:
        """`images` prepared: by the thread when they were hinted (the hint is used up), else here."""
        for index, (hinted, preparation) in enumerate(self.ahead):
            if len(hinted) == len(images) and all(a is b for a, b in zip(hinted, images)):
                del self.ahead[index]
                return preparation.result()
        return self.prepare(images)

    def image_encoder(self):
        if self.encoder is None:
            self.encoder = self.sam.image_encoder
            if self.compile_encoder:
                import time

                import torch

                started = time.perf_counter()
                compiled = torch.compile(self.sam.image_encoder)
                side = self.arch.image_size
                with torch.inference_mode(), math_mode(self.ready(), self.precision, autocast_bf16=True):
                    compiled(torch.zeros((1, 3, side, side), device=self.ready()))  # compile now, timed apart
                self.compile_seconds = time.perf_counter() - started
                self.encoder = compiled
        return self.encoder

    def embed(self, images: Sequence[np.ndarray]):
        """Image embeddings (B x C x g x g, float32) and each image's resized (h, w)."""
        import torch

        device = self.ready()
        prepared = self.prepared(images)
        encoder, precision = self.image_encoder(), self.precision

        def encode(chunk):
            batch = torch.stack([tensor for tensor, _ in chunk])
            with torch.inference_mode(), math_mode(device, precision, autocast_bf16=True):
                features = encoder(batch)
            return list(features.float())  # the decoder takes float32 features

        features = self.batch.run(prepared, encode)
        return features, [size for _, size in prepared]

    def decode_batch(self, features, sizes, images: Sequence[np.ndarray], boxes: Sequence[Sequence[Box]]):
        """One boolean mask per box of every image: all boxes in one mask-decoder call, all masks in
        one device-to-host copy. Of the multimask outputs, each box keeps the one with the highest
        predicted IoU."""
        import torch
        from segment_anything.utils.transforms import ResizeLongestSide

        device = self.ready()
        resize = ResizeLongestSide(self.arch.image_size)
        prompts, owner = [], []
        for index, (image, image_boxes) in enumerate(zip(images, boxes)):
            if image_boxes:
                prompt = np.array([box.as_list() for box in image_boxes], dtype=np.float64)
                prompts.append(resize.apply_boxes(prompt, image.shape[:2]))
                owner += [index] * len(image_boxes)
        if not prompts:
            return [[] for _ in images]
        with torch.inference_mode(), math_mode(device, "fp32", autocast_bf16=False):
            sparse, dense = self.sam.prompt_encoder(
                points=None,
                boxes=torch.as_tensor(np.concatenate(prompts), dtype=torch.float32, device=device),
                masks=None,
            )
            owners = torch.as_tensor(owner, device=device)
            low_res, iou = decode_boxes(self.sam, torch.stack(list(features))[owners], sparse, dense)
            best = select_by_iou(low_res, iou)
            flat = []
            for index, image in enumerate(images):
                mine = best[owners == index]
                if len(mine):
                    masks = self.sam.postprocess_masks(mine, sizes[index], image.shape[:2]) > self.sam.mask_threshold
                    flat.append(masks[:, 0].reshape(-1))
            host = torch.cat(flat).cpu().numpy()  # the batch's one copy back
        result, offset = [], 0
        for image, image_boxes in zip(images, boxes):
            height, width = image.shape[:2]
            count = len(image_boxes)
            block = host[offset : offset + count * height * width].reshape(count, height, width)
            result.append(list(block))
            offset += count * height * width
        return result

    def masks_batch(self, images: Sequence[np.ndarray], boxes: Sequence[Sequence[Box]]) -> list[list[np.ndarray]]:
        if not images:
            return []
        features, sizes = self.embed(images)
        return self.decode_batch(features, sizes, images, boxes)


def decode_boxes(sam, embeddings, sparse, dense):
    """SAM's mask decoder for N boxes, each with its own image embedding (N x C x g x g): the same
    modules and steps as `MaskDecoder.predict_masks`, which takes one image for all its prompts, so
    that the boxes of several images share one call. Returns N x K mask logits and N x K IoUs."""
    import torch

    decoder = sam.mask_decoder
    tokens = torch.cat([decoder.iou_token.weight, decoder.mask_tokens.weight], dim=0)
    tokens = torch.cat([tokens.unsqueeze(0).expand(sparse.size(0), -1, -1), sparse], dim=1)
    src = embeddings + dense
    positions = sam.prompt_encoder.get_dense_pe().expand(len(src), -1, -1, -1)
    batch, channels, height, width = src.shape
    hidden, src = decoder.transformer(src, positions, tokens)
    iou_token = hidden[:, 0, :]
    mask_tokens = hidden[:, 1 : 1 + decoder.num_mask_tokens, :]
    upscaled = decoder.output_upscaling(src.transpose(1, 2).view(batch, channels, height, width))
    hyper = torch.stack([mlp(mask_tokens[:, i, :]) for i, mlp in enumerate(decoder.output_hypernetworks_mlps)], dim=1)
    b, c, h, w = upscaled.shape
    masks = (hyper @ upscaled.view(b, c, h * w)).view(b, -1, h, w)
    iou = decoder.iou_prediction_head(iou_token)
    # multimask output: the masks after the first (the single-mask token), as predict_masks' caller keeps
    return masks[:, 1:], iou[:, 1:]


def select_by_iou(low_res_masks, iou_predictions):
    """N x K x h x w mask logits and N x K predicted IoUs -> N x 1 x h x w: per box, the mask with
    the highest predicted IoU (ties go to the first)."""
    import torch

    best = iou_predictions.argmax(dim=1)
    return low_res_masks[torch.arange(low_res_masks.shape[0], device=low_res_masks.device), best].unsqueeze(1)


@register_backend("masker", "sam", config_class=SamConfig, requires=("torch", "segment_anything"))
def make_sam_masker(config: SamConfig) -> SamMasker:
    """Factory for `--masker sam`: every check that can fail happens here, before any work."""
    path = config.locate()
    sam, arch = load_sam(path, config.model)
    return SamMasker(
        sam,
        arch,
        config.model,
        path,
        checkpoint_sha256(path),
        config.device,
        config.batch_size,
        config.precision,
        config.compile_encoder,
    )
