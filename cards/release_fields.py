"""What each field of a release's `_release.json` is checked against, besides the files it records.

`hsi verify` reads every field; each is compared with what can vouch for it, or listed as not checked:

- `name` and `tool.name`: the toolkit's own name, the only one `hsi release` writes;
- `tool.version`: the version the card's licence section names;
- `changelog`: the card's Changelog section, rendered from it (cards.render.changelog_markdown); its
  first entry is this version's (or `unreleased`), every later one the previous release's changelog
  as `previous` records it, and this version's lines end with the changes `hsi release` describes
  between `previous` and the configs;
- `previous`: older than this version (a change of samples needs a new minor or major version), and,
  where the previous release itself is at hand (its tag on the Hub, `hsi verify --previous FOLDER`),
  exactly what that release records;
- any other key: refused where the record is read (cards.release.check_release_record).

`hsi release --previous` runs the same checks on the release it continues, so a changelog edited in
an old `_release.json` is refused there rather than carried into the next release.
"""

from __future__ import annotations

import re

from builder.core.errors import printable, shown
from cards.render import CHANGELOG_HEADING, changelog_markdown, toolkit_sentence
from cards.summary import DATASET_NAME, ChangelogEntry

RELEASE_META = "_release.json"
CARD = "README.md"
VERSION_PATTERN = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
UNRELEASED = "unreleased"  # the changelog entry of a build made without --version


def describe_changes(previous: dict | None, configs: dict[str, dict]) -> list[str]:
    """Readable lines saying which configs and splits changed since the previous release."""
    if previous is None:
        return []
    lines = []
    before = previous.get("configs", {})
    for name in sorted(set(before) | set(configs)):
        if name not in configs:
            lines.append(f"removed config {name}")
        elif name not in before:
            lines.append(f"added config {name}")
        else:
            old, new = before[name]["splits"], configs[name]["splits"]
            for split in sorted(set(old) | set(new)):
                if split not in new:
                    lines.append(f"{name}: removed split {split}")
                elif split not in old:
                    lines.append(f"{name}: added split {split}")
                elif old[split] != new[split]:
                    count = lambda shards: sum(s["num_samples"] for s in shards)  # noqa: E731
                    lines.append(
                        f"{name}/{split}: samples changed ({count(old[split])} -> {count(new[split])} samples)"
                    )
    return lines


def base_record(base: dict | None) -> dict | None:
    """What a release keeps of its base, so that a rebuild of it compares against the same one."""
    if base is None:
        return None
    return {"version": base.get("version"), "configs": base.get("configs", {}), "changelog": base.get("changelog", [])}


def _version_key(version: object) -> tuple[int, ...] | None:
    match = VERSION_PATTERN.match(version) if isinstance(version, str) else None
    return tuple(int(g) for g in match.groups()) if match else None


def card_changelog(card: str) -> str | None:
    """The card's Changelog section below its heading (the card's last section), or None."""
    _, found, rest = card.rpartition("\n" + CHANGELOG_HEADING)
    return rest.rstrip("\n") if found else None


def record_field_problems(record: dict, card: str | None) -> list[str]:
    """A line for each field of the release record `record` that departs from the toolkit's rules,
    from the card (`card`: its text, None when the revision has none readable: the files check
    names it) or from its own `previous` record."""
    problems = []
    if record.get("name") != DATASET_NAME:
        problems.append(
            f"{RELEASE_META}: name {shown(record.get('name'))} is not {DATASET_NAME!r}, the only name "
            "`hsi release` writes"
        )
    tool = record.get("tool") or {}
    if tool.get("name") != DATASET_NAME or not isinstance(tool.get("version"), str):
        problems.append(
            f"{RELEASE_META}: tool {printable(str(tool))[:120]} is not the toolkit's name and a version "
            f"({{'name': {DATASET_NAME!r}, 'version': ...}})"
        )
    elif card is not None and toolkit_sentence(tool["version"]) not in card:
        problems.append(
            f"{RELEASE_META}: tool.version {shown(tool['version'])} is not the toolkit version the card names"
        )
    changelog = [ChangelogEntry(e["version"], tuple(e["changes"])) for e in record.get("changelog", [])]
    problems += _changelog_problems(record, changelog)
    rendered = card_changelog(card) if card is not None else None
    if card is not None and rendered != changelog_markdown(changelog):
        problems.append(
            f"{RELEASE_META}: changelog is not what the card's Changelog section says "
            f"({'it has none' if rendered is None else 'they differ'})"
        )
    return problems


def _changelog_problems(record: dict, changelog: list[ChangelogEntry]) -> list[str]:
    version, previous = record.get("version"), record.get("previous")
    where = f"{RELEASE_META}: changelog"
    if not changelog:
        return [f"{where} is empty; `hsi release` writes an entry for every release"]
    problems = []
    versions = [e.version for e in changelog]
    if len(set(versions)) != len(versions):
        problems.append(f"{where} names a version twice")
    if previous is None:
        if len(changelog) != 1 or changelog[0].version != (version or UNRELEASED):
            problems.append(
                f"{where} holds {', '.join(map(printable, versions))}, but {RELEASE_META} records no previous "
                f"release: a first release's changelog is its own entry ({version or UNRELEASED}) alone"
            )
        return problems
    before = [ChangelogEntry(e["version"], tuple(e["changes"])) for e in previous.get("changelog", [])]
    old = previous.get("version")
    if version is not None and version == old:  # the same version rebuilt keeps its changelog
        if changelog != before:
            problems.append(f"{where} is not the one of {printable(str(old))} it rebuilds (previous.changelog)")
        if describe_changes(previous, record.get("configs", {})):
            problems.append(
                f"{RELEASE_META}: samples changed since previous {printable(str(old))}, the version did not"
            )
        return problems
    if changelog[0].version != (version or UNRELEASED):
        problems.append(
            f"{where}'s first entry is {shown(changelog[0].version)}, the release is {version or UNRELEASED}"
        )
    if changelog[1:] != before:
        problems.append(f"{where}: the entries after {versions[0]} are not previous.changelog (the changelog so far)")
    described = describe_changes(previous, record.get("configs", {}))
    if described and list(changelog[0].changes[-len(described) :]) != described:
        problems.append(
            f"{where}: {versions[0]}'s lines do not end with the changes since {printable(str(old))} "
            f"({printable('; '.join(described))[:200]})"
        )
    new_key, old_key = _version_key(version), _version_key(old)
    if new_key is not None and old_key is not None:
        if described and new_key[:2] <= old_key[:2]:
            problems.append(
                f"{RELEASE_META}: samples changed since previous {old}, and version {version} does not raise "
                "the minor or major version"
            )
        elif new_key < old_key:
            problems.append(f"{RELEASE_META}: version {version} is older than previous.version {old}")
    return problems


def previous_release_problems(record: dict, previous: dict, where: str) -> list[str]:
    """Lines for each part of `record`'s `previous` that is not what the previous release itself
    (`previous`: its record, read from `where`) records."""
    kept = record.get("previous")
    if kept is None:
        return [f"{RELEASE_META}: previous: records none, {where} is an earlier release of it"]
    expected = base_record(previous) or {}
    return [
        f"{RELEASE_META}: previous.{field} is not what {where} records"
        for field in ("version", "configs", "changelog")
        if kept.get(field) != expected.get(field)
    ]
