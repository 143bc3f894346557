"""Where a stripped Go program (the Debian ``nats-server``) spends its CPU: ``perf record`` its
processes, then name the sampled addresses from the binary's ``.gopclntab`` (Go keeps its function
table even when the ELF symbols are stripped; ``perf report`` alone shows bare addresses).

Used by ``bench_cluster_ceiling.py --perf``. Needs ``perf`` and ``objdump``; the table layout is
Go 1.18-1.19's (magic 0xfffffff0; nats-server 2.9.10 is built with Go 1.19): anything else is
refused, not misread.
"""

from __future__ import annotations

import bisect
import re
import struct
import subprocess
from collections import Counter
from pathlib import Path

GO118_MAGIC = 0xFFFFFFF0


class GoSymbols:
    """Function names of a Go binary by address (file offset as ``perf script`` prints it for a
    non-PIE binary, or virtual address)."""

    def __init__(self, binary: str | Path):
        sections = subprocess.run(["objdump", "-h", str(binary)], capture_output=True, text=True, check=True).stdout
        found = {m[1]: (int(m[2], 16), int(m[3], 16), int(m[4], 16)) for m in re.finditer(
            r"^\s*\d+\s+(\.\w+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", sections, re.M)}
        if ".gopclntab" not in found or ".text" not in found:
            raise ValueError(f"{binary}: no .gopclntab or .text section (not a Go binary?)")
        size, _, offset = found[".gopclntab"]
        _, text_vma, text_offset = found[".text"]
        self.load_bias = text_vma - text_offset  # perf script's addresses are file offsets
        with open(binary, "rb") as fh:
            fh.seek(offset)
            table = fh.read(size)
        magic, = struct.unpack_from("<I", table, 0)
        if magic != GO118_MAGIC or table[7] != 8:
            raise ValueError(f"{binary}: .gopclntab magic {magic:#x}, pointer size {table[7]}: "
                             "not Go 1.18-1.19 on 64 bits")
        nfunc, _, text_start, funcnames, _, _, _, functab = struct.unpack_from("<8Q", table, 8)
        entries = []
        for i in range(nfunc):
            entry, func = struct.unpack_from("<II", table, functab + 8 * i)
            _, name_offset = struct.unpack_from("<Ii", table, functab + func)
            start = funcnames + name_offset
            entries.append((text_start + entry, table[start:table.index(b"\0", start)].decode()))
        entries.sort()
        self.addresses = [a for a, _ in entries]
        self.names = [n for _, n in entries]

    def name(self, address: int) -> str:
        i = bisect.bisect_right(self.addresses, address) - 1
        return self.names[i] if i >= 0 else hex(address)


def top_functions(perf_data: Path, binary: str | Path, count: int = 25) -> tuple[int, list, list]:
    """(samples, [(function, share)] by self time, [(function, share)] by inclusive time) of a
    ``perf record -g`` file; kernel frames keep perf's names."""
    symbols = GoSymbols(binary)
    script = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "ip,sym"], capture_output=True,
                            text=True, check=True).stdout
    own, inside, total = Counter(), Counter(), 0
    for sample in script.split("\n\n"):
        stack = []
        for line in sample.strip().splitlines():
            address, _, name = line.strip().partition(" ")
            if name.startswith("[unknown]"):  # the Go binary's frames: perf cannot name them
                name = symbols.name(int(address, 16) + symbols.load_bias)
            stack.append(name)
        if stack:
            total += 1
            own[stack[0]] += 1
            inside.update(set(stack))
    share = lambda c: [(f, n / total) for f, n in c.most_common(count)]  # noqa: E731
    return total, share(own), share(inside)
