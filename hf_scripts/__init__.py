"""Publishing and verifying releases: `hsi publish` (versioned, tagged Hub releases or a local git
mirror with LFS) and `hsi verify`. The training reader `stream()` lives in `builder.formats.stream`
(`hf_scripts.stream` is its deprecated old address, kept one release)."""
