"""Hostile logs against `python -m mbridge_overlap diagnose` (issues 18 and 15), generated here, no data files.

Classes (CASES has the counts): bytes (binary, NUL bytes, invalid UTF-8, UTF-16, BOMs, empty files, odd line ends),
size (a 200 MB line, 100,000 short lines, a million empty ones, gzip bombs of zeros and of lines, truncated, corrupt
and padded gzip), escapes (CSI, OSC titles, DCS, bidirectional controls, C1 controls, line separators inside logged
messages and in file names, rank prefixes in other digits), cut (messages cut at the end, in their middle by a
carriage return, across the reader's chunks, ranks writing halves of lines into one file, tracebacks that never
end, over-long lines), regex (lines that repeat a message's delimiters without the message, every anchor word at
once, a repeated iteration head: the matcher must stay linear), paths (symbolic link loops, FIFOs, devices, /proc
and /sys files as LOG and inside a folder, 30,000 files, folders without logs, '-' with empty, binary or closed
standard input, unreadable files, logs named like overrides) and output (--output as every verb has it).

Every case runs the CLI as a subprocess from the skill folder (a few at a time) under a 2 GiB address-space limit
and a time limit, and asserts: the exit status (0 nothing overlap-related, 1 a cause, 2 bad input), for bad input
exactly one line on stderr and nothing on stdout, never a traceback, the text output free of raw control,
bidirectional or invisible characters (its bytes checked), the JSON output valid, the peak resident set of the
process under a bound (its own: os.wait4, or its VmHWM read while it ran), and what the case knows about the answer
(the cause, its ranks, the line count).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from hostile_kit import CONTROL, Named, ROOT, cli_env, fifo, registry, run_all, write

# what a text report may not hold beside CONTROL: bidirectional and invisible format characters
INVISIBLE = ("\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
             "\u2066", "\u2067", "\u2068", "\u2069", "\ufeff", "\u061c")
MEMORY_LIMIT = 2 * 2**30  # address space: a blow-up is a MemoryError, not a swap storm
RSS_MB = 160  # peak resident set of one run (the interpreter and the catalog take about 40 MB)

GRAD = "AssertionError: param.grad being None is not safe when overlap_grad_reduce is True"
GRAD_ID = "GRAD_NONE_WITH_OVERLAP_GRAD_REDUCE"
UB = ("AssertionError: CUDA device, driver and/or toolkit version does not support comm+GEMM overlap with CUDA "
      "Multicast. Launch app with UB_SKIPMC=1 to try CUDA IPC instead.")
UB_ID = "UB_NEEDS_MULTICAST"
NOISE = "".join(f" [2026-12-01 12:00:00] iteration {i:8d}/     100 | consumed samples: {i * 8:12d} | elapsed time per "
                f"iteration (ms): {1500 + i % 7:.1f} | learning rate: 3.000000E-04 | grad norm: 0.1 |\n"
                f"node-0:1:2 [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n" for i in range(50))


@dataclass(frozen=True)
class Case(Named):
    cls: str
    name: str
    make: Callable[[Path], list]  # builds the inputs in a fresh folder; returns the arguments after `diagnose`
    status: tuple = (0,)  # the exit statuses allowed
    cause: str | None = None  # a cause the JSON report must hold
    ranks: tuple | None = None  # the ranks its first evidence must name
    says: str = ""  # what the one line on stderr must say (status 2)
    stdin: bytes | None = None  # standard input (None: /dev/null; b"CLOSED": closed)
    seconds: float = 60
    formats: tuple = ("text", "json")
    check: Callable | None = None  # (the JSON report or None, the folder): further assertions

CASES_LIST, add = registry(Case)


def log(name: str, data, folder_name: str = "") -> Callable[[Path], list]:
    """A case input: one file of `data` (bytes, str, or a callable writing the file at the path it is given)."""
    def make(d: Path) -> list:
        path = d / folder_name / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(data):
            data(path)
        else:
            write(path.parent, path.name, data)
        return [d / folder_name if folder_name else path]
    return make


def gz(text: bytes, level: int = 6) -> bytes:
    return gzip.compress(text, level)


# --- bytes --------------------------------------------------------------------------------------------------------

RND = random.Random(18)
BINARY = bytes(RND.getrandbits(8) for _ in range(1 << 20))
add("bytes", "random_binary", log("junk.log", BINARY))
add("bytes", "nul_bytes", log("nul.log", b"\0" * (1 << 20)), status=(2,), says="empty, no log lines to read")  # (fuzzN N2)
add("bytes", "nul_lines_around_a_message", log("rank3.log", b"\0\0\0\n" + NOISE.encode() + GRAD.encode() + b"\n\0\0"),
    status=(1,), cause=GRAD_ID, ranks=("3",))
add("bytes", "nul_inside_a_message", log("rank3.log", GRAD.replace(" is ", "\0is ").encode() + b"\n"), status=(0, 1))
add("bytes", "invalid_utf8_around_a_message", log("rank1.log", b"\xff\xfe\xc3\x28\xe2\x28\xa1 " + GRAD.encode() + b" \xf0\x90\x28\xbc\n"),
    status=(1,), cause=GRAD_ID, ranks=("1",))
add("bytes", "invalid_utf8_inside_a_message", log("rank1.log", GRAD.replace("None", "No\xffne").encode("latin-1") + b"\n"), status=(0, 1))
add("bytes", "latin1_lines_around", log("rank2.log", "café naïve\n".encode("latin-1") + GRAD.encode() + b"\n"), status=(1,), cause=GRAD_ID)
add("bytes", "utf16_with_bom", log("rank0.log", ("\ufeff" + NOISE + GRAD + "\n").encode("utf-16-le")), status=(1,), cause=GRAD_ID)
add("bytes", "utf8_bom", log("x.log", ("\ufeff[rank5]: " + GRAD + "\n").encode()), status=(1,), cause=GRAD_ID)
add("bytes", "empty_file", log("empty.log", b""), status=(2,), says="empty, no log lines to read")  # (fuzzM M7)
add("bytes", "only_newlines", log("nl.log", b"\n" * 100_000), status=(2,), says="empty, no log lines to read")  # (recheck50 R8)
add("bytes", "crlf_line_ends", log("rank4.log", (NOISE + "[rank4]: " + GRAD + "\n").replace("\n", "\r\n").encode()),
    status=(1,), cause=GRAD_ID, ranks=("4",))
add("bytes", "cr_only_line_ends", log("rank4.log", (NOISE + GRAD + "\n").replace("\n", "\r").encode()), status=(0, 1))
add("bytes", "gzip_magic_then_text", log("fake.log", b"\x1f\x8b not gzip at all\n"), status=(2,), says="not a readable gzip file")
add("bytes", "binary_gzip", log("junk.log.gz", gz(BINARY)))
add("bytes", "message_then_binary_tail", log("rank6.log", (GRAD + "\n").encode() + BINARY[:4096]), status=(1,), cause=GRAD_ID)


# --- size ---------------------------------------------------------------------------------------------------------

def _huge_line(path: Path) -> None:
    """A 200 MB line that starts and ends with the message (its middle is left out)."""
    block = b"x" * (1 << 20)
    with open(path, "wb") as fh:
        fh.write(GRAD.encode() + b" ")
        for _ in range(200):
            fh.write(block)
        fh.write(b" " + GRAD.encode() + b"\n")


def _members(path: Path, member: bytes, copies: int, tail: bytes = b"") -> None:
    """A gzip file of `copies` identical members (what `cat a.gz b.gz` makes): a small file that inflates to GBs."""
    with open(path, "wb") as fh:
        for _ in range(copies):
            fh.write(member)
        fh.write(tail)


ZEROS_MEMBER = gz(bytes(1 << 24), 9)  # 16 MiB of NULs in about 16 KB
LINES_MEMBER = gz((b"y" * 4095 + b"\n") * 4096, 9)  # 16 MiB of 4 KiB lines

add("size", "line_of_200_MB", log("rank7.log", _huge_line), status=(1,), cause=GRAD_ID, ranks=("7",), seconds=120,
    formats=("json",), check=lambda d, _f: d["lines"] == 1)
# a text with no cause is read for the settings it names (diagnose/settings.py): a 200 MB line, and 20,000 lines of
# 4,000 word characters each, cost it linear time (its pair pattern backtracked over a word run: 600 s and more)
add("size", "no_cause_line_of_200_MB", log("big.log", lambda p: p.write_bytes(b"overlap_grad_reduce " + b"x" * (200 << 20)
                                                                               + b"\n")), seconds=120, formats=("json",),
    check=lambda d, _f: d["lines"] == 1)
add("size", "no_cause_long_word_runs", log("runs.log", (b"ERROR overlap_grad_reduce " + b"x" * 4000 + b"\n") * 20_000),
    seconds=120, formats=("json",), check=lambda d, _f: d["lines"] == 20_000)
add("size", "100k_short_lines", log("rank0.log", b"a\n" * 100_000 + (GRAD + "\n").encode() + b"b\n" * 100_000),
    status=(1,), cause=GRAD_ID, check=lambda d, _f: d["lines"] == 200_001)
add("size", "million_empty_lines", log("rank0.log", b"\n" * 1_000_000 + b"one line of text\n"), seconds=120, formats=("json",),
    check=lambda d, _f: d["lines"] == 1_000_001)  # (blank lines alone are an empty log: recheck50 R8)
# fuzzH H2: a gzip bomb is refused once past safeio.INFLATION_FLOOR (it cost minutes of CPU); below it, read in full
add("size", "gzip_bomb_of_zeros_1GiB", log("bomb.log.gz", lambda p: _members(p, ZEROS_MEMBER, 64)), status=(2,), says="gzip bomb",
    seconds=120)
add("size", "gzip_bomb_of_lines_1GiB", log("rank2.log.gz", lambda p: _members(p, LINES_MEMBER, 64, gz((GRAD + "\n").encode()))),
    status=(2,), says="gzip bomb", seconds=120)
add("size", "gzip_of_lines_48MiB_below_the_floor", log("rank2.log.gz", lambda p: _members(p, LINES_MEMBER, 3, gz((GRAD + "\n").encode()))),
    status=(1,), cause=GRAD_ID, ranks=("2",), seconds=120, formats=("json",), check=lambda d, _f: d["lines"] == 3 * 4096 + 1)
_TRUNCATED = gz((NOISE * 200 + GRAD + "\n").encode() + (NOISE * 200).encode())
add("size", "truncated_gzip", log("rank1.log.gz", _TRUNCATED[: len(_TRUNCATED) * 2 // 3]), status=(1,), cause=GRAD_ID, ranks=("1",))
add("size", "gzip_cut_in_its_header", log("rank1.log.gz", _TRUNCATED[:6]), status=(2,), says="empty, no log lines to read")
add("size", "gzip_members_with_zero_padding", log("rank1.log.gz", gz(NOISE.encode()) + b"\0" * 4096 + gz((GRAD + "\n").encode()) + b"\0" * 512),
    status=(1,), cause=GRAD_ID)
_CORRUPT = bytearray(gz((NOISE * 50).encode(), 9))
_CORRUPT[-6] ^= 0xFF  # its CRC-32 (a flip inside the deflate data can read as a cut file, which is read as such)
add("size", "corrupt_gzip", log("rank1.log.gz", bytes(_CORRUPT)), status=(2,), says="not a readable gzip file")
# bytes after the last member that start no member: read what the members hold, as gzip -d does, and say so
add("size", "gzip_then_garbage", log("rank1.log.gz", gz((GRAD + "\n").encode()) + b"garbage after the member"), status=(1,),
    cause=GRAD_ID, check=lambda d, _f: d is None or any("no gzip data follow" in n for n in d["notes"]))
add("size", "many_ranks_one_file", log("job.log", "".join(f"[rank{r}]: {GRAD}\n" for r in range(20_000)).encode()), status=(1,),
    cause=GRAD_ID, check=lambda d, _f: _evidence(d, GRAD_ID)["rank_count"] == 20_000)


# --- escapes ------------------------------------------------------------------------------------------------------

ESCAPES = {
    "csi_colours_around": f"[rank0]: \x1b[31;1m{GRAD}\x1b[0m",
    "csi_inside": f"[rank0]: {GRAD.replace('being', chr(27) + '[1mbeing' + chr(27) + '[0m')}",
    "csi_huge_parameter": f"[rank0]: \x1b[{'9' * 5000}m{GRAD}",
    "osc_title_bel": f"\x1b]0;pwned title\x07[rank0]: {GRAD}",
    "osc_title_st": f"[rank0]: {GRAD}\x1b]2;x\x1b\\",
    "osc_hyperlink": f"[rank0]: \x1b]8;;http://evil/\x1b\\{GRAD}\x1b]8;;\x1b\\",
    "dcs": f"[rank0]: \x1bPq#0;2;0;0;0\x1b\\{GRAD}",
    "bidi_after": f"[rank0]: {GRAD} \u202e\u2066evil\u2069\u202c\u200f",
    "bidi_before": f"\u202e[rank0]: {GRAD}",
    "c1_controls": f"[rank0]: {GRAD}\x9b31m\x85\x90x\x9c\x9d0;t\x07",
    "line_separators": f"[rank0]: {GRAD}\u2028\u2029next",
    "zero_width": f"[rank0]: {GRAD}\u200b\ufeff\u200d",
    "backspace_bell_del": f"[rank0]: {GRAD}\b\b\b\x07\x7f\x0b\x0c",
    "terminal_reset": f"\x1bc\x1b[2J\x1b[H[rank0]: {GRAD}",
}
for _name, _line in ESCAPES.items():
    add("escapes", _name, log("rank0.log", (_line + "\n").encode()), status=(1,), cause=GRAD_ID, ranks=("0",))
for _name, _line in {"bidi_inside": GRAD.replace("being", "be\u202eing"), "c1_inside": GRAD.replace("being", "be\x9bing"),
                     "osc_unterminated": f"\x1b]0;title {GRAD}", "nel_inside": GRAD.replace("being", "be\x85ing")}.items():
    add("escapes", _name, log("rank0.log", (_line + "\n").encode()), status=(0, 1))
for _name, _fname in {"name_with_escape": "rank0 \x1b]0;t\x07\x1b[31m.log", "name_with_newline": "rank0\nx.log",
                      "name_with_bidi": "rank0\u202egol.log", "name_not_utf8": b"rank0\xff.log"}.items():
    add("escapes", _name, (lambda fname: lambda d: [_named(d / "logs", fname, (GRAD + "\n").encode())])(_fname),
        status=(1,), cause=GRAD_ID)
for _name, _prefix in {"rank_fullwidth_digits": "[rank\uff13]: ", "rank_arabic_digits": "[rank\u0663]: ",
                       "srun_arabic_digits": "\u0663: ", "torchrun_arabic_digits": "[default\u0663]:"}.items():
    add("escapes", _name, log("x.log", (_prefix + GRAD + "\n").encode()), status=(1,), cause=GRAD_ID,
        check=lambda d, _f: _evidence(d, GRAD_ID)["ranks"] == [])
add("escapes", "rank_leading_zeros", log("x.log", f"[rank003]: {GRAD}\n[rank3]: {GRAD}\n".encode()), status=(1,), cause=GRAD_ID, ranks=("3",))
add("escapes", "frame_path_with_escapes", log("rank0.log", ('[rank0]: Traceback (most recent call last):\n[rank0]:   File "/x/\x1b]0;t\x07/'
                                                          '\u202ey.py", line 99999999999999999999, in \x1b[31mf\n[rank0]:     assert x\n'
                                                          f"[rank0]: {GRAD}\n").encode()), status=(1,), cause=GRAD_ID)


def _named(folder: Path, name, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = os.path.join(os.fsencode(folder), name if isinstance(name, bytes) else os.fsencode(name))
    with open(path, "wb") as fh:
        fh.write(data)
    return folder


# --- cut ----------------------------------------------------------------------------------------------------------

CHUNK = 1 << 20  # the reader's chunk: a message across two of them
add("cut", "message_cut_at_the_end", log("rank4.log", f"[rank4]: {UB[:70]}\n".encode()), status=(1,), cause=UB_ID, ranks=("4",),
    check=lambda d, _f: _evidence(d, UB_ID)["truncated"])
add("cut", "message_cut_too_early", log("rank4.log", f"[rank4]: {UB[:14]}\n".encode()))
add("cut", "message_cut_without_newline", log("rank4.log", f"{NOISE}[rank4]: {UB[:90]}".encode()), status=(1,), cause=UB_ID)
add("cut", "ranks_writing_halves", log("job.log", f"[rank0]: {UB[:50]}[rank1]: {UB[:70]}\n{UB[50:]}\n{UB[70:]}\n".encode()), status=(0, 1))
add("cut", "ranks_interleaved_by_bytes", log("job.log", "".join(a + b for a, b in zip(f"[rank0]: {GRAD}\n", f"[rank1]: {GRAD}\n")).encode()),
    status=(0, 1))
add("cut", "carriage_return_progress", log("rank6.log", f"[rank6]: 10%\r 20%\r{GRAD}\r\n".encode()), status=(1,), cause=GRAD_ID, ranks=("6",))
add("cut", "across_a_chunk", log("rank5.log", b"z" * (CHUNK - 40) + b"\n" + f"[rank5]: {GRAD}\n".encode()), status=(1,), cause=GRAD_ID,
    ranks=("5",), check=lambda d, _f: not _evidence(d, GRAD_ID)["truncated"])
add("cut", "across_a_gzip_chunk", log("rank5.log.gz", gz(b"z" * (CHUNK - 40) + b"\n" + f"[rank5]: {GRAD}\n".encode())), status=(1,),
    cause=GRAD_ID, ranks=("5",))
add("cut", "traceback_that_never_ends", log("rank0.log", ('[rank0]: Traceback (most recent call last):\n'
                                                         '[rank0]:   File "/usr/lib/python3/site-packages/megatron/core/distributed/'
                                                         'param_and_grad_buffer.py", line 1, in start_grad_sync\n' * 5000).encode()))
add("cut", "four_thousand_open_tracebacks", log("job.log", "".join(f'[rank{r}]:   File "/x/y.py", line 1, in f\n' for r in range(10_000)).encode()
                                                + f"[rank0]: {GRAD}\n".encode()), status=(1,), cause=GRAD_ID)
add("cut", "message_in_the_left_out_middle", log("rank0.log", b"x" * (1 << 20) + GRAD.encode() + b"x" * (1 << 20) + b"\n"))
add("cut", "message_at_both_ends_of_a_long_line", log("rank0.log", (GRAD + " " + "y" * (1 << 20) + " " + GRAD + "\n").encode()),
    status=(1,), cause=GRAD_ID)


# --- regex: the matcher stays linear --------------------------------------------------------------------------------

def _catalog():
    sys.path.insert(0, str(ROOT))
    from mbridge_overlap.diagnose import messages

    return messages.load()


def _repeats_without_the_end(source_start: str) -> Callable[[Path], list]:
    """Lines that repeat a message's literal pieces but its last, 64 KB each: the attack on lazy fields."""
    def make(d: Path) -> list:
        cat = _catalog()
        from mbridge_overlap.diagnose import messages

        m = next(m for m in cat._matchers if m.source.startswith(source_start))
        lits = [t for t in m.tokens if not isinstance(t, messages.Group)]
        unit = "".join(lits[:-1])
        line = (unit * (65536 // len(unit) + 1))[:65536]
        cut = (unit * 200)[:60000] + lits[-1][: len(lits[-1]) // 2]
        return [write(d, "rank0.log", "".join(f"{line}\n{cut}\n" for _ in range(20)))]
    return make


for _name, _start in {"shard_layout_assert_9_fields": "Param \\(shape=", "layerwise_layout_log_8_fields": "Layerwise param layout:",
                      "tensor_overlap_6_fields": "Global layout tensors overlap", "fsdp_unit_6_fields": "\\[FSDP_UNIT",
                      "world_size_6_fields": "using world size:"}.items():
    add("regex", _name, _repeats_without_the_end(_start), status=(0, 1), seconds=60)


def _every_anchor(d: Path) -> list:
    words = " ".join(sorted(_catalog()._anchor_words))
    line = ((words + " ") * (65536 // len(words) + 1))[:65536]
    return [write(d, "rank0.log", (line + "\n") * 50)]


add("regex", "every_anchor_word_50_lines", _every_anchor, status=(0, 1), seconds=90, formats=("json",))
add("regex", "iteration_head_repeated", log("rank0.log", ("elapsed time per iteration (ms): 1 " + "iteration 1/1 |" * 16000 + "\n") * 20),
    formats=("json",))
add("regex", "frame_quotes_repeated", log("rank0.log", ('File "' + 'x", line 1, in f File "' * 8000 + "\n") * 20), formats=("json",))
add("regex", "ansi_starts_repeated", log("rank0.log", ("\x1bPx\x1b]0;" * 20000 + GRAD + "\n") * 5), status=(0, 1), formats=("json",))
BRIDGE_LOG = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "baseline_no_gpu.log"
HOSTILE_VALUES = ["1+" * 4000 + "1", "-" * 8000 + "1", "(" * 3000 + ")" * 3000, "{1: " * 1000 + "1" + "}" * 1000, "1" * 8000,
                  "0x" + "f" * 8000, "1e99999", "x: " * 60000, "\x1b]0;t\x07\u202e", "'" + "\\" * 5000]


def _summary_with(values: list) -> Callable[[Path], list]:
    """Bridge's configuration summary (a real 0.6.2 log) with hostile values in its [ddp] section."""
    def make(d: Path) -> list:
        lines = BRIDGE_LOG.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("[ddp] Non-default values")) + 1
        lines[at:at] = [f"  field_{i}: {v}" for i, v in enumerate(values)]
        return [write(d, "rank0.log", "\n".join(lines) + "\n")]
    return make


add("regex", "summary_with_hostile_values", _summary_with(HOSTILE_VALUES), status=(0, 1))
add("regex", "summary_titles_repeated", log("rank0.log", ("Configuration Summary (Non-Default Values vs Megatron Core)\n" + "=" * 70 + "\n"
                                                        + "[ddp] Non-default values (vs Mcore DistributedDataParallelConfig):\n"
                                                        + "  x: 1\n" * 200) * 500), status=(0, 1), formats=("json",))


# --- paths --------------------------------------------------------------------------------------------------------

def _loop(d: Path) -> list:
    (d / "a.log").symlink_to(d / "b.log")
    (d / "b.log").symlink_to(d / "a.log")
    return [d / "a.log"]


def _folder_with(*entries) -> Callable[[Path], list]:
    """A folder of rank logs beside hostile entries: each (name, maker(path))."""
    def make(d: Path) -> list:
        logs = d / "logs"
        write(logs, "rank0.log", f"{NOISE}[rank0]: {GRAD}\n")
        for name, maker in entries:
            maker(logs / name)
        return [logs]
    return make


def _many_files(n: int, log_names: bool) -> Callable[[Path], list]:
    def make(d: Path) -> list:
        logs = d / "logs"
        logs.mkdir()
        for i in range(n):
            (logs / (f"rank{i}.log" if log_names else f"shard{i}.bin")).write_bytes(b"x\n")
        write(logs, "rank99999.log", f"[rank0]: {GRAD}\n")
        return [logs]
    return make


def _deep(d: Path) -> list:
    folder = d / "logs"
    for i in range(34):  # beyond reader.MAX_DEPTH (32); a log 12 folders down is read (round three)
        folder = folder / f"l{i}"
    write(folder, "rank0.log", GRAD + "\n")
    return [d / "logs"]


def _unreadable(d: Path) -> list:
    path = write(d, "rank0.log", GRAD + "\n")
    path.chmod(0)
    return [path]


def _unreadable_folder(d: Path) -> list:
    write(d / "logs" / "closed", "rank1.log", GRAD + "\n")
    write(d / "logs", "rank0.log", GRAD + "\n")
    (d / "logs" / "closed").chmod(0)
    return [d / "logs"]


def _override_named(name: str, folder: bool = False) -> Callable[[Path], list]:
    def make(d: Path) -> list:
        if folder:
            write(d / name, "rank0.log", GRAD + "\n")
        else:
            write(d, name, GRAD + "\n")
        return [name]  # relative: the command runs in d
    return make


ROOT_USER = os.geteuid() == 0
add("paths", "symlink_loop", _loop, status=(2,), says="symbolic links")
add("paths", "symlink_loop_in_a_folder", _folder_with(("a.log", lambda p: p.symlink_to(p.parent / "b.log")),
                                                      ("b.log", lambda p: p.symlink_to(p.parent / "a.log"))), status=(1,), cause=GRAD_ID)
add("paths", "folder_link_to_itself", _folder_with(("self", lambda p: p.symlink_to(p.parent))), status=(1,), cause=GRAD_ID,
    check=lambda d, _f: len(d["sources"]) == 1)
add("paths", "fifo", lambda d: [fifo(d, "rank0.log")], status=(2,), says="FIFO")
add("paths", "fifo_in_a_folder", _folder_with(("rank1.log", lambda p: os.mkfifo(p))), status=(1,), cause=GRAD_ID)
add("paths", "only_fifos", lambda d: [fifo(d / "logs", "rank0.log").parent], status=(2,), says="no log files")
add("paths", "socket_in_a_folder", _folder_with(("rank1.log", lambda p: _socket(p))), status=(1,), cause=GRAD_ID)
for _dev in ("/dev/zero", "/dev/null", "/dev/urandom", "/dev/tty"):
    if os.path.exists(_dev):
        add("paths", f"device_{_dev[5:]}", lambda d, dev=_dev: [dev], status=(2,), says="not a regular file")
add("paths", "device_link_in_a_folder", _folder_with(("rank1.log", lambda p: p.symlink_to("/dev/zero"))), status=(1,), cause=GRAD_ID)
for _proc in ("/proc/kmsg", "/proc/self/status", "/proc/self/environ", "/sys/kernel/mm/transparent_hugepage/enabled"):
    if os.path.exists(_proc):
        add("paths", f"pseudo_{_proc.strip('/').replace('/', '_')}", lambda d, p=_proc: [p], status=(2,), says="may never end")
add("paths", "the_proc_folder", lambda d: ["/proc/self/fdinfo"], status=(2,))
add("paths", "30000_files_not_logs", _many_files(30_000, False), status=(1,), cause=GRAD_ID, seconds=120, formats=("json",))
add("paths", "30000_log_files", _many_files(30_000, True), status=(2,), says="log files", seconds=120, formats=("text",))
add("paths", "folder_without_logs", lambda d: [write(d / "logs", "model.bin", b"\0" * 10).parent], status=(2,), says="no log files")
add("paths", "empty_folder", lambda d: [(d / "logs").mkdir() or d / "logs"], status=(2,), says="no log files")
add("paths", "logs_deeper_than_read", _deep, status=(2,), says="levels down were not read")
add("paths", "missing", lambda d: [d / "nope.log"], status=(2,), says="no such file")
add("paths", "empty_argument", lambda d: [""], status=(2,), says="empty")
add("paths", "no_argument", lambda d: [], status=(2,), says="name a log file")
add("paths", "stdin_empty", lambda d: ["-"], stdin=b"", status=(2,), says="empty, no log lines to read")  # (fuzzM M7)
add("paths", "stdin_binary", lambda d: ["-"], stdin=BINARY[:65536])
add("paths", "stdin_message", lambda d: ["-"], stdin=f"[rank2]: {GRAD}\n".encode(), status=(1,), cause=GRAD_ID, ranks=("2",))
add("paths", "stdin_twice", lambda d: ["-", "-"], stdin=f"[rank2]: {GRAD}\n".encode(), status=(1,), cause=GRAD_ID)
add("paths", "stdin_closed", lambda d: ["-"], stdin=b"CLOSED", status=(2,), says="standard input is closed")
add("paths", "stdin_gzip", lambda d: ["-"], stdin=gz(f"[rank2]: {GRAD}\n".encode()), status=(1,), cause=GRAD_ID)
if not ROOT_USER:  # root reads a file of mode 000
    add("paths", "unreadable_file", _unreadable, status=(2,), says="permission denied")
    add("paths", "unreadable_subfolder", _unreadable_folder, status=(2,), says="permission denied")
add("paths", "log_named_like_an_override", _override_named("model.tensor_model_parallel_size=2"), status=(1,), cause=GRAD_ID)
add("paths", "folder_named_like_an_override", _override_named("model.x=1", folder=True), status=(1,), cause=GRAD_ID)
add("paths", "override_like_name_missing", lambda d: ["model.nothere=1"], status=(2,), says="name a log file")
add("paths", "compare_one_log", lambda d: ["--compare", write(d, "a.log", GRAD + "\n")], status=(2,), says="exactly two logs")


def _socket(path: Path) -> None:
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))


# --- output -------------------------------------------------------------------------------------------------------

def _out(target: Callable[[Path], object], *extra) -> Callable[[Path], list]:
    def make(d: Path) -> list:
        return [write(d, "rank0.log", f"[rank0]: {GRAD}\n"), "--output", str(target(d)), *extra]
    return make


def _wrote(name: str, old: str | None = None):
    def check(_d, folder: Path) -> None:
        text = (folder / name).read_text()
        assert text.startswith("diagnose:") or text.startswith("{"), text[:200]
        if old is not None:
            assert old not in text
    return check


add("output", "new_file", _out(lambda d: d / "report.txt"), status=(1,), check=_wrote("report.txt"), formats=("text",))
OLD = "an old report 5f1c\n"
add("output", "existing_without_force", _out(lambda d: write(d, "report.txt", OLD)), status=(2,), says="--force", formats=("text",))
add("output", "existing_with_force", _out(lambda d: write(d, "report.txt", OLD), "--force"), status=(1,),
    check=_wrote("report.txt", OLD), formats=("text",))
add("output", "the_log_itself_with_force", lambda d: [write(d, "rank0.log", f"[rank0]: {GRAD}\n"), "--output", d / "rank0.log", "--force"],
    status=(1,), check=_wrote("rank0.log"), formats=("text",))
add("output", "dev_stdout", _out(lambda d: "/dev/stdout", "--force"), status=(2,), formats=("text",))
add("output", "dev_null", _out(lambda d: "/dev/null", "--force"), status=(2,), formats=("text",))
add("output", "fifo", _out(lambda d: fifo(d, "out"), "--force"), status=(2,), says="FIFO", formats=("text",))
add("output", "directory", _out(lambda d: d, "--force"), status=(2,), says="directory", formats=("text",))
add("output", "missing_folder", _out(lambda d: d / "no" / "such" / "report.txt"), status=(2,), formats=("text",))
add("output", "empty", _out(lambda d: ""), status=(2,), says="empty", formats=("text",))
add("output", "symlink_to_dev_null", _out(lambda d: ((d / "l").symlink_to("/dev/null"), d / "l")[1], "--force"), status=(2,),
    formats=("text",))
add("output", "proc_self_fd", _out(lambda d: "/proc/self/fd/1", "--force"), status=(2,), formats=("text",))


CASES: dict[str, int] = {}
for _c in CASES_LIST:
    CASES[_c.cls] = CASES.get(_c.cls, 0) + 1


# --- running them -------------------------------------------------------------------------------------------------

def _evidence(d: dict, finding: str) -> dict:
    cause = next(c for c in d["causes"] if c["id"] == finding)
    return cause["evidence"][0]


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(case: Case, folder: Path, fmt: str) -> dict:
    """One run: exit status, stdout, stderr, seconds and peak RSS (of this child alone)."""
    args = case.make(folder) if fmt == case.formats[0] else _ARGS[(case.id, "args")]
    _ARGS[(case.id, "args")] = args
    argv = [sys.executable, "-m", "mbridge_overlap", "diagnose", *[a if isinstance(a, bytes) else str(a) for a in args],
            "--format", fmt]
    env = cli_env(PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        closed = case.stdin == b"CLOSED"
        stdin = subprocess.PIPE if case.stdin is not None and not closed else subprocess.DEVNULL
        t0, parent_kb = time.monotonic(), _status_kb(os.getpid(), b"VmRSS:")
        proc = subprocess.Popen(argv, cwd=folder, stdin=stdin, stdout=out, stderr=err, env=env,
                                preexec_fn=(lambda: (_limit(), os.close(0))) if closed else _limit)
        if stdin == subprocess.PIPE:
            try:
                proc.stdin.write(case.stdin)
            except BrokenPipeError:
                pass
            proc.stdin.close()
        usage, status, timed_out, peak = None, None, False, 0
        while True:
            peak = max(peak, _status_kb(proc.pid, b"VmHWM:"))
            pid, wstatus, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(wstatus)
                break
            if time.monotonic() - t0 > case.seconds:
                proc.kill()
                _, wstatus, usage = os.wait4(proc.pid, 0)
                status, timed_out = None, True
                break
            time.sleep(0.02)
        proc.returncode = status  # reaped here: Popen must not wait for it
        seconds = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        return {"status": status, "stdout": out.read(), "stderr": err.read(), "seconds": seconds,
                "rss_mb": _peak_mb(peak, usage.ru_maxrss, parent_kb), "timed_out": timed_out}


def _status_kb(pid: int, field: bytes) -> int:
    """A field of /proc/PID/status in kB (VmHWM: the peak resident set of the image it exec'd, Popen having
    returned only after the exec; VmRSS: now); 0 once the process has ended."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _peak_mb(sampled_kb: int, maxrss_kb: int, parent_kb: int) -> float:
    """The child's own peak. wait4's ru_maxrss is exact where it is over this process's resident set at the fork
    (Linux carries the forked copy's over execve): a test process grown past the bound by earlier tests (in-process
    trace analyses) would fail every case. Else the child's own high-water mark, read at every poll while it ran."""
    if maxrss_kb > parent_kb:
        return maxrss_kb / 1024
    return sampled_kb / 1024


_ARGS: dict = {}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    base = tmp_path_factory.mktemp("diagnose-hostile")

    def both(case: Case, folder: Path) -> dict:
        return {fmt: _run(case, folder, fmt) for fmt in case.formats}

    results = run_all(base, CASES_LIST, both, workers=2 if (os.cpu_count() or 1) <= 2 else 4)
    yield results
    for _, folder in results.values():  # unreadable folders and files back to removable
        for root, dirs, _files in os.walk(folder):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("case", CASES_LIST, ids=lambda c: c.id)
def test_diagnose_hostile(case, ran):
    results, folder = ran[case.id]
    for fmt, r in results.items():
        where = f"{case.id} --format {fmt}"
        assert not r["timed_out"], f"{where}: over {case.seconds} s"
        err = r["stderr"].decode("utf-8", "replace")
        assert "Traceback" not in err and "MemoryError" not in err, f"{where}: {err[-2000:]}"
        assert r["status"] in case.status, f"{where}: exit {r['status']}, stderr {err[-500:]!r}, stdout {r['stdout'][-300:]!r}"
        assert r["rss_mb"] < RSS_MB, f"{where}: peak RSS {r['rss_mb']:.0f} MB"
        assert not CONTROL.search(err.replace("\n", "")) and not any(c in err for c in INVISIBLE), f"{where}: {err!r}"
        if r["status"] == 2:
            assert err.endswith("\n") and err.count("\n") == 1 and r["stdout"] == b"", f"{where}: {err!r} {r['stdout'][:200]!r}"
            assert case.says.lower() in err.lower(), f"{where}: {err!r}"
            continue
        out = r["stdout"].decode("utf-8")  # the report is UTF-8 whatever the log held
        if fmt == "text":
            if "--output" not in map(str, _ARGS[(case.id, "args")]):
                assert out.startswith("diagnose:"), out[:300]
            assert not CONTROL.search(out.replace("\n", "")), f"{where}: {CONTROL.findall(out.replace(chr(10), ''))[:10]}"
            assert not any(c in out for c in INVISIBLE), f"{where}: {[c for c in INVISIBLE if c in out]}"
            continue
        d = json.loads(out)
        assert d["found"] == (r["status"] == 1), where
        if case.cause:
            assert case.cause in {c["id"] for c in d["causes"]}, (where, [c["id"] for c in d["causes"]])
            if case.ranks is not None:
                assert _evidence(d, case.cause)["ranks"] == list(case.ranks), (where, _evidence(d, case.cause)["ranks"])
        if case.check:
            case.check(d, folder)
    if case.check and "json" not in results:
        case.check(None, folder)


def test_every_class_has_cases():
    assert set(CASES) == {"bytes", "size", "escapes", "cut", "regex", "paths", "output"}, CASES
    print("diagnose hostile cases per class:", CASES, "total", sum(CASES.values()))
