"""glibc's malloc, told to keep the memory a process frees for what it allocates next.

Reading a trace allocates and frees a megabyte of text per chunk, and the decoders' buffers besides; the answer
server writes each answer (1.6 MB for the whole recipe listing) into strings and bytes it frees when it is sent.
glibc serves such sizes with mmap at first and gives the top of its heap back to the kernel whenever more than a
little of it is free, so the same memory is mapped again and again, each page a fault: about 30,000 of them on a
54 MB trace, a quarter of the time of a command that analyses it, and 860-1,500 for each listing served, two
thirds of its time (measured here; the page faults of a virtual machine are dear). With a fixed mmap threshold and a higher
trim threshold the heap is reused instead: about 3,000 faults for the trace, none for the listing, and a peak
resident set 0.4-2 MB larger on the shared traces, ctypes' import included, 5 MB for the server (the heap keeps at
most TRIM_BYTES free; what is over MMAP_BYTES is still mapped and unmapped by itself, as a window grown for one
long value is).

Only processes of the package's own do this: the command line's, the trace pool's workers (whoever started the
pool) and the answer server; a library call must not change its caller's allocator. Elsewhere (another C library,
another system) it does nothing.
"""

from __future__ import annotations

import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
TRIM_BYTES = 32 << 20
MMAP_BYTES = 8 << 20


def keep_freed_memory() -> bool:
    """Set glibc's trim and mmap thresholds for this process; whether it was set."""
    if not sys.platform.startswith("linux") or not _glibc():
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        return mallopt(M_TRIM_THRESHOLD, TRIM_BYTES) == 1 and mallopt(M_MMAP_THRESHOLD, MMAP_BYTES) == 1
    except (ImportError, OSError, AttributeError):  # no ctypes (some builds), no mallopt
        return False


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # musl and others do not know the name
        return False
