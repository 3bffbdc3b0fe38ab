"""The `sam` masker through its production loader, with a tiny SAM built from segment-anything's
own classes: checkpoint errors, provenance, mask selection by predicted IoU, batching, OOM retries."""

import hashlib
from functools import partial

import numpy as np
import pytest
import torch
from tiny_models import TINY_SAM_INPUT, build_tiny_sam, cpu_backend, tiny_checkpoint_fixture, write_tiny_sam

from builder.backends import BackendUnavailable
from builder.backends import sam as sam_module
from builder.backends.sam import SamConfig, infer_architecture, select_by_iou
from builder.backends.torch_base import AdaptiveBatch
from builder.core.records import Box

make_masker = partial(cpu_backend, "masker", "sam", SamConfig, model="auto")  # "auto": the tiny SAM's shapes
tiny_sam_path = tiny_checkpoint_fixture(write_tiny_sam)


@pytest.fixture()
def masker(tiny_sam_path):
    return make_masker(checkpoint=str(tiny_sam_path))


def images_and_boxes():
    rng = np.random.default_rng(7)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(90, 120), (375, 500), (101, 77)]]
    boxes = [
        [Box(10, 10, 60, 80, "n01440764"), Box(0, 0, 20, 20, "n01440764")],
        [Box(50, 50, 300, 200, "n01443537")],
        [Box(5, 5, 50, 90, "n01484850")],
    ]
    return images, boxes


def test_loads_tiny_sam_and_records_checkpoint_hash(masker, tiny_sam_path):
    info = masker.info().to_json()
    assert info["name"] == "sam"
    assert info["checkpoint"] == tiny_sam_path.name
    assert info["checkpoint_sha256"] == hashlib.sha256(tiny_sam_path.read_bytes()).hexdigest()
    arch = info["params"]["architecture"]
    assert (arch["image_size"], arch["embed_dim"], arch["depth"], arch["num_heads"]) == (TINY_SAM_INPUT, 32, 2, 2)
    assert arch["global_attn_indexes"] == [1] and arch["window_size"] == 2
    assert info["params"]["model"] == "auto" and info["params"]["selection"] == "highest-predicted-iou"
    assert info["params"]["parameters"] == sum(p.numel() for p in build_tiny_sam().parameters())


def test_inferred_architecture_of_official_vit_b_names_it():
    from segment_anything import sam_model_registry

    from builder.backends.sam import official_name

    with torch.device("meta"):  # shapes only: no memory, no init cost
        state = sam_model_registry["vit_b"]().state_dict()
    arch = infer_architecture(state)
    assert official_name(arch) == "vit_b"
    assert (arch.embed_dim, arch.depth, arch.num_heads, arch.window_size, arch.global_attn_indexes) == (
        768,
        12,
        12,
        14,
        (2, 5, 8, 11),
    )
    assert (arch.decoder_depth, arch.decoder_mlp_dim, arch.mask_in_chans, arch.num_multimask_outputs) == (
        2,
        2048,
        16,
        3,
    )


def test_named_model_that_does_not_match_the_file_is_an_error(tiny_sam_path):
    with pytest.raises(BackendUnavailable) as err:
        make_masker(model="vit_h", checkpoint=str(tiny_sam_path))
    message = str(err.value)
    assert "--sam-model vit_h" in message and "non-standard SAM (embed_dim 32, depth 2, input 64)" in message


def test_missing_checkpoint_names_flag_variable_and_official_source(monkeypatch):
    monkeypatch.delenv("HSI_SAM_CHECKPOINT", raising=False)
    with pytest.raises(BackendUnavailable) as err:
        make_masker()
    message = str(err.value)
    for needle in (
        "--sam-checkpoint",
        "HSI_SAM_CHECKPOINT",
        "dl.fbaipublicfiles.com/segment_anything",
        "segment-anything",
    ):
        assert needle in message


def test_checkpoint_path_that_does_not_exist(tmp_path):
    with pytest.raises(BackendUnavailable, match=r"\(--sam-checkpoint\) .*nope\.pth does not exist"):
        make_masker(checkpoint=str(tmp_path / "nope.pth"))


def test_variable_is_used_when_the_flag_is_absent(monkeypatch, tiny_sam_path):
    monkeypatch.setenv("HSI_SAM_CHECKPOINT", str(tiny_sam_path))
    assert make_masker().info().checkpoint == tiny_sam_path.name


def test_corrupt_and_foreign_checkpoints_are_refused(tmp_path):
    corrupt = tmp_path / "corrupt.pth"
    corrupt.write_bytes(b"\x80\x02not a checkpoint" * 10)
    with pytest.raises(BackendUnavailable, match="corrupt.pth cannot be used \\(not a readable torch checkpoint"):
        make_masker(checkpoint=str(corrupt))
    foreign = tmp_path / "resnet.pth"
    torch.save(torch.nn.Linear(3, 2).state_dict(), foreign)
    with pytest.raises(BackendUnavailable, match="not a SAM state_dict.*HSI_SAM_CHECKPOINT"):
        make_masker(checkpoint=str(foreign))


