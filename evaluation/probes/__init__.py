"""Bias probes: spectral bias, the critical band and shape bias of a model, and whether any of them
predicts its Hard-Spurious-ImageNet group accuracies across a model zoo (`hsi probe`).

The procedures follow the published code of Gavrikov & Keuper, "Can Biases in ImageNet Models
Explain Generalization?" (CVPR 2024, github.com/paulgavrikov/biases_vs_generalization) and
Subramanian et al., "Spatial-frequency channels, shape bias, and adversarial robustness" (NeurIPS
2023, github.com/ajaysub110/critical-band-masking); each module says where it follows them.
"""
