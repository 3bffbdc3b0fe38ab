"""The paper's set: spec.yaml and README.md (no code of its own)."""
