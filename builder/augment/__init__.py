"""Variants that need models after compose: SCGS (misclassification-guided Grad-CAM++ masks and
Stable Diffusion inpainting with the true class, arXiv 2412.19457), with its controls."""
