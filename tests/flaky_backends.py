"""Maskers that fail on purpose, registered (on import) by tests to check that backend failures are data."""

from builder.backends import register_backend
from builder.backends.classical import BoxConfig, BoxMasker

FAILING_WIDTH = 56  # fake_imagenet's good images come 48, 56, 64 and 72 pixels wide


class FlakyMasker(BoxMasker):
    """The box masker, except that it raises on any batch holding an image FAILING_WIDTH wide."""

    def masks_batch(self, images, boxes):
        if any(image.shape[1] == FAILING_WIDTH for image in images):
            raise RuntimeError(f"cannot segment a {FAILING_WIDTH}-pixel-wide image")
        return super().masks_batch(images, boxes)


class BrokenMasker(BoxMasker):
    def masks_batch(self, images, boxes):
        raise RuntimeError("this masker is broken")


@register_backend("masker", "flaky", config_class=BoxConfig)
def make_flaky_masker(config):
    return FlakyMasker()


@register_backend("masker", "broken", config_class=BoxConfig)
def make_broken_masker(config):
    return BrokenMasker()
