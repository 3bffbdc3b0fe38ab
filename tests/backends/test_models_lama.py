"""The `lama` inpainter through its production loader, with a tiny TorchScript module that has
big-lama's call signature: padding, cropping, untouched pixels, batching, checkpoint errors."""

import hashlib
from functools import partial

import numpy as np
import pytest
import torch
from tiny_models import cpu_backend, tiny_checkpoint_fixture, tiny_lama_reference, write_tiny_lama

from builder.backends import BackendUnavailable
from builder.backends.lama import LamaConfig, pad_to_multiple, padded_size

# torch marks TorchScript deprecated; big-lama is published only in that form.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")


# the files are the tests' own TorchScript (code): trusted, as --trust-code does (the refusal of an
# untrusted file is tests/adversarial/test_adv_code_files.py's)
make_inpainter = partial(cpu_backend, "inpainter", "lama", LamaConfig, trust_code=True)
tiny_lama_path = tiny_checkpoint_fixture(write_tiny_lama)


@pytest.fixture()
def inpainter(tiny_lama_path):
    return make_inpainter(checkpoint=str(tiny_lama_path))


def photo(seed, height, width):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 3 % 256, yy * 5 % 256, (xx + yy) % 256], axis=-1)
    return np.clip(base + rng.integers(0, 30, (height, width, 3)), 0, 255).astype(np.uint8)


