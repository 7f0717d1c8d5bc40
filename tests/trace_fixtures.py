"""Synthetic PyTorch profiler (Kineto) traces with known answers, built in code.

A TraceBuilder records what a Kineto trace holds for one rank: ProfilerStep annotations, CPU launch records
(cuda_runtime) and the GPU kernels they launch (linked by correlation), collective records (record_param_comms)
and distributedInfo. write() lays it out as Kineto does ("},\\n  {" between events) or as compact JSON.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TP_DESC = "TENSOR_MODEL_PARALLEL_GROUP"
DP_DESC = "DATA_PARALLEL_GROUP"


class TraceBuilder:
    def __init__(self, rank: int = 0, world_size: int = 2, pg_config: list | None = None, distributed: bool = True):
        self.meta: dict = {"schemaVersion": 1}
        if distributed:
            info = {"backend": "nccl", "rank": rank, "world_size": world_size}
            if pg_config is not None:
                info["pg_config"] = pg_config
            self.meta["distributedInfo"] = info
        self.events: list[dict] = []
        self._next = 1000
        self._correlation = 0

    def _id(self) -> int:
        self._next += 1
        return self._next

    def step(self, number: int, start, end) -> "TraceBuilder":
        self.events.append({
            "ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1,
            "ts": start, "dur": end - start, "args": {"External id": self._id()},
        })
        return self

    def cpu_op(self, name: str, start, dur, **args) -> "TraceBuilder":
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": start, "dur": dur,
                            "args": {"External id": self._id(), **args}})
        return self

    def kernel(self, name: str, start, end, stream: int = 7, launch=None, cat: str = "kernel",
               record: dict | None = None, orphan: bool = False, **args) -> "TraceBuilder":
        """A GPU event on `stream` over [start, end), launched at `launch` (default: start). `record` adds a
        record_param_comms CPU op with these args, linked by External id; `args` go on the kernel itself.
        An orphan has no launch record (no cuda_runtime event with its correlation)."""
        self._correlation += 1  # Kineto counts correlation ids apart from External ids
        corr, ext = self._correlation, self._id()
        launch = start if launch is None else launch
        if not orphan:
            self.events.append({
                "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                "ts": launch, "dur": 1, "args": {"External id": ext, "cbid": 211, "correlation": corr},
            })
        if record is not None:
            self.events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                                "ts": launch, "dur": 1, "args": {"External id": ext, **record}})
        self.events.append({
            "ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start, "dur": end - start,
            "args": {"External id": ext, "device": 0, "stream": stream, "correlation": corr, "grid": [1, 1, 1],
                     **args},
        })
        self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": start, "cat": "ac2g",
                            "name": "ac2g", "bp": "e"})
        return self

    def noise(self, count: int = 3) -> "TraceBuilder":
        """Events the analysis must ignore: CPU ops, flows, instants, metadata, the Trace span."""
        for i in range(count):
            self.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": i,
                                "dur": 1, "args": {"External id": self._id(), "Input Dims": [[2, 2], [2, 2]]}})
            self.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                                "ts": i, "s": "t", "args": {"Bytes": 8}})
        self.events.append({"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "gpu"}})
        self.events.append({"ph": "X", "cat": "Trace", "ts": 0, "dur": 10 ** 9, "pid": "Spans", "tid": "x",
                            "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})
        return self

    def text(self, layout: str = "kineto") -> str:
        return relayout({**self.meta, "traceEvents": self.events, "traceName": "synthetic"}, layout)

    def write(self, path: Path, layout: str = "kineto") -> Path:
        data = self.text(layout).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path


LAYOUTS = ("kineto", "compact", "dumps", "indent4", "tabs", "spaced", "events_first", "array")


def kineto_layout(document: dict) -> str:
    """As Kineto writes a trace: the keys before traceEvents one a line, then each event indented, "},\n  {"
    between events, then the keys after it."""
    keys = list(document)
    where = keys.index("traceEvents")
    head = "".join(f'  "{k}": {json.dumps(document[k])},\n' for k in keys[:where])
    tail = "".join(f',\n  "{k}": {json.dumps(document[k])}' for k in keys[where + 1:])
    body = ",\n".join("  " + json.dumps(e, indent=2).replace("\n", "\n  ") for e in document["traceEvents"])
    return "{\n" + head + '  "traceEvents": [\n' + body + "\n  ]" + tail + "\n}\n"


def relayout(document: dict, layout: str) -> str:
    """A parsed trace saved again as another tool might: compact, json.dumps' default, any indent, extra blanks,
    traceEvents before the other keys, or a bare event array (which drops the other keys)."""
    if layout == "kineto":
        return kineto_layout(document)
    if layout == "compact":
        return json.dumps(document, separators=(",", ":"))
    if layout == "dumps":
        return json.dumps(document)
    if layout == "indent4":
        return json.dumps(document, indent=4)
    if layout == "tabs":
        return json.dumps(document, indent="\t", ensure_ascii=False)
    if layout == "spaced":
        return "\r\n " + json.dumps(document, indent=1, separators=(" ,\n\n ", " :\t")) + " \n\n"
    if layout == "events_first":
        return json.dumps({"traceEvents": document["traceEvents"],
                           **{k: v for k, v in document.items() if k != "traceEvents"}})
    if layout == "array":
        return json.dumps(document["traceEvents"])
    raise ValueError(layout)


def nccl(op: str = "AllReduce") -> str:
    return f"ncclDevKernel_{op}_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def overlap_case() -> TraceBuilder:
    """Nested and overlapping kernels on several streams, with known answers.

    compute: stream 7 [0,100) and [100,150), stream 8 [20,40) (nested) and [300,310)  -> merged [0,150) + [300,310)
    comm:    stream 20 [50,120), stream 21 [110,200) (overlapping)                    -> merged [50,200) = 150
    overlapped = [50,150) = 100, exposed = 50, compute = 160, overlap 66.67 %
    memory [150,300) and "other" kernels count as neither.
    """
    b = TraceBuilder()
    b.kernel("volta_sgemm_128x64_nn", 0, 100, stream=7)
    b.kernel("elementwise_kernel", 100, 150, stream=7)
    b.kernel("my_unknown_kernel<float>", 20, 40, stream=8)
    b.kernel("void fused_adam_kernel", 300, 310, stream=8)
    b.kernel(nccl("AllReduce"), 50, 120, stream=20)
    b.kernel(nccl("AllGather"), 110, 200, stream=21)
    b.kernel("Memcpy DtoD (Device -> Device)", 150, 300, stream=7, cat="gpu_memcpy")
    b.kernel("Memset (Device)", 150, 300, stream=7, cat="gpu_memset")
    b.kernel("cudaStreamSync_like_kernel", 150, 300, stream=9)
    return b.noise()


def real_traces() -> list[Path]:
    """The shared real traces (HTA's public test data, kept outside the repository): $MBRIDGE_SKILL_TRACES, else
    <repo>/../shared/data/traces; [] where there are none."""
    root = Path(os.environ.get("MBRIDGE_SKILL_TRACES", REPO.parent / "shared" / "data" / "traces"))
    return sorted(root.glob("*.json.gz")) + sorted(root.glob("*.json")) if root.is_dir() else []
