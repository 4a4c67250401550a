#!/usr/bin/env python3
"""Writes the hand-made seed inputs of tests/fuzz/corpus/ (see fuzz_malloc.cc
for the input format).  Re-run after changing the opcode table."""
import os

(MALLOC, MALLOC2, MALLOC3, CALLOC, REALLOC, REALLOC2, FREE, FREE2, ALIGNED, MEMALIGN,
 USABLE, REMOTE_FREE, REMOTE_ALLOC, PURGE, PRESSURE, COLLECT, OPTION, BAD) = range(18)

EDGES = [0, 16, 128, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20,
         8 << 20, 32 << 10, 512 << 10]


def tiny(n):  # 0..255
    assert n < 256
    return bytes([0, n])


def mid(n):  # up to 4 KiB
    return bytes([128, n & 255, n >> 8])


def upto64k(n):
    return bytes([176, n & 255, (n >> 8) & 255, n >> 16])


def large(n):  # 256 KiB + x, x < 1 MiB
    x = n - (256 << 10)
    return bytes([224, x & 255, (x >> 8) & 255, x >> 16])


def huge(n):  # 1 MiB + x
    x = n - (1 << 20)
    return bytes([236, x & 255, (x >> 8) & 255, x >> 16])


def edge(e, delta=0):
    return bytes([244, EDGES.index(e), delta + 16])


def op(code, *parts):
    return bytes([code]) + b"".join(bytes([p]) if isinstance(p, int) else p for p in parts)


seeds = {
    "small_mix": b"".join([
        *(op(MALLOC, s, tiny(s * 7)) for s in range(12)),
        op(CALLOC, 20, 3, mid(1000)),
        op(REALLOC, 1, mid(3000)), op(REALLOC, 2, tiny(1)), op(REALLOC, 3, tiny(0)),
        op(FREE, 4), op(FREE, 4), op(USABLE, 5), op(MALLOC, 4, mid(2048)),
        op(REALLOC, 30, upto64k(40000)), op(FREE, 30),
    ]),
    "large_huge": b"".join([
        op(MALLOC, 0, large(300 << 10)), op(MALLOC, 1, huge(1 << 20)),
        op(MALLOC, 2, huge(4 << 20)), op(REALLOC, 0, huge(3 << 20)),
        op(REALLOC, 2, tiny(100)), op(REALLOC, 1, large(600 << 10)),
        op(CALLOC, 3, 2, huge(2 << 20)), op(FREE, 0), op(FREE, 1),
        op(MALLOC, 4, edge(8 << 20)), op(MALLOC, 5, edge(256 << 10, 1)),
        op(MALLOC, 6, edge(1 << 20, -1)), op(REALLOC, 6, edge(2 << 20, 3)),
    ]),
    "aligned": b"".join([
        *(op(ALIGNED, lg, lg, tiny(lg * 3)) for lg in range(21)),
        *(op(MEMALIGN, 32 + lg, lg, mid(100 * lg)) for lg in range(21)),
        op(ALIGNED, 60, 20, huge(3 << 20)), op(MEMALIGN, 61, 16, large(400 << 10)),
        op(REALLOC, 60, tiny(8)), op(REALLOC, 20, mid(4000)),
    ]),
    "remote": b"".join([
        *(op(MALLOC, s, tiny(16 + s)) for s in range(40)),
        *(op(REMOTE_FREE, s) for s in range(0, 40, 2)),
        *(op(REMOTE_ALLOC, 100 + s, mid(500 + s)) for s in range(10)),
        op(REMOTE_ALLOC, 120, huge(2 << 20)), op(REALLOC, 100, mid(3000)),
        *(op(FREE, 100 + s) for s in range(10)),
        *(op(MALLOC, s, tiny(16 + s)) for s in range(0, 40, 2)),
    ]),
    "purge": b"".join([
        *(op(MALLOC, s, upto64k(20000 + s)) for s in range(16)),
        *(op(FREE, s) for s in range(16)),
        op(PURGE, 0), op(CALLOC, 1, 1, upto64k(30000)), op(PURGE, 1),
        op(MALLOC, 2, huge(2 << 20)), op(FREE, 2), op(PRESSURE),
        op(CALLOC, 3, 1, huge(2 << 20)), op(OPTION, 0, 2), op(MALLOC, 4, large(512 << 10)),
        op(FREE, 4), op(CALLOC, 5, 4, large(512 << 10)), op(COLLECT), op(OPTION, 3, 1),
        op(MALLOC, 6, huge(6 << 20)), op(FREE, 6), op(CALLOC, 7, 1, huge(6 << 20)),
    ]),
    "bad_requests": b"".join([
        op(BAD, 0, 0), op(BAD, 1, 0), op(BAD, 2, 1), op(MALLOC, 9, tiny(50)), op(BAD, 3, 9),
        op(MALLOC, 9, huge(2 << 20)), op(BAD, 3, 9), op(FREE, 200),
    ]),
}

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
os.makedirs(here, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes")
