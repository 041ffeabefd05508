"""Read an offline ``.wandb`` transaction log with wandb's own protobuf ``Record``.

wandb ≥ 0.19 moved its Python ``DataStore`` reader into the Go core, so this helper reads the
file's framing itself: the LevelDB log format wandb documents for ``.wandb`` files (a 7-byte
``:W&B`` header, then 32 KiB blocks of records ``[crc32:4][length:2 LE][type:1][data]`` with
types FULL=1, FIRST=2, MIDDLE=3, LAST=4; a block tail shorter than 7 bytes is padding). Each
reassembled payload is parsed with ``wandb.proto.wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import struct
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_payloads(path: str | Path) -> list[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a .wandb file (header {data[:4]!r})"
    pos, out, buf = 7, [], b""
    while pos + HEADER <= len(data):
        left = BLOCK - (pos % BLOCK)
        if left < HEADER:
            pos += left
            continue
        _crc, length, typ = struct.unpack("<IHB", data[pos:pos + HEADER])
        if typ == 0 and length == 0:  # zero padding at the end of a block / file
            pos += left
            continue
        chunk = data[pos + HEADER:pos + HEADER + length]
        if len(chunk) < length:  # a record still being written: stop at the last complete one
            break
        pos += HEADER + length
        if typ == FULL:
            out.append(chunk)
        elif typ == FIRST:
            buf = chunk
        elif typ == MIDDLE:
            buf += chunk
        elif typ == LAST:
            out.append(buf + chunk)
            buf = b""
        else:
            raise ValueError(f"{path}: bad record type {typ} at byte {pos}")
    return out


def read_records(path: str | Path):
    from wandb.proto import wandb_internal_pb2 as pb

    recs = []
    payloads = read_payloads(path)
    for payload in payloads:
        r = pb.Record()
        r.ParseFromString(payload)
        recs.append(r)
    return recs
