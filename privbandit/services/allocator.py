"""Party processes keep the memory they free, instead of handing it back to the kernel at once.

A party handles one block of 65,536 users at a time, and each block makes numpy and msgpack
temporaries of 0.5–1 MiB. With glibc's defaults, allocations that large are either mapped fresh
(above the mmap threshold) or carved from a heap top that is given back as soon as it is freed
(above the trim threshold). Both thresholds start at 128 KiB. So every block faults its
temporaries in again page by page: about 100 minor page faults per 512 KiB array. In a fleet at
T = 10⁸, those faults cost more CPU than the users' Pólya noise.

:func:`keep_freed_memory` raises both thresholds. Then a block's temporaries reuse the pages the
previous block freed. The cost is memory: a party keeps up to ``trim_bytes`` of freed heap
resident. The parties call it, and so does every in-process task (``runner.tasks.execute``): since the
engine serves one block at a time it faults the same way (docs/performance.md).
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("privbandit.allocator")

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 << 20  # allocations below this come from the heap (32 MiB: glibc's documented maximum)
TRIM_BYTES = 128 << 20  # the heap keeps up to this much freed memory at its top


def keep_freed_memory(mmap_bytes: int = MMAP_BYTES, trim_bytes: int = TRIM_BYTES) -> bool:
    """Raise glibc's mmap and trim thresholds for this process. Returns whether both were set.

    Both must be set. Setting the trim threshold alone also turns off glibc's dynamic mmap
    threshold, so every allocation over 128 KiB is then mapped fresh: 6× the page faults of the
    defaults (measured). Anywhere but Linux with glibc, this does nothing and returns False.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = mallopt(M_MMAP_THRESHOLD, mmap_bytes) == 1 and mallopt(M_TRIM_THRESHOLD, trim_bytes) == 1
    if not done:
        log.info("the C library refused mallopt: freed memory goes back to the kernel (more page faults)")
    return done