def test_truncated_checkpoint_is_refused(tmp_path, tiny_sam_path):
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(tiny_sam_path.read_bytes()[:5000])
    with pytest.raises(BackendUnavailable, match="truncated.pth cannot be used"):
        make_masker(checkpoint=str(truncated))


def test_bad_device_name_is_refused_before_loading(tiny_sam_path):
    with pytest.raises(BackendUnavailable, match="--device must be auto, cpu, cuda or cuda:N"):
        make_masker(checkpoint=str(tiny_sam_path), device="gpu0")


def test_select_by_iou_keeps_the_best_predicted_mask_and_first_on_ties():
    logits = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2)
    iou = torch.tensor([[0.1, 0.9, 0.5], [0.7, 0.2, 0.7]])
    chosen = select_by_iou(logits, iou)
    assert chosen.shape == (2, 1, 2, 2)
    assert torch.equal(chosen[0, 0], logits[0, 1]) and torch.equal(chosen[1, 0], logits[1, 0])


class ScriptedDecoder:
    """Stands in for SAM's batched mask decoder: three column bands as the candidate masks of every
    box, with the predicted IoUs given per box."""

    def __init__(self, ious):
        self.ious = torch.tensor(ious)
        self.prompts_seen = []

    def __call__(self, sam, embeddings, sparse, dense):
        boxes = sparse.shape[0]
        assert embeddings.shape[0] == boxes  # each box with its own image's embedding
        self.prompts_seen.append(boxes)
        side = TINY_SAM_INPUT // 4  # SAM's low-res masks are 4 x the embedding grid
        low = torch.full((boxes, 3, side, side), -10.0)
        low[:, 0, :, 0:5] = 10.0
        low[:, 1, :, 6:10] = 10.0
        low[:, 2, :, 11:16] = 10.0
        return low, self.ious[:boxes]


def test_each_box_gets_the_mask_with_the_highest_predicted_iou(masker, monkeypatch):
    scripted = ScriptedDecoder([[0.1, 0.9, 0.5], [0.2, 0.3, 0.8], [0.9, 0.1, 0.1]])
    monkeypatch.setattr(sam_module, "decode_boxes", scripted)
    image = np.full((TINY_SAM_INPUT, TINY_SAM_INPUT, 3), 128, dtype=np.uint8)
    boxes = [Box(4, 4, 30, 30, "n01440764"), Box(20, 20, 60, 60, "n01440764")]
    (masks, (other,)) = masker.masks_batch([image, image], [boxes, boxes[:1]])
    assert scripted.prompts_seen == [3]  # one decoder call prompts every box of the batch
    first, second = masks
    assert first.shape == second.shape == (TINY_SAM_INPUT, TINY_SAM_INPUT) and first.dtype == bool
    # band 1 covers low-res columns 6..9 -> full-res columns 24..39 (4x upsampling, +-2 px at edges)
    assert first[:, 26:38].all() and not first[:, :20].any() and not first[:, 44:].any()
    assert second[:, 46:].all() and not second[:, :42].any()
    assert other[:, :16].all() and not other[:, 24:].any()  # the second image's box: band 0


