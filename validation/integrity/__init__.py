"""Integrity of a composed dataset (or a parts folder) against its `_info.json` manifest.

Checks, each failure an error row (`builder.core.records.Issue`, a reason from `REASONS`) naming the
split, the shard and the sample key:
  - every listed shard exists, has the recorded byte size, sha256 and sample count;
  - every tar member is a plain file with a safe name (no absolute path, no `..`), `key.ext` form;
  - every sample has exactly the members of its stage, decodes, and its `json` fits the schema;
  - no key repeats anywhere in the dataset;
  - totals per split, group, size, tier and group/size match the manifest's counts;
  - `random` backgrounds never come from the object's own class;
  - what a sample says it is follows from what it is: group and tier from position, background, size
    and the spec (`builder.core.taxonomy`), the key from source, position, size and background, the
    pasted box from the position (`builder.compose.geometry`), the background source from the kind;
  - the declared pasted box lies in the canvas and fits the declared size, and, when the parts are at
    hand, the composite's pixels in that box match the object's crop resized the same way (within a
    JPEG tolerance), and the pixels around it match the declared background source's canvas. The
    object is cut and sized by compose's own rules under the spec (`builder.compose.object_crop`,
    `crop`, `box_rounding`, `size_rounding`), so a `--paper-exact` set is checked against the
    paper's crop.

Shards are checked independently (in `workers` processes when asked) and merged in manifest order,
so the result is the same for any worker count. One module per job: `shard_files` (the files against
the manifest), `meaning` (what a sample says against what it is), `pixels` (against the parts),
`samples` (one shard's samples), `driver` (the whole dataset, in parallel), `results` (the rows).
"""

from validation.integrity.driver import check_dataset
from validation.integrity.results import (
    DECODE_ERRORS,
    DEFAULT_PLACEMENT_TOLERANCE,
    IntegrityResult,
    check_tolerance,
    failure,
    failure_line,
)

__all__ = [
    "DECODE_ERRORS",
    "DEFAULT_PLACEMENT_TOLERANCE",
    "IntegrityResult",
    "check_dataset",
    "check_tolerance",
    "failure",
    "failure_line",
]
