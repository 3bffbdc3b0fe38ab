"""The `sd-inpaint` generator: Stable Diffusion inpainting through diffusers'
`StableDiffusionInpaintPipeline`, as SCGS (arXiv 2412.19457) uses it: keep the region a classifier
attended to and regenerate the rest conditioned on a text prompt naming the true class.

`--sd-model` takes a local folder in diffusers' `save_pretrained` layout or a hub id (default
`stable-diffusion-v1-5/stable-diffusion-inpainting`, published under the CreativeML Open RAIL-M
licence; offline it must be in the local Hugging Face cache). There is no fallback to another model.

Masks. diffusers repaints where its mask is white and, with the 9-channel inpainting UNet, does not
paste the kept pixels back: the VAE round trip changes every pixel. So `pipeline_mask` hands it
255 where a pixel is repainted (not kept) and 0 where it is kept, and `generate` pastes the kept
source pixels back itself (`paste_back`, on by default), so they equal the source bit for bit.
A `None` keep-mask ("--mask none") is plain image-to-image of the whole image: an all-white mask,
so the inpainting condition is blank and the source enters only through the initial latents,
noised to the same `strength` as every other image; nothing is pasted back.

Sizes. Each image is resized to the pipeline's native square (bicubic; its mask with nearest, so it
stays binary), generated there, and resized back to the input's size with bicubic (PIL's bicubic
is antialiased when shrinking), the project's one resampling filter.

Determinism. Each image has its own `torch.Generator` (on the CPU, so the noise is the same on every
device) seeded with its seed; the pipeline draws each image's noise from its own generator, so an
image's result does not depend on its batch-mates or its place in the batch (tested: byte-identical).
The batch size itself can move the last float bits, since oneDNN and cuDNN choose kernels by shape:
on the tiny test pipelines on a CPU, batch 1 against batch 3 moved up to 0.1% of the values by one
grey level, and batches 3, 4 and 6 agreed exactly. So a run is byte-identical for a given batch size; an
out-of-memory halving (announced on stderr) may change a few pixels by one level.

Importing this module does not import torch or diffusers.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from builder.backends.base import BackendInfo
from builder.backends.loader_gate import hf_from_pretrained
from builder.backends.registry import BackendUnavailable, from_setting, register_backend
from builder.backends.torch_base import (
    AdaptiveBatch,
    HubModelSource,
    ProcessLocalModel,
    check_device_name,
    checkpoint_sha256,
    resolve_device,
)

DEFAULT_SD_MODEL = "stable-diffusion-v1-5/stable-diffusion-inpainting"
SD_FLAG = "--sd-model"
DTYPES = ("auto", "float16", "bfloat16", "float32")
MODEL = HubModelSource(
    what="the Stable Diffusion inpainting pipeline",
    flag=SD_FLAG,
    hub_id=DEFAULT_SD_MODEL,
    holds="a diffusers StableDiffusionInpaintPipeline saved with save_pretrained (model_index.json, unet/, vae/, "
    "text_encoder/, tokenizer/, scheduler/)",
    patterns=(
        "model_index.json",
        "scheduler/*.json",
        "tokenizer/*",
        "text_encoder/config.json",
        "text_encoder/model.safetensors",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "vae/config.json",
        "vae/diffusion_pytorch_model.safetensors",
    ),
)
# the components with weights that the pipeline loads (not the safety checker: see SdInpainter.load)
WEIGHT_COMPONENTS = ("text_encoder", "unet", "vae")
# the weight files diffusers loads when no variant is asked for: safetensors first, else .bin
LOADED_WEIGHTS = (
    ("diffusion_pytorch_model.safetensors", "model.safetensors"),
    ("diffusion_pytorch_model.bin", "pytorch_model.bin"),
)


class GenerationSettingsError(BackendUnavailable):
    """Generation settings that cannot be used."""


@dataclass(frozen=True)
class GenerationSettings:
    prompt_template: str = "a photo of a {class_name}"
    negative_prompt: str = ""
    steps: int = 30
    guidance: float = 7.5
    strength: float = 0.9
    paste_back: bool = True
    batch_size: int = 4

    def __post_init__(self):
        if "{class_name}" not in self.prompt_template:
            raise GenerationSettingsError(
                f"--prompt-template must contain {{class_name}}, got {self.prompt_template!r}"
            )
        try:
            self.prompt_template.format(class_name="")
        except (KeyError, IndexError, ValueError) as exc:
            raise GenerationSettingsError(
                f"--prompt-template may hold only the field {{class_name}} (write a literal brace twice), "
                f"got {self.prompt_template!r}: {type(exc).__name__}: {exc}"
            ) from None
        if self.steps < 1:
            raise GenerationSettingsError(f"--steps must be at least 1, got {self.steps}")
        if not 0.0 < self.strength <= 1.0:
            raise GenerationSettingsError(f"--strength must be within (0, 1], got {self.strength}")
        if int(self.steps * self.strength) < 1:
            # diffusers runs int(steps * strength) denoising steps
            raise GenerationSettingsError(
                f"--steps {self.steps} at --strength {self.strength} leaves no denoising step; raise --steps"
            )
        if self.guidance < 0:
            raise GenerationSettingsError(f"--guidance must be at least 0, got {self.guidance}")
        if self.batch_size < 1:
            raise GenerationSettingsError(f"the generation batch size must be at least 1, got {self.batch_size}")

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in sorted(self.__dataclass_fields__)}


def pipeline_mask(keep: np.ndarray | None, shape: tuple[int, int] | None = None) -> Image.Image:
    """The mask handed to diffusers: mode "L", 255 where the pixel is repainted (not kept), 0 where
    kept. `None` (no keep-mask) is all white, of `shape` (H, W)."""
    if keep is None:
        if shape is None:
            raise ValueError("an all-white mask needs its shape")
        return Image.new("L", (shape[1], shape[0]), 255)
    keep = np.asarray(keep)
    if keep.ndim != 2 or keep.dtype != bool:
        raise ValueError(f"a keep-mask must be a 2-D bool array, got {keep.dtype} of shape {keep.shape}")
    return Image.fromarray(np.where(keep, 0, 255).astype(np.uint8), mode="L")


def pipeline_weights_sha256(folder: Path) -> str:
    """One sha256 over the weight files the pipeline loads, component by component: the sha256 of
    the `component/file:sha256` lines (each file hashed once per process, as `weight_files_sha256`
    does for single-folder models)."""
    lines = []
    for component in WEIGHT_COMPONENTS:
        if not (folder / component).is_dir():
            raise unusable_pipeline(folder, f"it has no {component}/ folder")
        # only the files diffusers loads: a hub snapshot also holds fp16 and .bin copies, gigabytes each
        names = sorted(path.name for path in (folder / component).iterdir() if path.is_file())
        for preferred in LOADED_WEIGHTS:
            chosen = [name for name in names if name in preferred or _is_shard(name, preferred)]
            if chosen:
                lines.extend(f"{component}/{name}:{checkpoint_sha256(folder / component / name)}" for name in chosen)
                break
        else:
            raise unusable_pipeline(folder, f"{component}/ holds no weight file")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _is_shard(name: str, preferred: tuple[str, ...]) -> bool:
    """A shard of a weight file, e.g. diffusion_pytorch_model-00001-of-00002.safetensors."""
    return any(
        name.startswith(stem.split(".")[0] + "-") and name.endswith("." + stem.split(".", 1)[1]) for stem in preferred
    )


def unusable_pipeline(folder: Path, reason: str) -> BackendUnavailable:
    return BackendUnavailable(f"{MODEL.what} {folder.name!r} cannot be used ({reason}). {MODEL.help()}")


def _torch_dtype(dtype: str, device):
    import torch

    if dtype == "auto":
        # fp16 halves memory and time on a GPU; on the CPU it is slow or unsupported
        return torch.float16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def _locate(source: str) -> Path:
    path = Path(source).expanduser()
    looks_like_path = path.is_absolute() or source.startswith((".", "~")) or source.count("/") != 1
    if not path.is_dir() and looks_like_path:
        raise BackendUnavailable(f"{SD_FLAG} {source}: the folder does not exist. {MODEL.help()}")
    folder = MODEL.locate(source)
    if not (folder / "model_index.json").is_file():
        raise unusable_pipeline(folder, "no model_index.json: not a diffusers pipeline folder")
    return folder


class SdInpainter:
    """A loaded Stable Diffusion inpainting pipeline and the settings-free parts of SCGS generation."""

    name = "sd-inpaint"

    def __init__(self, pipeline, model_id: str, weights_sha256: str, device: str, dtype: str) -> None:
        self.pipeline = pipeline
        self.placement = ProcessLocalModel(pipeline, device)
        self.model_id = model_id
        self.weights_sha256 = weights_sha256
        self.device_name = device
        self.dtype = dtype
        self.native_size = int(pipeline.unet.config.sample_size) * int(pipeline.vae_scale_factor)
        self.batches: dict[int, AdaptiveBatch] = {}
        pipeline.set_progress_bar_config(disable=True)  # one bar over images (generate), not one per call

    @classmethod
    def load(cls, source: str = DEFAULT_SD_MODEL, device: str = "auto", dtype: str = "auto") -> SdInpainter:
        check_device_name(device)
        if dtype not in DTYPES:
            raise BackendUnavailable(f"--sd-dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        folder = _locate(source)
        resolved = resolve_device(device)
        torch_dtype = _torch_dtype(dtype, resolved)
        from diffusers import StableDiffusionInpaintPipeline

        try:
            # No safety checker: it replaces an image it flags with a black one, which in a training
            # set is a silent corruption (and it is a second large model). The generated images are
            # checked by the label check and shown in the card's preview sheet instead.
            pipeline = hf_from_pretrained(
                StableDiffusionInpaintPipeline,
                folder,
                dtype=torch_dtype,
                safety_checker=None,
                feature_extractor=None,
                requires_safety_checker=False,
                low_cpu_mem_usage=False,  # True needs `accelerate`, which is not a dependency
            )
        except Exception as exc:  # noqa: BLE001 - any failure to load means an unusable folder
            raise unusable_pipeline(folder, f"{type(exc).__name__}: {str(exc)[:300]}") from None
        channels = pipeline.unet.config.in_channels
        if channels != 9:
            raise unusable_pipeline(folder, f"its UNet takes {channels} input channels, an inpainting UNet takes 9")
        name = MODEL.public_name(source)
        return cls(pipeline, name, pipeline_weights_sha256(folder), str(resolved), str(torch_dtype).split(".")[-1])

    def info(self) -> BackendInfo:
        return BackendInfo(
            self.name,
            {"native_size": self.native_size, "dtype": self.dtype, "device": self.device_name},
            checkpoint=self.model_id,
            checkpoint_sha256=self.weights_sha256,
        )

    def prompt_for(self, class_name: str, settings: GenerationSettings) -> str:
        return settings.prompt_template.format(class_name=class_name)

    def _batch(self, size: int) -> AdaptiveBatch:
        if size not in self.batches:
            self.batches[size] = AdaptiveBatch(size, "Stable Diffusion inpainting")
        return self.batches[size]

    def generate(
        self,
        images: Sequence[np.ndarray],
        keep: Sequence[np.ndarray | None],
        prompts: Sequence[str],
        seeds: Sequence[int],
        settings: GenerationSettings,
        progress: bool = True,
    ) -> list[np.ndarray]:
        """For each uint8 H x W x 3 image, its keep-mask (bool H x W, or None to repaint all), prompt
        and seed: the generated uint8 H x W x 3 image (kept pixels pasted back when
        `settings.paste_back`)."""
        from tqdm import tqdm

        counts = {len(images), len(keep), len(prompts), len(seeds)}
        if len(counts) != 1:
            raise ValueError(
                f"images, keep, prompts and seeds must have one entry per image, got {len(images)}, {len(keep)}, "
                f"{len(prompts)} and {len(seeds)}"
            )
        for image, mask in zip(images, keep):
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
                raise ValueError(f"images must be uint8 H x W x 3, got {image.dtype} of shape {image.shape}")
            if mask is not None and np.asarray(mask).shape != image.shape[:2]:
                raise ValueError(f"a keep-mask of shape {np.asarray(mask).shape} for an image of {image.shape[:2]}")
            if mask is not None and np.asarray(mask).dtype != bool:
                raise ValueError(f"a keep-mask must be bool, got {np.asarray(mask).dtype}")
        items = list(zip(images, keep, prompts, seeds))
        with tqdm(total=len(items), desc="SD inpainting", unit="img", disable=not progress, file=sys.stderr) as bar:

            def step(chunk):
                results = self._generate(chunk, settings)
                bar.update(len(chunk))
                return results

            return self._batch(settings.batch_size).run(items, step)

    def _generate(self, chunk, settings: GenerationSettings) -> list[np.ndarray]:
        import torch

        self.placement.ready()
        side = self.native_size
        pipeline_images = [Image.fromarray(image).resize((side, side), Image.BICUBIC) for image, _, _, _ in chunk]
        masks = [
            pipeline_mask(mask, image.shape[:2]).resize((side, side), Image.NEAREST) for image, mask, _, _ in chunk
        ]
        generators = [torch.Generator("cpu").manual_seed(int(seed)) for _, _, _, seed in chunk]
        output = self.pipeline(
            prompt=[prompt for _, _, prompt, _ in chunk],
            negative_prompt=[settings.negative_prompt] * len(chunk),
            image=pipeline_images,
            mask_image=masks,
            height=side,
            width=side,
            strength=settings.strength,
            num_inference_steps=settings.steps,
            guidance_scale=settings.guidance,
            generator=generators,
            output_type="np",
        ).images
        results = []
        for (image, mask, _, _), generated in zip(chunk, output):
            # diffusers' own float -> uint8 rule (numpy_to_pil): round(x * 255)
            native = (np.clip(generated, 0.0, 1.0) * 255).round().astype(np.uint8)
            height, width = image.shape[:2]
            result = np.asarray(Image.fromarray(native).resize((width, height), Image.BICUBIC)).copy()
            if settings.paste_back and mask is not None:
                result[mask] = image[mask]
            results.append(result)
        return results


@dataclass(frozen=True)
class SdInpaintConfig:
    model_id: str = from_setting("sd_model", DEFAULT_SD_MODEL)  # a hub id or a diffusers pipeline folder
    device: str = "auto"
    dtype: str = from_setting("sd_dtype", "auto")  # auto: float16 on CUDA, float32 on the CPU


@register_backend(
    "generator",
    "sd-inpaint",
    config_class=SdInpaintConfig,
    requires=("torch", "diffusers", "transformers"),
    extra="augment",
)
def make_sd_inpaint(config: SdInpaintConfig) -> SdInpainter:
    """Factory for `hsi scgs`: every check that can fail happens here, before any work."""
    if Path(config.model_id).expanduser().is_file():
        raise BackendUnavailable(
            f"--sd-model {config.model_id} is a file: pass the folder of a diffusers inpainting pipeline "
            "(the one holding model_index.json) or a hub id"
        )
    return SdInpainter.load(config.model_id, config.device, config.dtype)
