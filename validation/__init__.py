"""Validation of parts and composed datasets: shard integrity and placement, the paper's centre and
size scores, Grounding DINO box re-detection, preview sheets, and the report next to the dataset.

Entry points: `hsi validate` (validation.command) and `validation.report.validate_dataset`.
"""
