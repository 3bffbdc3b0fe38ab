"""The aspect-ratio-preserving set: spec.yaml and README.md (no code of its own)."""
