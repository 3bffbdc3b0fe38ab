"""Named variants as data, one folder each: `<name with _>/spec.yaml` plus a README saying what the
variant is for. A variant that needs its own planning code keeps it in its folder (the -10 subset's
splits and pairing live in `hard_spurious_imagenet_10/`); it builds on compose's parts, and compose
loads it by name (`builder.compose.spec`), so nothing here is imported by compose statically."""
