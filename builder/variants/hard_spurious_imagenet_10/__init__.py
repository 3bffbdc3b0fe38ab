"""The -10 subset: spec.yaml, README.md, and its own planning of splits and paired backgrounds."""
