"""Maskers that fail on purpose, registered (on import) by tests to check that backend failures are data."""

import os
import time

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


class CountingMasker(BoxMasker):
    """The box masker (the same masks), logging each image it masks as a line with its process id to
    the file $HSI_TEST_MASK_LOG (so a test sees which images were recomputed, and by which workers),
    sleeping $HSI_TEST_MASK_DELAY seconds per call (so a kill lands midway), and raising
    KeyboardInterrupt (a Ctrl-C) once `interrupt_after` images were masked in this process."""

    interrupt_after: int | None = None
    masked = 0

    def masks_batch(self, images, boxes):
        if CountingMasker.interrupt_after is not None and CountingMasker.masked >= CountingMasker.interrupt_after:
            raise KeyboardInterrupt
        CountingMasker.masked += len(images)
        log = os.environ.get("HSI_TEST_MASK_LOG")
        if log:
            with open(log, "a") as handle:
                handle.write(f"{os.getpid()}\n" * len(images))
        time.sleep(float(os.environ.get("HSI_TEST_MASK_DELAY", "0")))
        return super().masks_batch(images, boxes)


@register_backend("masker", "counting", config_class=BoxConfig)
def make_counting_masker(config):
    return CountingMasker()
