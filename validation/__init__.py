"""Validation of parts and composed datasets: shard integrity, sample meaning and placement
(`integrity/`), the paper's centre and size scores (`scores/`), Grounding DINO box re-detection
(`detection`), preview sheets (`previews`), and the report written next to the dataset (`report`).

Entry points: `hsi validate` (`hsi.commands.validate`, through `validation.request`) and
`validation.report.validate_dataset`.
"""
