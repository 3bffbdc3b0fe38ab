"""The paper's per-class centre and size scores (Corner Cases, section 3.3) and their rank
correlations with per-class accuracy.

For an image of width W and height H, per box (x0, y0, x1, y1) in ImageNet's raw VOC corner values:
  centre distance d = max(|cx - W/2| / (W/2), |cy - H/2| / (H/2)),  cx = (x0+x1)/2, cy = (y0+y1)/2
  area fraction   a = (x1 - x0)(y1 - y0) / (W H)
Per image: centre score = 1 - mean d over its boxes, size score = mean a. Per class: the mean over its
images. The paper's class-averaged means over ImageNet's official val boxes are 0.747 (centre) and
0.418 (size); a user with `LOC_val_solution.csv` can reproduce them with
`hsi validate --scores --boxes-csv LOC_val_solution.csv --sizes-from VAL_IMAGES`.

One module per job: `boxes` (the scores), `inputs` (sizes, boxes, accuracy), `correlations`
(statistics), `plots` (table and figures), `report` (the scores of a set of images as one report).
"""
