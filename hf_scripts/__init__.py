"""Loading, publishing and verifying releases: `stream(...)` for training straight from shards,
`hsi publish` (versioned, tagged Hub releases or a local git mirror) and `hsi verify`."""
