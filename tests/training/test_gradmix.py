"""GradMix: planted maps give the expected (clipped) box, the area follows U(a, b), the weights are
exact, the map pass leaves the optimiser's gradients alone, draws are deterministic per seed, and a
tiny timm ResNet trains one epoch with GradMix through `hsi train`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from hsi.cli import main as hsi
from training.gradmix import (
    GradMixError,
    GradMixOptions,
    Mixer,
    argmax_centres,
    batch_boxes,
    box_side,
    loss_maps,
    loss_weights,
    mixed_view,
    sample_area,
    step_generator,
    summed_map,
)


def planted_activation(row: int, col: int, size: int = 8, channels: int = 4):
    """1 x C x size x size activation, zero but for one hot spot; the matching gradient is all ones."""
    act = torch.zeros(1, channels, size, size)
    act[0, :, row, col] = 3.0
    return act, torch.ones_like(act)


# The 8 x 8 spot upsampled to 32 px (bilinear, half-pixel centres) peaks on two equal pixels,
# 4 * cell + 1 and + 2 inside, on the plateau 0-1 / 30-31 at a border; the first one is the centre.
@pytest.mark.parametrize(
    "row,col,centre,expected",
    [
        (4, 4, (17, 17), (9, 25, 9, 25)),  # inside: the full 16 px box
        (0, 4, (0, 17), (0, 8, 9, 25)),  # top border: cut
        (7, 4, (30, 17), (22, 32, 9, 25)),  # bottom
        (4, 0, (17, 0), (9, 25, 0, 8)),  # left
        (4, 7, (17, 30), (9, 25, 22, 32)),  # right
        (0, 0, (0, 0), (0, 8, 0, 8)),  # top-left corner: cut on two sides
        (7, 7, (30, 30), (22, 32, 22, 32)),  # bottom-right corner
    ],
)
def test_planted_hot_spot_gives_the_expected_clipped_box(row, col, centre, expected):
    act, grad = planted_activation(row, col)
    maps = summed_map([act], [grad], (32, 32))
    assert argmax_centres(maps) == [centre]
    assert box_side(0.25, 32) == 16
    assert batch_boxes([centre], 0.25, 32, 32) == [expected]


def test_negative_gradients_do_not_count_and_layers_are_summed():
    act, grad = planted_activation(2, 2)
    other, _ = planted_activation(6, 6)
    both = act + other
    grad_neg = torch.ones_like(both)
    grad_neg[0, :, 2, 2] = -1.0  # ReLU(grad) hides the first spot
    ((cy, cx),) = argmax_centres(summed_map([both], [grad_neg], (32, 32)))
    assert (cy // 4, cx // 4) == (6, 6)
    # two layers (8 x 8 and 4 x 4) agreeing on one region sum there
    coarse = torch.zeros(1, 2, 4, 4)
    coarse[0, :, 3, 3] = 1.0
    ((cy, cx),) = argmax_centres(
        summed_map([other, coarse], [torch.ones_like(other), torch.ones_like(coarse)], (32, 32))
    )
    assert cy >= 24 and cx >= 24


def test_area_follows_the_uniform_range_over_many_batches():
    draws = [sample_area(step_generator(3, 0, step), (0.1, 0.5)) for step in range(2000)]
    assert min(draws) >= 0.1 and max(draws) <= 0.5
    assert stats.kstest(draws, stats.uniform(loc=0.1, scale=0.4).cdf).pvalue > 0.01
    assert stats.kstest(draws, stats.uniform(loc=0.1, scale=0.3).cdf).pvalue < 1e-6  # a wrong range is refused


def test_kept_area_weight_is_exact_and_the_paper_weight_is_the_clipped_area():
    boxes = batch_boxes([(16, 16), (0, 0)], 0.25, 32, 32)
    code = loss_weights(GradMixOptions("gradmix", convention="code"), boxes, 0.25, 32, 32)
    assert code == [0.75, 0.75]  # 1 - a, before clipping: the corner box gets the same weight
    paper = loss_weights(GradMixOptions("gradmix"), boxes, 0.25, 32, 32)
    assert paper == [16 * 16 / 1024, 8 * 8 / 1024]


def test_fills_paper_partner_and_code_noise():
    x = torch.arange(4, dtype=torch.float32).view(4, 1, 1, 1).expand(4, 3, 16, 16).contiguous()
    mean, std = torch.zeros(1, 3, 1, 1), torch.ones(1, 3, 1, 1)
    centres = [(8, 8)] * 4
    view = mixed_view(GradMixOptions("gradmix"), x, centres, step_generator(0, 0, 0), mean, std)
    (y0, y1, x0, x1) = view.boxes[0]
    inside = view.images[:, 0, y0:y1, x0:x1].flatten(1)
    assert sorted(inside[:, 0].tolist()) == [0, 1, 2, 3]  # a permutation of the batch's samples
    assert torch.allclose(inside, inside[:, :1].expand_as(inside))  # the whole partner, resized
    outside = view.images[:, :, 0, 0] if y0 > 0 else view.images[:, :, -1, -1]
    assert torch.equal(outside[:, 0], torch.arange(4.0))
    noisy = mixed_view(GradMixOptions("gradmix", convention="code"), x, centres, step_generator(0, 0, 0), mean, std)
    patch = noisy.images[:, :, y0:y1, x0:x1]
    assert patch.min() >= 0 and patch.max() <= 255 and patch.std() > 50  # uniform over the pixel range
    assert torch.allclose(noisy.weights, torch.full((4,), 1 - noisy.area))


def tiny_resnet():
    import timm

    torch.manual_seed(0)
    return timm.create_model("test_resnet", num_classes=3).train()


def test_map_pass_leaves_parameter_gradients_untouched():
    model = tiny_resnet()
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 0])
    mixer = Mixer(
        GradMixOptions("gradmix", layers=("layer3", "layer4")), model, torch.zeros(1, 3, 1, 1), torch.ones(1, 3, 1, 1)
    )
    with mixer.recording():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    marker = {n: torch.full_like(p, 7.0) for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        p.grad = marker[n].clone()
    activations = [mixer._store[name] for name in mixer.layers]
    maps = loss_maps(loss, activations, (32, 32))
    assert maps.shape == (4, 32, 32) and maps.max() > 0
    assert all(torch.equal(p.grad, marker[n]) for n, p in model.named_parameters())
    # and the map is that of the loss: autograd.grad agrees with a backward on the activations
    acts = [a.detach().requires_grad_() for a in activations]
    assert torch.allclose(summed_map(acts, torch.autograd.grad(loss, activations, retain_graph=True), (32, 32)), maps)
    # the mixed view's loss reaches the parameters through the step's one backward pass
    from contextlib import nullcontext

    params = [p for _, p in model.named_parameters()]
    clean = torch.autograd.grad(loss, params, retain_graph=True)
    extra = mixer.extra_loss(model, x, y, loss, step_generator(0, 0, 0), nullcontext)
    assert extra.item() > 0
    (loss + extra).backward()
    total = [p.grad - marker[n] for n, p in model.named_parameters()]
    assert not all(torch.allclose(t, c) for t, c in zip(total, clean, strict=True))


def extra_loss_of(model, augment, seed, step):
    """The mixed loss of one step (the same weights and batch every call)."""
    from contextlib import nullcontext

    torch.manual_seed(1)
    x, y = torch.randn(6, 3, 32, 32), torch.randint(0, 3, (6,))
    mixer = Mixer(GradMixOptions(augment), model, torch.zeros(1, 3, 1, 1), torch.ones(1, 3, 1, 1))
    with mixer.recording():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    return float(mixer.extra_loss(model, x, y, loss, step_generator(seed, 0, step), nullcontext).detach())


def test_draws_are_deterministic_per_seed_and_step():
    model = tiny_resnet().eval()  # eval: BatchNorm statistics stay put between the calls
    for augment in ("gradmix", "random-box"):
        first = extra_loss_of(model, augment, 0, 0)
        assert first == extra_loss_of(model, augment, 0, 0) and first != extra_loss_of(model, augment, 5, 0)
    boxes = [random_view_boxes(seed, step) for seed, step in ((0, 0), (0, 0), (1, 0), (0, 1))]
    assert boxes[0] == boxes[1] and boxes[0] != boxes[2] and boxes[0] != boxes[3]


def random_view_boxes(seed, step):
    x = torch.zeros(8, 3, 32, 32)
    mixer = Mixer(GradMixOptions("random-box"), None, torch.zeros(1, 3, 1, 1), torch.ones(1, 3, 1, 1))
    generator = step_generator(seed, 0, step)
    view = mixed_view(mixer.options, x, mixer.centres(x, None, generator), generator, mixer.mean, mixer.std)
    return view.boxes, view.area


def test_random_box_centres_are_uniform():
    generator = step_generator(0, 0, 0)
    mixer = Mixer(GradMixOptions("random-box"), None, None, None)
    centres = np.array(mixer.centres(torch.zeros(4000, 1, 32, 32), None, generator))
    assert stats.kstest(centres[:, 0], stats.randint(0, 32).cdf).statistic < 0.05
    assert abs(centres[:, 1].mean() - 15.5) < 0.5


def test_bad_options_are_refused():
    with pytest.raises(GradMixError, match="--gradmix-area"):
        GradMixOptions("gradmix", area=(0.5, 0.1))
    with pytest.raises(GradMixError, match="--augment"):
        GradMixOptions("cutmix")
    with pytest.raises(GradMixError, match=r"feature_info modules \['act1', 'layer1'"):
        Mixer(GradMixOptions("gradmix", layers=("fc",)), tiny_resnet(), None, None)


def test_one_epoch_with_gradmix_through_hsi_train(small_planted, tmp_path, capsys):
    code = hsi(
        [
            "train",
            str(small_planted),
            "--out",
            str(tmp_path),
            "--model",
            "test_resnet",
            "--epochs",
            "1",
            "--batch-size",
            "32",
            "--lr",
            "0.05",
            "--input-size",
            "32",
            "--device",
            "cpu",
            "--workers",
            "0",
            "--select",
            "mean",
            "--augment",
            "gradmix",
            "--gradmix-layers",
            "layer3,layer4",
            "--gradmix-area",
            "0.2,0.3",
        ]
    )
    assert code == 0
    run = tmp_path / "erm+gradmix" / "seed-0"
    scores = json.loads((run / "scores.json").read_text())
    assert scores["method"] == "erm+gradmix" and math.isfinite(scores["test"]["mean"])
    settings = json.loads((run / "train_settings.json").read_text())
    assert settings["mixing"] == {
        "augment": "gradmix",
        "layers": ["layer3", "layer4"],
        "area": [0.2, 0.3],
        "convention": "paper",
    }
    assert "ERM+GRADMIX" in capsys.readouterr().out


class SpotNet(torch.nn.Module):
    """Two convolutions and a linear head over the mean of the last stage: the gradient of the
    batch-mean loss w.r.t. each of the stage's 8 x 64 x 64 activations is about 1e-9, below fp16's
    smallest subnormal, as a real network's stage gradients are."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.stage = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.head.weight.mul_(1e-3)

    def forward(self, x):
        return self.head(torch.relu(self.stage(torch.relu(self.stem(x)))).mean((2, 3)))


