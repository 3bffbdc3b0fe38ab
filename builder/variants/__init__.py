"""Named variants, one folder each (`<name with _>/spec.yaml` plus a README saying what the variant
is for), and the spec loader. A variant that needs its own planning code keeps it in its folder
(the -10 subset's splits and pairing live in `hard_spurious_imagenet_10/`)."""

from builder.variants.spec import (
    NAMED_VARIANTS,
    SubsetSpec,
    VariantSpec,
    load_variant,
    spec_mapping,
    variant_folder,
    variant_planning,
)

__all__ = [
    "NAMED_VARIANTS",
    "SubsetSpec",
    "VariantSpec",
    "load_variant",
    "spec_mapping",
    "variant_folder",
    "variant_planning",
]