def hole(height, width, y0, y1, x0, x1):
    mask = np.zeros((height, width), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


def test_pad_to_multiple_mirrors_bottom_and_right():
    array = np.arange(15).reshape(3, 5)
    padded = pad_to_multiple(array)
    assert padded.shape == (8, 8) and padded_size(3, 5) == (8, 8) and padded_size(16, 24) == (16, 24)
    assert np.array_equal(padded[:3, :5], array)
    assert np.array_equal(padded[3, :5], array[2]) and np.array_equal(
        padded[4, :5], array[1]
    )  # symmetric: edge repeated
    assert np.array_equal(padded[:3, 5], array[:, 4]) and np.array_equal(padded[:3, 6], array[:, 3])
    assert pad_to_multiple(np.zeros((16, 8, 3))).shape == (16, 8, 3)


def test_result_is_full_size_pads_and_crops_and_equals_the_reference(inpainter):
    image = photo(1, 37, 50)  # neither side a multiple of 8: TinyLama raises unless padded
    mask = hole(37, 50, 25, 37, 40, 50)  # touches the bottom-right corner, where padding is read
    (result,) = inpainter.inpaint_batch([image], [mask])
    assert result.shape == image.shape and result.dtype == np.uint8
    assert np.array_equal(result[~mask], image[~mask])
    tensor = torch.from_numpy(pad_to_multiple(image)).permute(2, 0, 1)[None].float() / 255
    mask_tensor = torch.from_numpy(pad_to_multiple(mask.astype(np.uint8)))[None, None].float()
    expected = (tiny_lama_reference(tensor, mask_tensor) * 255).round().clamp(0, 255).to(torch.uint8)
    expected = expected[0].permute(1, 2, 0).numpy()[:37, :50]
    assert np.array_equal(result[mask], expected[mask])
    assert not np.array_equal(result[mask], image[mask])  # the hole really was filled


def test_unmasked_pixels_are_exactly_the_input_and_empty_masks_copy(inpainter):
    image = photo(2, 64, 48)
    mask = hole(64, 48, 10, 30, 5, 20)
    result, untouched = inpainter.inpaint_batch([image, image], [mask, np.zeros((64, 48), bool)])
    assert np.array_equal(result[~mask], image[~mask])
    assert np.array_equal(untouched, image) and untouched is not image


def test_results_do_not_depend_on_batch_size_or_neighbours(tiny_lama_path):
    images = [photo(3, 37, 50), photo(4, 40, 56), photo(5, 64, 48), photo(6, 33, 55)]
    masks = [
        hole(37, 50, 5, 20, 5, 30),
        hole(40, 56, 0, 10, 0, 56),
        hole(64, 48, 30, 64, 20, 48),
        hole(33, 55, 10, 12, 10, 50),
    ]
    batched = make_inpainter(checkpoint=str(tiny_lama_path), batch_size=4).inpaint_batch(images, masks)
    one_by_one = make_inpainter(checkpoint=str(tiny_lama_path), batch_size=1)
    singles = [one_by_one.inpaint_batch([i], [m])[0] for i, m in zip(images, masks)]
    for a, b in zip(batched, singles):
        assert np.array_equal(a, b)


def test_a_file_that_takes_one_image_per_call_runs_unbatched_and_says_so(tmp_path, tiny_lama_path, capsys):
    single = write_tiny_lama(tmp_path, "single.pt", single_image=True)
    inpainter = make_inpainter(checkpoint=str(single), batch_size=4)
    assert "takes one image per call" in capsys.readouterr().err
    assert inpainter.batch.size == 1
    images = [photo(11, 40, 56), photo(12, 40, 56)]
    masks = [hole(40, 56, 5, 20, 5, 30), hole(40, 56, 0, 10, 0, 56)]
    reference = make_inpainter(checkpoint=str(tiny_lama_path), batch_size=4)
    for a, b in zip(inpainter.inpaint_batch(images, masks), reference.inpaint_batch(images, masks)):
        assert np.array_equal(a, b)


def test_same_padded_size_shares_one_forward_pass(inpainter):
    calls = []
    model = inpainter.model

    class Recorder(torch.nn.Module):
        def forward(self, image, mask):
            calls.append(tuple(image.shape))
            return model(image, mask)

    inpainter.model = Recorder()
    images = [photo(7, 37, 50), photo(8, 40, 56), photo(9, 64, 48)]  # the first two both pad to 40 x 56
    masks = [hole(*i.shape[:2], 2, 9, 2, 9) for i in images]
    inpainter.inpaint_batch(images, masks)
    assert sorted(calls) == [(1, 3, 64, 48), (2, 3, 40, 56)]


def test_provenance_records_the_checkpoint(inpainter, tiny_lama_path):
    info = inpainter.info().to_json()
    assert info["name"] == "lama" and info["checkpoint"] == tiny_lama_path.name
    assert info["checkpoint_sha256"] == hashlib.sha256(tiny_lama_path.read_bytes()).hexdigest()
    assert info["params"]["pad_multiple"] == 8 and info["params"]["pad_mode"] == "symmetric"


def test_missing_checkpoint_names_flag_variable_and_release(monkeypatch):
    monkeypatch.delenv("LAMA_MODEL", raising=False)
    with pytest.raises(BackendUnavailable) as err:
        make_inpainter()
    for needle in ("--lama-checkpoint", "LAMA_MODEL", "simple-lama-inpainting", "big-lama.pt"):
        assert needle in str(err.value)


def test_variable_is_used_when_the_flag_is_absent(monkeypatch, tiny_lama_path):
    monkeypatch.setenv("LAMA_MODEL", str(tiny_lama_path))
    assert make_inpainter().info().checkpoint == tiny_lama_path.name
    monkeypatch.setenv("LAMA_MODEL", str(tiny_lama_path.parent / "gone.pt"))
    with pytest.raises(BackendUnavailable, match=r"\(LAMA_MODEL\) .*gone\.pt does not exist"):
        make_inpainter()


def test_corrupt_file_and_wrong_signature_are_refused(tmp_path):
    corrupt = tmp_path / "big-lama.pt"
    corrupt.write_bytes(b"PK\x03\x04 truncated zip" * 20)
    with pytest.raises(BackendUnavailable, match="big-lama.pt cannot be used \\(not a TorchScript file"):
        make_inpainter(checkpoint=str(corrupt))

    class OneInput(torch.nn.Module):
        def forward(self, image: torch.Tensor) -> torch.Tensor:
            return image

    wrong = tmp_path / "one_input.pt"
    torch.jit.save(torch.jit.script(OneInput()), str(wrong))
    with pytest.raises(BackendUnavailable, match="calling it as model\\(image, mask\\) failed.*--lama-checkpoint"):
        make_inpainter(checkpoint=str(wrong))

    class WrongShape(torch.nn.Module):
        def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return mask

    shaped = tmp_path / "wrong_shape.pt"
    torch.jit.save(torch.jit.script(WrongShape()), str(shaped))
    with pytest.raises(BackendUnavailable, match="returned \\(1, 1, 64, 64\\), expected a 1 x 3 x H x W tensor"):
        make_inpainter(checkpoint=str(shaped))


@pytest.mark.gpu
def test_cuda_result_keeps_unmasked_pixels_and_is_close_to_cpu(tiny_lama_path):
    image, mask = photo(10, 37, 50), hole(37, 50, 5, 30, 5, 30)
    cpu = make_inpainter(checkpoint=str(tiny_lama_path), device="cpu").inpaint_batch([image], [mask])[0]
    cuda = make_inpainter(checkpoint=str(tiny_lama_path), device="cuda").inpaint_batch([image], [mask])[0]
    assert np.array_equal(cuda[~mask], image[~mask])
    assert np.abs(cuda.astype(int) - cpu.astype(int)).max() <= 1
