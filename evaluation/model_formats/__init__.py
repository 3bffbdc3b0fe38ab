"""Model formats: a model spec turned into a classifier the prediction path can run.

`models` loads a spec (timm, torchvision, TorchScript `ts:`, our own checkpoints, and the model files
`ep:` and `onnx:`) as an eval-mode module with its preprocessing; `model_files`, `pt2_checks`,
`pt2_files` and `onnx_files` read and prove the model files; `forward_checks` turns a failing forward
pass into one line; `labels` says which outputs are scored and which ImageNet class each stands for;
`declared` reads a preprocessing declared for predictions made elsewhere; `identity` says who an
in-memory model is (a module's weights fingerprint, a callable's declared weights).
Nothing here reads the data or writes a file of an evaluation.
"""
