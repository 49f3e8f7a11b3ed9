"""dtensor.checkpoint.writer without threads of ranks: every chunk of every piece, of any
dtype and strides, comes back bit for bit through our reader and through safetensors, with
the crc32 of its bytes, whatever the staging buffer size (chunks and headers larger than a
buffer, parts carried over between buffers), with O_DIRECT or ordinary writes."""

from __future__ import annotations

import os
import zlib

import pytest
import torch

from dtensor.checkpoint import UnsupportedValueError
from dtensor.checkpoint.pieces import chunk_name, chunk_shape, grid, relative
from dtensor.checkpoint.storage import Reader
from dtensor.checkpoint.writer import ALIGN, Piece, write_pieces


def _piece(key: str, full: torch.Tensor, box: tuple, chunk_bytes: int) -> Piece:
    """The piece ``box`` of ``full``, held as a non-contiguous view (a rank's local tensor
    may be one), cut into chunks as save cuts it."""
    local = full[tuple(slice(a, b) for a, b in box)]
    chunk = chunk_shape(tuple(b - a for a, b in box), full.element_size(), chunk_bytes)
    cboxes = grid(box, chunk)
    return Piece(local, box, cboxes, [chunk_name(key, c) for c in cboxes])


def _pieces() -> list[Piece]:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(37, 29, generator=g)
    return [
        _piece("w", w, ((3, 30), (5, 29)), 256),  # column blocks of rows: not contiguous
        _piece("rows", w, ((0, 37), (0, 29)), 29 * 4 * 3),  # whole rows: contiguous chunks
        _piece("h", torch.randn(9, 13, generator=g).to(torch.bfloat16), ((0, 9), (2, 13)), 64),
        _piece("m", torch.rand(6, 7, generator=g) > 0.5, ((1, 6), (0, 7)), 8),
        _piece("i", torch.arange(60, dtype=torch.int64).reshape(3, 4, 5),
               ((0, 3), (1, 4), (0, 5)), 40),
        _piece("i8", torch.arange(-50, 50, dtype=torch.int8), ((7, 93),), 16),
        _piece("d", torch.randn(11, generator=g, dtype=torch.float64), ((0, 11),), 1 << 20),
        _piece("s", torch.tensor(3.5), (), 64),  # 0-d: one chunk of one element
        _piece("big", torch.randn(300, 40, generator=g), ((0, 300), (0, 40)), 1 << 20),
        # a row longer than a small buffer: written in slabs of a row
        _piece("wide", torch.randn(3, 2500, generator=g), ((0, 3), (0, 2500)), 1 << 20),
        # 300 chunks of one element: a header longer than a small buffer
        _piece("tiny", torch.arange(300, dtype=torch.int16), ((0, 300),), 2),
    ]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "ordinary"])
@pytest.mark.parametrize("stage", [2 * ALIGN, 3 * ALIGN, 8 << 20])
def test_every_chunk_reads_back_with_its_crc32(tmp_path, direct, stage):
    pieces = _pieces()
    path = str(tmp_path / "f.safetensors")
    size, crcs = write_pieces(path, pieces, stage_bytes=stage, direct=direct)
    assert size == os.path.getsize(path)
    reader = Reader(str(tmp_path), {"f.safetensors": size})
    try:
        for p, piece_crcs in zip(pieces, crcs, strict=True):
            assert len(piece_crcs) == len(p.chunks)
            for name, cbox, crc in zip(p.names, p.chunks, piece_crcs):
                want = p.local[relative(cbox, p.box)].contiguous()
                assert crc == zlib.crc32(want.reshape(-1).view(torch.uint8).numpy()), name
                got = reader.read("f.safetensors", name, name, want.dtype, tuple(want.shape),
                                  crc)
                assert torch.equal(got, want), name
    finally:
        reader.close()


def test_the_file_is_safetensors(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    pieces = _pieces()
    path = str(tmp_path / "f.safetensors")
    write_pieces(path, pieces, stage_bytes=2 * ALIGN)
    with safetensors.safe_open(path, framework="pt") as f:
        assert set(f.keys()) == {n for p in pieces for n in p.names}
        for p in pieces:
            for name, cbox in zip(p.names, p.chunks):
                assert torch.equal(f.get_tensor(name), p.local[relative(cbox, p.box)]), name


def test_a_dtype_safetensors_cannot_hold_is_refused_before_any_file(tmp_path):
    z = torch.zeros(3, dtype=torch.complex128)
    path = tmp_path / "f.safetensors"
    with pytest.raises(UnsupportedValueError, match=r"'z' is complex128, which safetensors "
                       r"cannot store") as e:
        write_pieces(str(path), [Piece(z, ((0, 3),), [((0, 3),)], ["z@0"])])
    assert e.value.key == "z" and not path.exists()


def test_a_failed_copy_closes_the_file_and_raises(tmp_path):
    """A chunk that cannot be copied (here: a meta tensor, which holds no bytes) fails the
    write with its own error; the file descriptor and the pool are released."""
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    good = _pieces()[0]
    bad = Piece(torch.empty(4, device="meta"), ((0, 4),), [((0, 4),)], ["bad@0"])
    with pytest.raises((NotImplementedError, RuntimeError)):
        write_pieces(str(tmp_path / "f.safetensors"), [good, bad], stage_bytes=2 * ALIGN)
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before
    # the pool still works: the next file is written
    size, _ = write_pieces(str(tmp_path / "g.safetensors"), [good])
    assert size == os.path.getsize(tmp_path / "g.safetensors")


def test_stage_bytes_must_be_whole_blocks(tmp_path):
    with pytest.raises(ValueError, match=r"stage_bytes=5000: expected a multiple of 4096"):
        write_pieces(str(tmp_path / "f.safetensors"), _pieces()[:1], stage_bytes=5000)


def test_save_and_load_need_no_safetensors_package(tmp_path, monkeypatch):
    import sys

    import dtensor.checkpoint as dcp

    monkeypatch.setitem(sys.modules, "safetensors", None)  # any import of it now fails
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    w = torch.arange(12.0).reshape(3, 4)
    dcp.save({"w": w.t()}, tmp_path / "ck")  # a non-contiguous tensor
    state = {"w": torch.zeros(4, 3)}
    dcp.load(state, tmp_path / "ck")
    assert torch.equal(state["w"], w.t())
