"""`hsi report`: a static HTML site of one or more `hsi eval` output folders, readable from disk.

    SITE/index.html                               the leaderboards (one per data revision), sorted by worst group
    SITE/leaderboard/<fingerprint>-<split>-*.png  every model's accuracy-vs-size curves; position x size heat maps
    SITE/models/<n>-<folder>/index.html           one model: its tables, its plots, its failure galleries
    SITE/models/<n>-<folder>/plots/*.png          the plots its evaluation wrote, copied as plain files
    SITE/thumbs/<fingerprint>/<split>/<key>.jpg   the gallery samples' own JPEGs, from shards proved by sha256
    SITE/_written.json                            the OwnedFolder record of every file written

No page needs JavaScript, a network or a server; every string from the inputs is HTML-escaped.
Modules: collect (the eval folders, read through evaluation.ranking.eval_reader), revision (the data and
its shards), gallery (the seeded samples and their labels), figures, markup and pages (HTML),
build (all of it, written through the output folder's OwnedFolder).
"""
