"""The shard contract every writer and reader of WebDataset shards shares: sample keys (no dots,
slashes or control characters), shard file names (`<split>-NNNNN.tar`) and the error a shard that
cannot be trusted raises, and the fixed USTAR header both sides rely on. Writing is
`builder.core.shard_write`, reading `builder.core.shard_read`, hashing `builder.core.hashing`."""

from __future__ import annotations

import re
import tarfile

from builder.core.errors import InputError, shown

Sample = tuple[str, dict[str, bytes]]


class ShardFormatError(InputError, ValueError):
    """A shard that cannot be trusted: unsafe member names, keys with dots, a mixed-up order."""


def shard_filename(split: str, index: int) -> str:
    return f"{split}-{index:05d}.tar"


KEY_RULE = "non-empty, without '.', '/', '\\', whitespace or control characters, and not starting with '_'"


_PLAIN_KEY = re.compile(r"[A-Za-z0-9-][A-Za-z0-9_-]*")


def key_problem(key: str) -> str | None:
    """What makes `key` unusable as a sample key, or None. The one rule that writers (`check_key`)
    and readers (`split_member_name`) share, so a key that is written can always be read back:
    a dot would end the key early, '/' and '\\' make paths, '_' starts WebDataset's own names."""
    if not key:
        return "is empty"
    if key.startswith("_"):
        return "starts with '_'"
    if _PLAIN_KEY.fullmatch(key):  # the usual case, decided in one regex match
        return None
    bad = sorted({c for c in key if c in "./\\" or c.isspace() or not c.isprintable()})
    return f"contains {''.join(bad)!r}" if bad else None


def check_key(key: str) -> None:
    problem = key_problem(key)
    if problem:
        raise ShardFormatError(f"sample key {shown(key)} {problem}: keys must be {KEY_RULE}")


def tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# The ustar header of a member is fixed but for its name, size and checksum, so it is written
# directly: building TarInfo objects through tarfile was a quarter of compose time. The bytes are
# those of tarfile's USTAR_FORMAT with the fields of `tar_info` (tests/formats/test_jpeg_and_ustar_bytes.py).
TAR_BLOCK = tarfile.BLOCKSIZE
TAR_RECORD = tarfile.RECORDSIZE
TAR_NAME_FIELD = 100
TAR_ZEROS = bytes(TAR_BLOCK)
_SIZE_LIMIT = 8**11  # 11 octal digits: tarfile's USTAR_FORMAT refuses larger sizes
_MODE_IDS = b"0000444\0" + b"0000000\0" * 2  # mode 0o444, uid 0, gid 0
_AFTER_SIZE = b"00000000000\0"  # mtime 0
_AFTER_CHECKSUM = (
    tarfile.REGTYPE
    + b"\0" * 100  # typeflag, empty linkname
    + tarfile.POSIX_MAGIC  # "ustar\0" and version "00"
    + b"\0" * (32 + 32 + 8 + 8 + 155 + 12)  # uname, gname, devmajor, devminor, prefix, padding
)
# The checksum is the byte sum of the header with its own field read as 8 spaces.
_FIXED_SUM = sum(_MODE_IDS) + sum(_AFTER_SIZE) + 8 * ord(" ") + sum(_AFTER_CHECKSUM)


def ustar_header(name: str, size: int) -> bytes:
    encoded = name.encode(tarfile.ENCODING, "surrogateescape")  # what tarfile.open(mode="w") uses
    if len(encoded) > TAR_NAME_FIELD:
        # tarfile moves a long name's leading folders into the prefix field, or raises ValueError;
        # our names never need it, so leave that rare case to tarfile itself.
        return tar_info(name, size).tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")
    if not 0 <= size < _SIZE_LIMIT:
        raise ValueError("overflow in number field")  # tarfile's error for this case
    size_field = b"%011o\0" % size
    checksum = _FIXED_SUM + sum(encoded) + sum(size_field)
    return b"".join(
        (
            encoded,
            b"\0" * (TAR_NAME_FIELD - len(encoded)),
            _MODE_IDS,
            size_field,
            _AFTER_SIZE,
            b"%06o\0 " % checksum,
            _AFTER_CHECKSUM,
        )
    )


def member_blocks(name: str, data: bytes) -> tuple[bytes, bytes, bytes]:
    """One member as written: its header, its data, and zero padding to a whole block."""
    return ustar_header(name, len(data)), data, TAR_ZEROS[: -len(data) % TAR_BLOCK]
