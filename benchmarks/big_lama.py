"""big-lama's generator at random weights, so the GPU suite times LaMa where the 205 MB TorchScript
file cannot be carried (speed does not depend on weight values).

The architecture is the published one, written here from its description (nothing copied):
Suvorov et al., "Resolution-robust Large Mask Inpainting with Fourier Convolutions", WACV 2022, and
the big-lama training config (github.com/advimman/lama, configs/training/big-lama.yaml): an FFC
ResNet generator, `input_nc` 4 (the masked image and the mask), `output_nc` 3, `ngf` 64, 3
downsamplings, 18 residual blocks, a sigmoid output; fast Fourier convolutions with no global part in
the first convolution and the downsamplings (ratio 0), and a global share of 0.75 of the channels in
the residual blocks (and the last downsampling's output), no local Fourier unit; reflect padding,
batch norm and ReLU throughout; transposed convolutions up. About 51 M parameters (counted by
`parameters()`; the test checks the count).

The module takes `(image, mask)` as the TorchScript file does (image 1 x 3 x H x W in [0, 1], mask 1 where
to fill) and returns the image with the hole replaced by the generator's output.
"""

from __future__ import annotations

import torch
from torch import nn

NGF = 64
DOWNSAMPLINGS = 3
BLOCKS = 18
GLOBAL_RATIO = 0.75  # the residual blocks' share of channels in the spectral (global) branch


def conv_bn_relu(channels_in: int, channels_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, 1, bias=False), nn.BatchNorm2d(channels_out), nn.ReLU(inplace=True)
    )


class FourierUnit(nn.Module):
    """A 1 x 1 convolution (with batch norm and ReLU) over the real and imaginary parts of the
    feature map's 2-D real FFT ("ortho" norm), then back to the spatial domain."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.mix = conv_bn_relu(2 * channels, 2 * channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        spectrum = torch.fft.rfftn(x.float(), dim=(-2, -1), norm="ortho")
        parts = torch.cat([spectrum.real, spectrum.imag], dim=1)  # B x 2C x H x (W/2 + 1)
        real, imag = self.mix(parts).chunk(2, dim=1)
        return torch.fft.irfftn(torch.complex(real, imag), s=(height, width), dim=(-2, -1), norm="ortho")


class SpectralTransform(nn.Module):
    """The global-to-global path: halve the channels, add the Fourier unit's output, project."""

    def __init__(self, channels_in: int, channels_out: int) -> None:
        super().__init__()
        self.reduce = conv_bn_relu(channels_in, channels_out // 2)
        self.fourier = FourierUnit(channels_out // 2)
        self.project = nn.Conv2d(channels_out // 2, channels_out, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(x)
        return self.project(x + self.fourier(x))


class FastFourierConv(nn.Module):
    """A convolution over (local, global) channel groups: local-to-local, local-to-global and
    global-to-local are spatial convolutions, global-to-global the spectral transform; each group is
    then batch-normalised and passed through ReLU."""

    def __init__(
        self, channels_in: int, channels_out: int, kernel: int, ratio_in: float, ratio_out: float, **conv
    ) -> None:
        super().__init__()
        self.global_in, self.global_out = int(channels_in * ratio_in), int(channels_out * ratio_out)
        local_in, local_out = channels_in - self.global_in, channels_out - self.global_out

        def spatial(a: int, b: int) -> nn.Module | None:
            return nn.Conv2d(a, b, kernel, bias=False, padding_mode="reflect", **conv) if a and b else None

        self.local_to_local = spatial(local_in, local_out)
        self.local_to_global = spatial(local_in, self.global_out)
        self.global_to_local = spatial(self.global_in, local_out)
        self.global_to_global = SpectralTransform(self.global_in, self.global_out) if self.global_in else None
        self.local_out = nn.Sequential(nn.BatchNorm2d(local_out), nn.ReLU(inplace=True)) if local_out else None
        self.global_out_act = (
            nn.Sequential(nn.BatchNorm2d(self.global_out), nn.ReLU(inplace=True)) if self.global_out else None
        )

    @staticmethod
    def _sum(*terms):
        present = [t for t in terms if t is not None]
        return sum(present[1:], present[0]) if present else None

    def forward(self, x: tuple[torch.Tensor, torch.Tensor | None]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        local, glob = x

        def apply(path, value):
            return path(value) if path is not None and value is not None else None

        out_local = self._sum(apply(self.local_to_local, local), apply(self.global_to_local, glob))
        out_global = self._sum(apply(self.local_to_global, local), apply(self.global_to_global, glob))
        if out_local is not None:
            out_local = self.local_out(out_local)
        if out_global is not None:
            out_global = self.global_out_act(out_global)
        return out_local, out_global


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.first = FastFourierConv(channels, channels, 3, GLOBAL_RATIO, GLOBAL_RATIO, padding=1)
        self.second = FastFourierConv(channels, channels, 3, GLOBAL_RATIO, GLOBAL_RATIO, padding=1)

    def forward(self, x):
        local, glob = self.second(self.first(x))
        return x[0] + local, x[1] + glob


class BigLamaGenerator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ReflectionPad2d(3)
        self.stem = FastFourierConv(4, NGF, 7, 0.0, 0.0)
        self.down = nn.ModuleList(
            FastFourierConv(
                NGF * 2**i,
                NGF * 2 ** (i + 1),
                3,
                0.0,
                GLOBAL_RATIO if i == DOWNSAMPLINGS - 1 else 0.0,
                stride=2,
                padding=1,
            )
            for i in range(DOWNSAMPLINGS)
        )
        width = NGF * 2**DOWNSAMPLINGS
        self.blocks = nn.Sequential(*(ResidualBlock(width) for _ in range(BLOCKS)))
        up = []
        for i in range(DOWNSAMPLINGS):
            channels = NGF * 2 ** (DOWNSAMPLINGS - i)
            up += [
                nn.ConvTranspose2d(channels, channels // 2, 3, stride=2, padding=1, output_padding=1),
                nn.BatchNorm2d(channels // 2),
                nn.ReLU(inplace=True),
            ]
        self.up = nn.Sequential(*up, nn.ReflectionPad2d(3), nn.Conv2d(NGF, 3, 7), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pair = self.stem((self.pad(x), None))
        for layer in self.down:
            pair = layer(pair)
        local, glob = self.blocks(pair)
        return self.up(torch.cat([local, glob], dim=1))


class BigLama(nn.Module):
    """`model(image, mask)` as the big-lama TorchScript file is called."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = BigLamaGenerator()

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        masked = image * (1 - mask)
        predicted = self.generator(torch.cat([masked, mask], dim=1))
        return mask * predicted + (1 - mask) * image


def random_big_lama(seed: int = 0) -> BigLama:
    torch.manual_seed(seed)
    return BigLama().eval()


if __name__ == "__main__":
    model = random_big_lama()
    print(f"big-lama architecture, random weights: {sum(p.numel() for p in model.parameters()):,} parameters")