SPOTS = [(6 * i + 4, 50 - 5 * i) for i in range(8)]  # each image's spot: top-left (row, column)


def spot_batch():
    """8 images, each dark but for a bright 6 x 6 spot at its own place."""
    x = torch.zeros(8, 3, 64, 64)
    for i, (row, col) in enumerate(SPOTS):
        x[i, :, row : row + 6, col : col + 6] = 2.0
    return x, torch.arange(8) % 4


def stage_maps(net, x, y, autocast):
    from training.gradmix import recorded_outputs

    with autocast(), recorded_outputs(net, ["stage"]) as store:
        loss = torch.nn.functional.cross_entropy(net(x), y)
    return loss, store["stage"]


def test_maps_under_fp16_autocast_equal_the_fp32_maps():
    """Failed before: the gradients of the unscaled loss under fp16 autocast underflowed to zero, so
    every map was flat and every box went to the top-left corner. Taken of the scaled loss, the maps
    are the float32 ones (to fp16's precision) and the boxes' centres the same."""
    net, (x, y) = SpotNet(), spot_batch()
    loss, act = stage_maps(net, x, y, lambda: torch.autocast("cpu", enabled=False))
    fp32 = loss_maps(loss, [act], (64, 64))
    loss16, act16 = stage_maps(net, x, y, lambda: torch.autocast("cpu", dtype=torch.float16))
    assert act16.dtype == torch.float16
    (unscaled,) = torch.autograd.grad(loss16, [act16], retain_graph=True)
    assert not unscaled.any()  # the underflow this guards against: fp16 gradients of the plain loss are 0
    fp16 = loss_maps(loss16, [act16], (64, 64))
    for (row, col), (cy, cx) in zip(SPOTS, argmax_centres(fp32)):  # each map peaks by its spot: not vacuous
        assert row - 4 <= cy <= row + 9 and col - 4 <= cx <= col + 9
    torch.testing.assert_close(fp16, fp32, atol=2e-2, rtol=0)
    assert argmax_centres(fp16) == argmax_centres(fp32)


def test_gradmix_draws_differ_per_ddp_rank_and_match_alone():
    alone = sample_area(step_generator(3, 0, 5), (0.1, 0.5))
    assert sample_area(step_generator(3, 0, 5, ()), (0.1, 0.5)) == alone
    ranks = [sample_area(step_generator(3, 0, 5, ("rank", r)), (0.1, 0.5)) for r in range(2)]
    assert ranks[0] != ranks[1]