def test_batched_decoder_equals_segment_anythings_per_image_decoder(masker):
    """`decode_boxes` (boxes of several images in one call) gives segment-anything's own
    `MaskDecoder` outputs for each image's boxes."""
    sam = masker.sam
    grid = TINY_SAM_INPUT // 16
    generator = torch.Generator().manual_seed(3)
    embeddings = torch.randn((2, sam.prompt_encoder.embed_dim, grid, grid), generator=generator)
    boxes = torch.tensor([[4.0, 4.0, 30.0, 40.0], [10.0, 0.0, 60.0, 63.0], [0.0, 20.0, 33.0, 50.0]])
    owners = torch.tensor([0, 0, 1])
    with torch.inference_mode():
        sparse, dense = sam.prompt_encoder(points=None, boxes=boxes, masks=None)
        low, iou = sam_module.decode_boxes(sam, embeddings[owners], sparse, dense)
        for index in (0, 1):
            mine = owners == index
            expected_low, expected_iou = sam.mask_decoder(
                image_embeddings=embeddings[index : index + 1],
                image_pe=sam.prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=sparse[mine],
                dense_prompt_embeddings=dense[mine],
                multimask_output=True,
            )
            torch.testing.assert_close(low[mine], expected_low, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(iou[mine], expected_iou, rtol=1e-5, atol=1e-5)
    assert low.shape == (3, 3, grid * 4, grid * 4)


def test_prepared_ahead_gives_the_masks_of_a_batch_prepared_in_place(masker):
    images, boxes = images_and_boxes()
    in_place = masker.masks_batch(images, boxes)
    masker.prepare_ahead(images)
    ahead = masker.masks_batch(images, boxes)
    assert masker.ahead == []  # taken
    masker.prepare_ahead(images[:1])  # a hint for other images is not used for these
    again = masker.masks_batch(images[1:], boxes[1:])
    for a, b in zip(in_place, ahead):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
    for a, b in zip(in_place[1:], again):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_in_extracts_order_every_batch_is_prepared_once_by_the_thread(masker, monkeypatch):
    """Extract hints batch k + 1, then masks batch k: each batch must be prepared once, in the
    thread (a hint dropped by the call for the batch before it was the bug this guards)."""
    import threading

    images, boxes = images_and_boxes()
    batches = [(images[i : i + 1], boxes[i : i + 1]) for i in range(len(images))]
    real, where = masker.prepare, []
    monkeypatch.setattr(masker, "prepare", lambda chunk: where.append(threading.current_thread().name) or real(chunk))
    masker.prepare_ahead(batches[0][0])
    for index, (chunk, chunk_boxes) in enumerate(batches):
        if index + 1 < len(batches):
            masker.prepare_ahead(batches[index + 1][0])
        masker.masks_batch(chunk, chunk_boxes)
    assert len(where) == len(batches) and all(name.startswith("sam-prepare") for name in where)
    assert masker.ahead == []


def test_sam_is_built_on_the_meta_device_with_no_random_initialisation(tiny_sam_path, monkeypatch):
    """Loading assigns the checkpoint's tensors to a model built on the meta device: no weight is
    initialised at random first (vit_h spent seconds doing so)."""
    from builder.backends.sam import load_sam

    calls = []
    real = torch.nn.init.trunc_normal_
    monkeypatch.setattr(torch.nn.init, "trunc_normal_", lambda t, *a, **k: calls.append(t.device) or real(t, *a, **k))
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters", lambda self: calls.append(self.weight.device))
    sam, _ = load_sam(tiny_sam_path, "auto")
    assert calls and all(device.type == "meta" for device in calls)
    state = torch.load(tiny_sam_path, weights_only=True)
    assert all(torch.equal(tensor, state[name]) for name, tensor in sam.state_dict().items())
    assert sam.pixel_mean.device.type == "cpu" and float(sam.pixel_mean[0]) == pytest.approx(123.675)


def test_masks_are_full_size_and_independent_of_the_encoder_batch(masker):
    images, boxes = images_and_boxes()
    together = masker.masks_batch(images, boxes)
    masker.batch.size = 1
    alone = masker.masks_batch(images, boxes)
    singles = [masker.masks_batch([image], [image_boxes])[0] for image, image_boxes in zip(images, boxes)]
    for image, got, again, single in zip(images, together, alone, singles):
        assert len(got) == len(again) == len(single)
        for a, b, c in zip(got, again, single):
            assert a.shape == image.shape[:2] and a.dtype == bool
            assert np.array_equal(a, b) and np.array_equal(a, c)
    assert any(mask.any() for per_image in together for mask in per_image)  # not a vacuous comparison


def test_out_of_memory_halves_the_encoder_batch_and_gives_the_same_masks(masker, capsys):
    images, boxes = images_and_boxes()
    expected = masker.masks_batch(images, boxes)
    encoder = masker.sam.image_encoder
    calls = []

    def limited(batch):
        calls.append(batch.shape[0])
        if batch.shape[0] > 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return type(encoder).forward(encoder, batch)

    encoder.forward = limited
    got = masker.masks_batch(images, boxes)
    assert calls == [3, 1, 1, 1]  # 4 -> 3 images asked; halved to 1 after the failure
    assert masker.batch.size == 1
    assert "out of memory in the SAM image encoder with a batch of 3; retrying with 1" in capsys.readouterr().err
    for a, b in zip(expected, got):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_adaptive_batch_reraises_other_errors_and_oom_at_batch_one():
    batch = AdaptiveBatch(1, "test")
    with pytest.raises(torch.OutOfMemoryError):
        batch.run([1, 2], lambda chunk: (_ for _ in ()).throw(torch.OutOfMemoryError("out of memory")))
    with pytest.raises(ValueError):
        AdaptiveBatch(4, "test").run([1, 2], lambda chunk: (_ for _ in ()).throw(ValueError("shape")))


@pytest.mark.gpu
def test_gpu_saved_checkpoint_loads_on_cpu_and_runs_on_cuda(tmp_path):
    path = tmp_path / "cuda_saved.pth"
    torch.save({k: v.cuda() for k, v in build_tiny_sam().state_dict().items()}, path)
    cpu = make_masker(checkpoint=str(path), device="cpu")
    cuda = make_masker(checkpoint=str(path), device="cuda")
    images, boxes = images_and_boxes()
    a, b = cpu.masks_batch(images, boxes), cuda.masks_batch(images, boxes)
    for x, y in zip(a, b):
        for m, n in zip(x, y):
            assert m.shape == n.shape and (m != n).mean() < 0.01  # CPU vs CUDA floats: border pixels only
