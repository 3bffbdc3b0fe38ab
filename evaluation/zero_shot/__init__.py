"""Zero-shot models: CLIP-style image-text models scored as classifiers, and vision-language models
that answer in words.

- `published`: the data CLIP's authors published (the 80 ImageNet prompt templates, the 7 "simple"
  ones, the curated class names), read from the copy open-clip-torch ships.
- `templates`: the prompt sets (`openai`, `simple`, `no-scale`, a YAML file of one's own).
- `class_names`: the class names of a label space (all 1000 classes, the -10 subset, any set).
- `encoders`: one adapter over an open_clip model and a transformers `CLIPModel`.
- `text_cache`: the on-disk cache of text classifiers, keyed by weights, tokens, names, templates.
- `text_classifier`: the text classifier (normalised mean of the template embeddings).
- `classifier`: `zero_shot_classifier` (a `torch.nn.Module` giving logits over the label space) and
  `zero_shot_classifiers` (one image pass, logits per prompt set).
- `clip_models`: the model specs `openclip:ARCH[:PRETRAINED|FILE]` and `hf-clip:ID|DIR`, with the
  model's own preprocessing as plain fields.
- `answers`: free-text answers mapped to classes by exact match on names and WordNet synonyms.
- `specs`: a CLIP spec as the evaluation's classifier (text classifiers over the label space, on the
  run's device, with what the run records of it); `record`: that record (prompt sets, class names,
  label space) and the per-set prediction columns it names.

The lowest layer of `evaluation`: nothing here imports another evaluation subpackage.

Importing this package imports nothing heavy; torch, open_clip and transformers are imported by the
modules that need them.
"""
