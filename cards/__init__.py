"""Dataset cards and release folders: turn composed, validated datasets into a folder that
`datasets.load_dataset` reads by name, with a card rendered from the manifests (never by string
pasting of YAML)."""
