"""A kind of collective of one dimension as the budget costs it (Item), and the bytes an element its messages carry."""

from __future__ import annotations

from dataclasses import dataclass


ACT_BYTES = 2  # BF16: P2P tensors, CP's keys and values, EP's tokens, TP's reduce-scatters and all-reduces


# TP all-gathers move what the GEMM reads: Transformer Engine quantizes the input (and the output gradient) first and
# gathers the quantized data (pytorch/distributed.py gather_along_first_dim; userbuffers' all-gather buffers likewise).
# FP8's scales are under 3 % of it (one per tensor, or per 32 values in MXFP8); NVFP4: 4 bits and an FP8 scale per 16.
GATHER_BYTES = {"bf16": 2, "fp8": 1, "fp4": 0.5625}


@dataclass
class Item:
    """A kind of collective of one dimension: one message's size, how many per iteration, the link, its time."""

    dimension: str
    collective: str
    what: str
    bytes: int
    count: int
    group: int
    link: str
    seconds: float  # all of them, per iteration
    hidden: float  # of that, hidden behind compute with the settings as given
    setting: str | None  # the overlap setting that hides it (None: always overlapped by design, or never)
    last: float = 0.0  # of `seconds`, the part no overlap can hide (the last gradient bucket: the backward has ended)
    last_bytes: int = 0  # that last bucket's message
    bytes_vary: bool = False  # the messages differ in size (DP's buckets): `bytes` is the largest
    first_chunk: bool = False  # `last` is model chunk 0's whole reduce or gather (the interleaved schedule's)

    def to_dict(self) -> dict:
        return {"dimension": self.dimension, "collective": self.collective, "what": self.what, "bytes": self.bytes,
                "count": self.count, "group": self.group, "link": self.link, "ms": ms(self.seconds),
                "hidden_ms": ms(self.hidden), "exposed_ms": ms(self.seconds - self.hidden), "setting": self.setting,
                **({"bytes_vary": True} if self.bytes_vary else {})}


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)

