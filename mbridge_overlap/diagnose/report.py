"""From a scanned log to the diagnosis: each cause as a finding of the registry, with the logged evidence, linked to
the config analysis where the config is known (given, or printed by Bridge at start-up).

A cause is a finding the logged messages are (the registry's `logged` selectors), or OVERLAP_PATH_ERROR for an error
on the overlap path that no record names. Where the config is known, the analysis of it says whether it predicted
the cause (and then its message and proven fix are the answer), whether it predicts it once the machine facts the
log shows are given (a finding's `shows`), or that it missed it: a gap in the rules to report.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from dataclasses import dataclass, field, replace

from .. import findings
from ..contract import SCHEMA_VERSION
from ..findings import Finding, shell
from ..values import fmt
from . import causes, frames, groups as pg, messages, terms
from .scan import NCCL_ON_PATH, NONE_GROUP, UNEXPLAINED, Group, Scan

SLOWER = 1.03  # a median iteration time more than 3% longer is a drop


def _declare() -> None:
    """diagnose raises the findings whose examples are logs: they are known from a log only."""
    from ..findings.rules import declare

    declare(__name__, [fid for fid, rec in findings.records().items() if rec["example"]["verb"].startswith("diagnose")])


_declare()


def _other_release_wording(cause, release) -> str | None:
    """Where every line of a cause is another release's wording, which the analysed release's packages do not print:
    the run used that release, whose check this analysis (of the release asked) need not have."""
    said = [g.entry.releases for g in cause.groups]
    if not said or not all(said):
        return None
    ours = {f"megatron-core {release.megatron_core}", f"transformer-engine {release.transformer_engine}",
            f"megatron-bridge {release.version}"}
    if any(ours & set(r) for r in said):
        return None
    first, last = said[0][0], said[0][-1]
    return (f"the log's wording is {first}" + (f" to {last.rsplit(' ', 1)[-1]}" if last != first else "")
            + f"'s, not that of Megatron-Bridge {release.version}'s packages (megatron-core {release.megatron_core}): "
            "the run used another release, whose check the analysis of this one need not predict (pass --bridge-version "
            "for the release the run used, where this skill has it)")


@dataclass
class Cause:
    finding: Finding
    groups: list  # the Groups that show it
    overlap_related: bool
    predicted: bool | None = None  # None: no config analysed, or one that cannot tell
    how: str = ""  # how the analysis relates to it
    title: str | None = None  # where the log says less than the record's title (unnamed_group); None: the record's

    def to_dict(self) -> dict:
        rec = findings.record(self.finding.id)
        return {**self.finding.to_dict(), "title": self.title or rec["title"], "overlap_related": self.overlap_related,
                "predicted": self.predicted, "analysis": self.how, "evidence": [evidence(g) for g in self.groups]}


@dataclass
class Diagnosis:
    catalog: messages.Catalog
    scans: list  # (label, Scan)
    causes: list = field(default_factory=list)
    messages: list = field(default_factory=list)  # overlap-path Groups no cause claims
    other: list = field(default_factory=list)  # error Groups off the overlap path
    config: dict = field(default_factory=dict)  # where the config came from, what it lacks, the analysis's findings
    facts: dict = field(default_factory=dict)
    compare: dict | None = None
    notes: list = field(default_factory=list)
    settings_named: dict | None = None  # the settings the text names, never a cause (settings.py)

    @property
    def found(self) -> bool:
        """An overlap-related cause (an error or a warning): exit status 1."""
        return any(c.overlap_related and c.finding.severity in ("error", "warning") for c in self.causes)

    def to_dict(self) -> dict:
        sources = {}
        for _label, scan in self.scans:
            for name, s in scan.sources.items():
                sources[name] = {"lines": s["lines"], "ranks": rank_list(s["ranks"])}
        return {
            "schema_version": SCHEMA_VERSION,
            "bridge_version": self.catalog.requested or self.catalog.version,
            "catalog": {"release": self.catalog.version, "messages": self.catalog.own_count,
                        "other_wordings": len(self.catalog.entries) - self.catalog.own_count},
            "sources": [{"path": k, **v} for k, v in sources.items()],
            "lines": sum(scan.lines for _l, scan in self.scans),
            "found": self.found,
            "causes": [c.to_dict() for c in self.causes],
            "messages": [{**evidence(g), "severity": g.entry.severity, "topic": g.entry.topic} for g in self.messages],
            "other": [{**evidence(g), "severity": g.entry.severity, "topic": g.entry.topic} for g in self.other],
            "config": self.config,
            "facts": self.facts,
            "compare": self.compare,
            "notes": list(self.notes),
            **({"settings_named": self.settings_named} if self.settings_named else {}),
        }


def evidence(g: Group) -> dict:
    e = g.entry
    out = {"message_id": e.id, "package": e.package, "package_version": e.package_version, "file": e.file,
           "function": e.function, "line": e.line, "logged": g.text.strip(), "truncated": g.truncated, "count": g.count,
           "ranks": rank_list(g.ranks), "rank_count": len(g.ranks) + g.more_ranks,
           "first_seen": {"source": g.source, "line": g.number}}
    if g.frame:
        out["frame"] = {"path": g.frame[0], "line": g.frame[1], "function": g.frame[2]}
    if e.condition and e.origin == "traceback":  # the fields the overlap-path code of the frame reads
        out["reads"] = e.condition.split()
    elif e.condition:
        out["condition"] = e.condition
    if e.releases:
        out["wording_of"] = list(e.releases)
    if (origin := printed_by(g)) is not None:
        out["printed_by"] = origin
    if g.elsewhere:
        out["also_raised"] = [dict(zip(("package", "package_version", "file", "function", "line"), x)) for x in g.elsewhere]
    if e.id in pg.SIZED and (n := pg.size(g.text)):
        out["group_ranks"] = n
    if g.approximate is not None:
        out["approximate"] = g.approximate
        out["catalog_text"] = e.template
    return out


_NEMO_LOGGER = re.compile(r"\[NeMo [A-Z] \d{4}-\d\d-\d\d [\d:]+ ([\w.]{1,120}):(\d{1,7})\]")


def printed_by(g: Group) -> str | None:
    """Where the line itself came from, where that is not the catalog entry's file: the traceback frame it ends, or
    NeMo's logger prefix (its module and line). None where the log does not say or says the same file."""
    file = g.entry.file
    if not file:
        return None
    if g.frame and g.frame[0] and g.frame[0].rsplit("/", 1)[-1] != file.rsplit("/", 1)[-1]:
        return f"{g.frame[0]}:{g.frame[1]} {g.frame[2] or ''}".rstrip()
    m = _NEMO_LOGGER.search(g.text)
    if m and m[1].rsplit(".", 1)[-1] != file.rsplit("/", 1)[-1].removesuffix(".py"):
        return f"{m[1]}:{m[2]} (NeMo's logger)"
    return None


def rank_list(ranks) -> list:
    """Global ranks in numeric order, then local ranks ("local 3"), then anything else."""
    def key(r):
        if r.isdigit():
            return (0, int(r), r)
        if r.startswith("local ") and r[6:].isdigit():
            return (1, int(r[6:]), r)
        return (2, 0, r)

    return sorted(ranks, key=key)


# -- causes -----------------------------------------------------------------------------------------------------------


def classify(diag: Diagnosis) -> None:
    """Each group to a cause (its linked findings), an overlap-path message, another failure, or nothing."""
    by_id: dict = {}
    for _label, scan in diag.scans:
        deferred = _watchdog_pairs(scan)
        for g in scan.groups.values():
            fids = causes.links(diag.catalog, g.entry, described_text(g)) if g.tag else g.findings
            if fids and g not in deferred:
                for fid in fids:
                    by_id.setdefault(fid, []).append(g)
            elif causes.overlap_related(g.entry) and g.entry.severity == "error" and (g.entry.origin == "python" or causes.native_knobs(g.entry)):
                by_id.setdefault(("path", g.entry.id), []).append(g)
            elif causes.overlap_related(g.entry) and _worth_listing(g.entry):
                diag.messages.append(g)
            elif g.entry.origin == UNEXPLAINED and not scan.foreign and terms.named(g.text, g.entry.exception)[0]:
                diag.causes.append(_by_terms(g))
            elif not causes.overlap_related(g.entry) and g.entry.severity == "error":
                diag.other.append(g)
    _companions(diag, by_id)
    for key, groups in by_id.items():
        if isinstance(key, tuple):
            diag.causes.append(_path_error(groups, diag.catalog))
        elif key in ("OVERLAP_PATH_TRACEBACK", "OVERLAP_PATH_TRACEBACK_CUT", NCCL_ON_PATH):
            diag.causes += [_traceback(g, key) for g in groups]
        elif key == NONE_GROUP:
            diag.causes += [_none_group(g) for g in groups]
        else:
            rec = findings.record(key)
            diag.causes.append(Cause(generic(key), groups, rec.get("overlap_related", True)))
    for cause in diag.causes:
        _deepep_reading(cause)
        _nvshmem_reading(cause)
        _connections_refused(cause)
        _lines_say(cause)
    _ibgda_reading(diag)


_DEEPEP_ASSERT = "native.deepep_kernel_assert"
_IBGDA = "NVSHMEM_IBGDA_INIT_FAILED"
# NVSHMEM's warnings it goes on from (fix21 A), each with what it says when a failure follows it.
_NVSHMEM_WARNINGS = {
    _IBGDA: ("NVSHMEM's IBGDA transport did not start before it (\"init failed for transport: IBGDA\"), the transport "
             "DeepEP's internode kernels post their RDMA through (DeepEP internode.cu:134-138, :492): that is the "
             "failure's reason (the network set-up: an active IB / RoCE device with GPU-initiated communication on "
             "every node)"),
    "NVSHMEM_TRANSPORT_SKIPPED": (
        "NVSHMEM left out a NIC or its remote (proxy) transport before it (a warning by itself: NVSHMEM "
        "transport.cpp:220-228, ibgda.cpp:3792-3853): the NICs NVSHMEM could not use are the first place to look"),
}
_NVSHMEM_WARNING_LINES = ("native.nvshmem_ibgda_init_failed", "native.nvshmem_transport_skipped")
_NVSHMEM_INIT_LINES = ("native.nvshmem_bootstrap_failed", "native.nvshmem_api_before_init")


def _ibgda_reading(diag: Diagnosis) -> None:
    """NVSHMEM's warnings ("init failed for transport: IBGDA", a NIC or the remote transport skipped) are no failure
    by themselves (NVSHMEM v3.4.5 transport.cpp:220-228, :281-286 go on with the transports that started; fresh20
    F20-3, fix21 A): where the log also shows the dispatcher's exchange failing (MOE_DISPATCHER_COMM_FAILED:
    NVSHMEM's "Unable to initialize any transports" or failed init, a DeepEP timeout or an IBGDA assert, not only
    low-latency kernels' asserts), they are that failure's reason and go with it; else each stays a warning (the
    weight of each the run's config decides, _nvshmem_against_config)."""
    warned = [c for c in diag.causes if c.finding.id in _NVSHMEM_WARNINGS]
    failed = next((c for c in diag.causes if c.finding.id == "MOE_DISPATCHER_COMM_FAILED" and not low_latency_only(c)),
                  None)
    if not warned or failed is None:
        return
    for c in warned:
        diag.causes.remove(c)
        failed.groups.extend(c.groups)
    said = "; ".join(dict.fromkeys(_NVSHMEM_WARNINGS[c.finding.id] for c in warned))
    failed.finding = replace(failed.finding, message=f"{failed.finding.message}; {said}")


def _nvshmem_reading(cause: Cause) -> None:
    """A failure seen only in NVSHMEM's own init lines (its bootstrap, or its API used before init completed: fix21
    A) says whose NVSHMEM it is conditionally: Megatron-Core reaches NVSHMEM only through DeepEP under the flex
    dispatcher (0.19.2 token_dispatcher.py:1769-1772, fused_a2a.py:67), which starts it for an ETP x EP group of more
    than 8 ranks (DeepEP 567632d buffer.py:105); the same lines come from any program's DeepEP or NVSHMEM."""
    if cause.finding.id != "MOE_DISPATCHER_COMM_FAILED" or not all(
            g.entry.id in _NVSHMEM_INIT_LINES for g in cause.groups):
        return
    cause.finding = replace(cause.finding, message=(
        "NVSHMEM's initialization failed: "
        + ("its unique-ID bootstrap could not exchange the set-up between the PEs (NVSHMEM v3.4.5 bootstrap_uid.cpp: "
           "bootstrap_net_recv or bootstrap_net_init returns an error and NVSHMEM's init fails; bootstrap_root, the root "
           "PE's thread, stops serving the exchange with no error code (:282 returns NULL), and the other PEs wait for "
           "the ring peer it never sends them (:741); a PE whose bootstrap version is not the root's exits, :729-732)"
           if any(g.entry.id == "native.nvshmem_bootstrap_failed" for g in cause.groups) else
           "an NVSHMEM call found it not initialized and exited the process (nvshmem_internal.h:45-50; DeepEP "
           "567632d runtime.cu:54 does not check nvshmemx_init_attr's status, so an earlier init failure ends here)")
        + ". If this is a Megatron-Core run, the NVSHMEM is DeepEP's, under the flex token dispatcher with the deepep "
        "backend on an ETP x EP group of more than 8 ranks (Megatron-Core token_dispatcher.py:1769-1772, fused_a2a.py:67; "
        "DeepEP buffer.py:105), and its expert-parallel exchange cannot start; otherwise it is the NVSHMEM of the "
        "program that printed it"))


def _connections_refused(cause: Cause) -> None:
    """CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE is a warning where Megatron-Core or Transformer Engine warn; where the log
    shows Megatron-LM's argument check raising (an error line: "Using sequence parallelism requires ...", "Using async
    gradient all reduce requires ..." in 23.04 to core_v0.11.0 validate_args, core_v0.11.0 arguments.py:656-664;
    "Using tensor model parallelism or context parallelism require ..." from core_v0.12.0), the run did not start
    (fix21 B)."""
    if cause.finding.id != "CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE" or not any(
            g.entry.severity == "error" for g in cause.groups):
        return
    cause.finding = replace(cause.finding, severity="error", message=(
        "Megatron-LM's argument check refused to start the run: CUDA_DEVICE_MAX_CONNECTIONS is not 1 in its "
        "environment (validate_args raises where sequence parallelism is on, and, in Megatron-LM 23.04 to core_v0.11.0, "
        "where the async tensor-parallel all-reduce is on, its default: \"Using async gradient all reduce requires "
        "...\"; from core_v0.12.0 an assert takes their place: \"Using tensor model parallelism or context parallelism "
        "require ...\", in Megatron-Core 0.19.2 for TP or CP > 1 before Blackwell, outside FSDP and the MoE "
        "expert-parallel overlap)"))


_DEEPEP_FILE = re.compile(r"Assertion failed: (?:\S*/)?(\w+\.cuh?):\d+, condition: (.+)")


def deepep_condition(text: str) -> str | None:
    """What a DeepEP kernel assert's file and condition say failed (the catalog note of native.deepep_kernel_assert,
    read from the DeepEP mirror: 567632d / dd758ca csrc/kernels/), None where the line is not one."""
    m = _DEEPEP_FILE.search(text)
    if not m:
        return None
    file, cond = m[1], m[2]
    if file == "internode_ll.cu":  # low-latency kernels: csrc/legacy/buffer.hpp asserts low_latency_mode before them
        return ("DeepEP's low-latency kernels (internode_ll.cu, which a Buffer runs only when built with "
                "low_latency_mode=True: DeepEP csrc/legacy/buffer.hpp EP_HOST_ASSERT(low_latency_mode) before "
                "internode_ll's dispatch and combine) asserted; Megatron-Core's flex dispatcher never builds such a buffer "
                "(0.19.2 fused_a2a.py: Buffer(group, num_nvl_bytes, num_rdma_bytes), low_latency_mode left False), so the "
                "line comes from another component's DeepEP low-latency kernels in this log (an inference or rollout "
                "engine's decode, say), not from the training run's token dispatcher"
                + ("; its condition says a peer's token count had not landed when its RDMA completion was polled: "
                   "the network between the nodes (adaptive routing must be off)" if "num_recv_tokens" in cond else ""))
    if "num_rc_per_pe" in cond:
        what = ("the NVSHMEM IBGDA queue pairs per peer (deep_ep Buffer's num_qps_per_rank, default 24, which "
                "Megatron-Core's get_buffer does not set) are fewer than the kernel's channels or SMs "
                "(model.moe_deepep_num_sms)")
    elif file == "layout.cu":
        what = ("the layout kernel (get_dispatch_layout, run first) found an internode EP group (ETP x EP ranks: "
                "model.expert_tensor_parallel_size x model.expert_model_parallel_size) whose size is not a multiple of 8")
    elif "num_recv_tokens" in cond:
        what = "a peer's token count had not landed when its RDMA completion was polled: the network between the EP nodes"
    else:
        what = ("a limit of the kernels on the exchange (top-k, hidden size, ranks) that this run's MoE layout passes; "
                "the condition names it")
    return f"DeepEP's {file} kernel asserted `{cond.strip()}`: {what}"


def _lines_say(cause: Cause) -> None:
    """What the cause's lines say of it beyond its record (a catalog entry's `cause`: evalAG AG-5, the releases that
    print an older wording and what fixed it there), added to its message."""
    said = list(dict.fromkeys(g.entry.cause for g in cause.groups if getattr(g.entry, "cause", None)))
    if said:
        cause.finding = replace(cause.finding, message="; ".join([cause.finding.message, *said]))


def _deepep_reading(cause: Cause) -> None:
    """A DeepEP kernel assert's cause says what its condition means (evalAE AE2-4: the catalog note's reading never
    reached the user), in the message that text and JSON both show."""
    if cause.finding.id != "MOE_DISPATCHER_COMM_FAILED":
        return
    said = list(dict.fromkeys(r for g in cause.groups if g.entry.id == _DEEPEP_ASSERT
                              and (r := deepep_condition(g.text))))
    if said:
        head = "" if low_latency_only(cause) else f"{cause.finding.message}; "  # not the flex dispatcher's exchange
        cause.finding = replace(cause.finding, message=head + "; ".join(said))
        if not head:
            cause.finding = replace(cause.finding, fix_overrides={}, fix=shell(
                "find the component that runs DeepEP's low-latency kernels (not Megatron-Core's dispatcher) and check the "
                "network between its nodes (RDMA / RoCE, NVSHMEM IBGDA, adaptive routing off) and its DeepEP build"))


def low_latency_only(cause: Cause) -> bool:
    """Every DeepEP line of the cause is a low-latency kernel's assert (internode_ll.cu), none of which Megatron-Core
    runs."""
    own = [g for g in cause.groups if g.entry.id not in _NVSHMEM_WARNING_LINES]  # (lines _ibgda_reading joined)
    return bool(own) and all(g.entry.id == _DEEPEP_ASSERT and (m := _DEEPEP_FILE.search(g.text))
                             and m[1] == "internode_ll.cu" for g in own)


def _watchdog_pairs(scan: Scan) -> list:
    """torch prints a timed-out work ('Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N, OpType=...)')
    with the rank alone (WorkNCCL::logPrefix), and its group's description on the watchdog's next lines about work N
    ('Timeout at NCCL work: N', 'Exception (either an error or timeout) detected by watchdog at work: N', torch 2.6+'s
    'failure detected by watchdog at work sequence id: N'). The work's group takes the description of such a line of the
    same rank and work, whichever of its lines that is (Group.works: the lines of many ranks and works are one group;
    fuzzA3: only its first line was paired); where its lines' companions name several groups, each group's lines are
    a group of their own (_split). Returns the companions whose own finding the description alone gave ('Timeout at
    NCCL work', a 'watchdog thread terminated' line cut before its OpType) where the log prints the work itself: that
    line decides (a one-element gather is no DP bucket on any group's description), and they go with its cause
    (_companions)."""
    works = [(gid, g) for gid, g in scan.groups.items() if g.entry.id in pg.WATCHDOG_TIMEOUTS]
    if not works:
        return []
    seqs = {seq for _gid, g in works for seq, _rank in g.works}
    said: dict = {}
    deferred = []
    for g in scan.groups.values():
        if g.entry.id not in pg.COMPANIONS:
            continue
        if g.findings and {seq for seq, _rank in g.works} <= seqs:
            deferred.append(g)
        for key, desc in g.works.items():
            if desc:
                said.setdefault(key, desc)
    for gid, work in works:
        if pg.tag(work.text) is None and not work.tag:
            _split(scan, gid, work, said)
    return deferred


def _split(scan: Scan, gid: str, work: Group, said: dict) -> None:
    """The work group described by its lines' companions (`said`: (SeqNum, rank) -> description): one description
    for all of it, or its first for the group and a group of its own for each other one's lines (SeqNum counts per
    process group, so two groups' works on one rank can share one)."""
    by_desc: dict = {}
    for key in work.works:
        if key in said:
            by_desc.setdefault(said[key], []).append(key)
    if not by_desc:
        return
    first, *others = by_desc
    work.tag = first
    for desc in others:
        keys = by_desc[desc]
        ranks = {rank for _seq, rank in keys if rank is not None} - {r for _s, r in by_desc[first]}
        scan.groups[f"{gid}@{desc}"] = replace(work, tag=desc, count=len(keys), ranks=ranks, more_ranks=0,
                                               works={k: work.works[k] for k in keys})
        work.count -= len(keys)
        work.ranks -= ranks


def described_text(g: Group) -> str:
    """A watchdog line's text with its group's description where another line of its work gives it (Group.tag)."""
    return f"{g.tag} {g.text}" if g.tag else g.text


def _companions(diag: Diagnosis, by_id: dict) -> None:
    """torch's 'Exception ... detected by watchdog at work: N' line that follows a watchdog timeout of work N is that
    timeout's, not another failure: it goes with the cause the timeout line shows."""
    seqs = {seq: fid for fid, groups in by_id.items() if isinstance(fid, str) for g in groups for seq in _seqs(g)}
    for g in list(diag.other):
        m = pg.WORK_SEQ.search(g.text)
        own = [seq for seq, _rank in g.works] or ([m[1]] if m else [])
        fid = next((seqs[seq] for seq in own if seq in seqs), None)
        if fid is not None:
            diag.other.remove(g)
            by_id[fid].append(g)


def _seqs(g: Group) -> list:
    """The works a timeout's lines are about: every line's of a watchdog timeout (Group.works), else the one its text
    prints (a 'watchdog thread terminated' line with its WorkNCCL)."""
    if g.entry.id in pg.WATCHDOG_TIMEOUTS:
        return [seq for seq, _rank in g.works]
    m = pg.SEQ.search(g.text)
    return [m[1]] if m else []


def _worth_listing(entry) -> bool:
    """Overlap-path messages shown without a cause: warnings, errors and symptoms, and Bridge's own start-up lines."""
    return entry.severity in ("error", "warning", "symptom") or entry.package == "megatron-bridge"


def generic(finding_id: str) -> Finding:
    """The finding from its record alone (no config): the record's constant fix_overrides, else its fix text when it
    needs no value a check computes, else its log_fix (what to do when only the log is known), else the knobs."""
    rec = findings.record(finding_id)
    fix_overrides = dict(rec.get("fix_overrides") or {})
    fix = None
    keys = dp_keys(rec)
    if not fix_overrides and findings.template_fields(rec["fix"]) - set(keys):
        knobs = findings.Shell(", ".join(rec.get("knobs") or ()) or "the settings named")
        fix = findings.Shell(rec["log_fix"]) if rec.get("log_fix") else \
            shell("change {knobs}; pass --config (the run's run_config.yaml) or --recipe for a fix proven on the config", knobs=knobs)
    f = findings.make(finding_id, fix_overrides=fix_overrides, **({"fix": fix} if fix else {}), **{**_message_params(rec), **keys})
    return replace(f, message=f.message if not findings.template_fields(rec["message"]) else rec["title"],
                   fix=fix if fix is not None else f.fix)


def dp_keys(rec: dict, state=None) -> dict:
    """Values for a record's dp_keys fields: each knob's override as resolve writes it for the config (_dp_written);
    without a config (state None) both forms, with the rule."""
    out = {}
    for name, knobs in (rec.get("dp_keys") or {}).items():
        if state is not None:
            section = state.request.comm_overlap is not None and state.dp_overlap_applied
            out[name] = findings.overrides_text(_dp_written(knobs, section), sectionless=False)
            continue
        section, ddp = (findings.overrides_text(_dp_written(knobs, s), sectionless=False) for s in (True, False))
        out[name] = findings.Shell(f"{section} ({ddp} where the config has no comm_overlap section or no distributed "
                                   "optimizer: with both, Bridge writes its value over ddp's)")
    return out


def _dp_written(knobs: dict, section: bool) -> dict:
    """The overrides that set DP knobs: comm_overlap's where its section applies its DP settings (Bridge
    comm_overlap.py:635-643: with ddp.use_distributed_optimizer only), else ddp's, with the optimizer's beside
    overlap_param_gather (validate turns both on where either is: training/config.py:1969-1981)."""
    if section:
        return {f"comm_overlap.{k}": v for k, v in knobs.items()}
    out = {}
    for k, v in knobs.items():
        out[f"ddp.{k}"] = v
        if k == "overlap_param_gather":
            out[f"optimizer.{k}"] = v
    return out


def _message_params(rec: dict) -> dict:
    """Values for a message template that needs ones only a check computes: blanks (the title is shown instead)."""
    return {name: "" for name in findings.template_fields(rec["message"]) | findings.template_fields(rec["fix"])
            if name != "fix"}


def _traceback(g: Group, finding_id: str) -> Cause:
    """A traceback through overlap-path code: the innermost such frame, its dimension and the fields it reads."""
    e = g.entry
    fields = e.condition.split() if e.condition else []
    # (a frame of a condensed chain may name its file and line only: messages.parse_condensed)
    where = e.function or (f"the code at line {e.line}" if e.file and e.line else "code that reads an overlap attribute")
    site = e.file or ("a call with a keyword the callee does not take" if e.function else "a config object")
    params = dict(knobs=fields, exception=e.exception, function=where, file=site,
                  dimension=frames.NAMES.get(e.package, e.package), fields=", ".join(fields) or "none known")
    if finding_id == NCCL_ON_PATH:  # its record's own fix: why NCCL failed is NCCL's to say
        return Cause(findings.make(finding_id, **{**params, "fields": findings.Shell(params["fields"])}), [g], True)
    f = findings.make(finding_id, **params,
                      fix=shell("check {fields} against what {function} expects (explain OVERLAP_PATH_TRACEBACK); with --config the "
                                "analysis of the run's config is linked", fields=findings.Shell(", ".join(fields) or "the settings named"),
                                function=where))
    return Cause(f, [g], True)


# What sizes the process groups (Megatron-Core parallel_state.initialize_model_parallel's arguments), as the "...
# parallel group is not initialized" asserts' causes name them
_GROUP_SIZES = [*frames.GRID_FIELDS, "model.expert_tensor_parallel_size"]


def _none_group(g: Group) -> Cause:
    """A traceback ending in AttributeError on None where the failing line calls .size() or .rank() on a process group
    (frames.none_process_group): the group was never initialized or passed, as Megatron-Core's "... parallel group is
    not initialized" asserts say, which are not overlap-related either (fix21 C)."""
    e = g.entry
    where = " ".join(filter(None, (e.file, e.function))) or "the code the traceback ends in"
    package = "megatron-core" if "megatron/core/" in (e.file or "") else "the code"
    f = findings.make("OVERLAP_PATH_ERROR", knobs=_GROUP_SIZES, package=package, topic="parallel state", where=where,
                      condition=(f" (the process group {e.condition} is None: never initialized or never passed to this "
                                 "code, as Megatron-Core's \"... parallel group is not initialized\" asserts say; not an "
                                 "overlap setting: the code that builds it (initialize_model_parallel, or a process-group "
                                 "collection a tool or converter makes) left it out)"))
    return Cause(f, [g], False)


def _by_terms(g: Group) -> Cause:
    """An exception nothing else explains whose words name a dimension or an overlap mechanism (terms.py)."""
    names, dim, knobs = terms.named(g.text, g.entry.exception)
    f = findings.make("OVERLAP_TERMS_IN_ERROR", knobs=knobs, exception=g.entry.exception or "an exception",
                      terms=", ".join(names), dimension=frames.NAMES.get(dim, dim),
                      fields=findings.Shell(", ".join(knobs)))
    return Cause(f, [g], True)


def _path_error(groups: list, cat: messages.Catalog) -> Cause:
    e = groups[0].entry
    condition = f" (it checks {e.condition})" if e.condition else ""
    where = " ".join(filter(None, (e.file, e.function))) or "its native code"
    version = cat.requested or cat.version
    condition += _runtime_said(e, version)
    knobs = causes.knobs_of(e, version, branch=False) or causes.native_knobs(e)
    if not knobs and e.file:  # a message that names no field: the fields its code reads (frames.py)
        knobs = list((frames.overlap_frame(e.file, e.function or "") or ((), []))[1])
    knobs += [k for k in causes.knobs_of(e, version) if k not in knobs]  # and its branches' (recheck59 AF3: in place of them)
    f = findings.make("OVERLAP_PATH_ERROR", knobs=knobs, package=e.package, topic=e.topic.replace("_", " "), where=where,
                      condition=condition)
    related = not knobs or not all(_layout_size(k) for k in knobs) or bool(causes.under_setting(e, cat.requested or cat.version))
    return Cause(f, groups, related)


def _runtime_said(e, version: str | None) -> str:
    """Where the assert checks a callback Megatron installs at run time (causes.RUNTIME_FIELDS): that it is none of
    the user's fields, which overlap setting makes the check reachable (its branch's test), and that the code itself
    installs the callback after the check, so it fails where one was installed before (evalAD AD2-2)."""
    names = causes.runtime_fields(e)
    if not names or not re.search(r"\bis None\b", e.condition or ""):
        return ""
    settings = causes.under_setting(e, version)
    on = f", reached only with {' or '.join(settings)} on" if settings else ""
    said = f"; {', '.join(names)} is no config field to set but a callback Megatron installs at run time{on}"
    if names != ["no_sync_func"]:
        return said
    return (said + ": the "
            "code that checks it installs it right after the check (Bridge's training/setup.py "
            "_update_model_config_funcs, Megatron-LM's training.py train()), so it fails where one is installed "
            "already: a second pass through such code in one process (a framework whose train() installs it on "
            "each call, per step or rollout), or the framework's own code setting it")


# The fields that lay the layers out across pipeline stages (the layout, the first and last stages' counts, the
# embedding or loss counted as a layer: run/layers.py reads the same)
_LAYER_SPLIT = ("pipeline_model_parallel_layout", "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
                "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


def _layout_size(knob: str) -> bool:
    """A knob that only sizes the layout (a parallel size, the layer count, the layers' split across stages): an error
    about it alone is arithmetic of the process grid, not an overlap setting."""
    name = knob.partition(".")[2]
    return name.endswith("_parallel_size") or name in ("num_layers", "num_moe_experts", "seq_length", *_LAYER_SPLIT)


# -- the config ------------------------------------------------------------------------------------------------------


def link(diag: Diagnosis, scenario, origin: str, unknown=()) -> None:
    """The analysis of the run's config beside each cause: predicted, predicted once the log's machine facts are
    given, or missed."""
    from ..findings.analysis import analyze
    from ..findings.rules import RAISERS

    analysis = analyze(scenario)
    known = [f for f in analysis.findings if not rests_on(f.when, f.knobs, unknown)]
    found = {f.id: f for f in known}
    diag.config.update({"from": origin, "not_printed": list(unknown), "gpus": scenario.gpus,
                        "findings": list(dict.fromkeys(f.id for f in known))})
    regrouped = _regroup(diag, analysis)
    launched = {name: str(rule["value"]) for name, rule in analysis.launch_env.items()}  # what Bridge's launcher sets
    ruled_out = []
    for cause in diag.causes:
        fid = cause.finding.id
        rec = findings.record(fid)
        checked = any(not r.startswith("mbridge_overlap.diagnose") for r in RAISERS.get(fid, ()))
        why = "" if checked else (_ruled_out_by(rec, analysis.effective) or _no_split_makes(cause, rec, analysis.effective))
        if why:
            ruled_out.append((cause, f"the log shows what it matches, and the config rules it out ({why})"))
            continue
        expected = "" if checked else _expected_by(rec, {**analysis.effective, "launch_env": launched})
        if expected:
            ruled_out.append((cause, f"expected with this config: {expected}"))
            continue
        if not checked:
            if rec.get("dp_keys"):  # its keys as resolve writes them for this config (evalAG AG-6)
                cause.finding = replace(cause.finding, fix=shell(rec["fix"], **dp_keys(rec, analysis.state)))
            _from_log_only(cause, rec, found, analysis.effective)
            _fix_on_config(cause, analysis)
            _deepep_against_config(cause, analysis.effective)
            _nvshmem_against_config(cause, analysis.effective)
            _registration_against_config(cause, analysis.effective)
            _dp_without_overlap(cause, analysis)
            continue
        if fid in found:
            cause.finding, cause.predicted, cause.how = found[fid], True, "the config analysis predicts it"
            continue
        sharper = next((found[x] for x in rec.get("explained_by") or () if x in found), None)
        if sharper is not None:  # the config says more of the same line (evalQ Q1: a request validate() overwrote)
            cause.finding, cause.predicted = sharper, True
            cause.how = f"the config analysis predicts it as {sharper.id}"
            continue
        facts = _shown_facts(diag, rec)
        if facts:
            again = {f.id: f for f in analyze(scenario_with(scenario, facts)).findings}
            if fid in again:
                cause.finding, cause.predicted = again[fid], True
                cause.how = ("the config analysis predicts it once the machine facts the log shows are given: "
                             + ", ".join(f"{k}={v}" for k, v in facts.items()))
                continue
        if "comm_overlap" in unknown and rec.get("when") not in RUN_PHASES:
            cause.how = ("decided at the config step, and Bridge's summary is printed after it: it shows what the step "
                         "left, not what was requested")
            continue
        if rests_on(rec.get("when"), rec.get("knobs") or (), unknown):
            cause.how = "the printed config does not hold what decides it (the launch environment, or a field not printed)"
            continue
        env = [k.partition(".")[2] for k in rec.get("knobs") or () if k.startswith("env_vars.")]
        if env and not any(n in scenario.request.env_vars or n in scenario.launcher_env for n in env):  # (evalQ Q2)
            cause.how = (f"it rests on {', '.join(env)} in the launch environment, which the config does not set: the "
                         "launcher's export, which no run config records (pass --launcher-env NAME=VALUE to check it)")
            continue
        other = _other_release_wording(cause, scenario.release)
        if other:  # (evalV Z3: an older Megatron-Core's check, which the analysed release does not have, is no gap)
            cause.how = other
            continue
        cause.predicted = False
        cause.how = ("the config analysis did not predict it: a gap in the rules (please report it with this log)")
    for cause in diag.causes:
        why = "; ".join(regrouped.get(cause.finding.id, ()))
        if why:
            cause.how = f"{why}; {cause.how}" if cause.how else why
    for cause in diag.causes:  # the config is linked: a fix that says to link it has said its piece
        if LINK_HINT in cause.finding.fix:
            cause.finding = replace(cause.finding, fix=findings.Shell(cause.finding.fix.replace(LINK_HINT, "")))
    for cause, why in ruled_out:
        diag.causes.remove(cause)
        diag.notes.append(f"{cause.finding.id} left out: {why}")
    shown = {c.finding.id for c in diag.causes}
    for f in (f for f in known if f.severity == "error"):
        if f.id not in shown:
            rec = findings.record(f.id)
            diag.causes.append(Cause(f, [], rec.get("overlap_related", True), True,
                                     f"predicted by the config analysis (fails at {f.when or 'config'}); the log does not show "
                                     "it: the run stopped before, or the log is cut"))


RUN_PHASES = ("setup", "step", "steady")
LINK_HINT = "; with --config the analysis of the run's config is linked"  # the end of the fixes known from the log only
_COALESCED = re.compile(r"OpType=_?COALESCED\b")
BY_GROUP = {"dp": "DP_COLLECTIVE_TIMEOUT", "cp": "CP_COLLECTIVE_TIMEOUT", "tp": "TP_COLLECTIVE_TIMEOUT",
            "ep": "EP_COLLECTIVE_TIMEOUT"}
_DIM_OF = {fid: dim for dim, fid in BY_GROUP.items()}


_EP_KNOBS = ["model.moe_token_dispatcher_type", "model.expert_model_parallel_size", "model.expert_tensor_parallel_size"]
_SEQ_ONE = re.compile(r"WorkNCCL\(SeqNum=1\b")


def p2p_op_type(diag: Diagnosis) -> None:
    """A pipeline watchdog timeout read by its OpType (evalAB AB2-4). torch's ProcessGroupNCCL prints the work's
    c10d::OpType (torch/csrc/distributed/c10d/Work.hpp: SEND 12, RECV 13, COALESCED 17): an unbatched isend/irecv is
    SEND or RECV, torch's batch_isend_irecv runs its ops in a _coalescing_manager and ends as one COALESCED work. So a
    COALESCED pipeline op was batched already (Megatron-Core's p2p_communication.py: _communicate_shapes, the
    variable_seq_lengths shape exchange, always batches; the activations with batch_p2p_comm=true): the fix to batch
    unbatched ops is not offered for it. SeqNum=1 is the group's first op, where batch_isend_irecv needs every rank of
    the group (its docstring: otherwise "the behavior is undefined")."""
    for cause in diag.causes:
        if cause.finding.id != "PIPELINE_P2P_TIMEOUT" or not cause.groups \
                or not all(_COALESCED.search(g.text) for g in cause.groups):
            continue
        first = any(_SEQ_ONE.search(g.text) for g in cause.groups)
        message = ("a batched pipeline send/recv (OpType=COALESCED: torch's batch_isend_irecv, which Megatron-Core "
                   "uses for the variable_seq_lengths shape exchange (_communicate_shapes) and, with "
                   "batch_p2p_comm=true, for the activations) ran into the NCCL watchdog: the stages disagree about the "
                   "schedule (a stage that stopped, a different number of micro-batches)")
        if first:
            message += ("; SeqNum=1: it was the first op on its group, and torch requires every rank of the group to "
                        "take part in a group's first batch_isend_irecv (otherwise the behavior is undefined)")
        fix = ("look for the stage that failed first or never reached its first pipeline step; every stage must run "
               "the same number of micro-batches; the op was batched already, so batch_p2p_comm=true does not apply; "
               "with model.variable_seq_lengths=true (in-batch packing, dynamic padding) the first pipeline op is the "
               "shape exchange: see PP_VARIABLE_SEQ_LENGTHS_SHAPE_EXCHANGE (pass --config to link it)")
        cause.finding = replace(cause.finding, message=message, fix=findings.Shell(fix))


# The overlap collectives a watchdog's work can be where its line names no process group (no description: torch before
# 2.4, or a group made without one) and no config tells the groups apart by size. torch's c10d OpType is the call's
# (distributed_c10d.py, torch 2.11.0: all_gather_into_tensor :4091 runs _allgather_base, _ALLGATHER_BASE;
# reduce_scatter_tensor :4563 _reduce_scatter_base; all_to_all_single :4694 alltoall_base, ALLTOALL_BASE; isend :2510 /
# irecv :2555 send / recv, SEND / RECV). Who calls them (Megatron-Core 0.19.2, Transformer Engine 2.20.2):
_CANDIDATES = {
    "gather": ("an all-gather or reduce-scatter", {
        "dp": ("the buckets (the distributed optimizer's gradient reduce-scatter and parameter all-gather: "
               "distributed/param_and_grad_buffer.py, through torch's _coalescing_manager)", frames.DP_FIELDS),
        "tp": ("sequence parallel's activations (tensor_parallel/mappings.py _gather_along_first_dim, "
               "_reduce_scatter_along_first_dim)", frames.TP_FIELDS),
        "cp": ("the key/value all-gather with cp_comm_type all_gather (Transformer Engine's "
               "AttnFuncWithCPAndKVAllGather, gather_along_first_dim; its backward reduce-scatters)", frames.CP_FIELDS),
        "ep": ("the MoE allgather dispatcher's tokens on the expert TP x EP group, or the alltoall dispatcher's expert-TP "
               "gather (transformer/moe/token_dispatcher.py gather_from_sequence_parallel_region)", _EP_KNOBS)}),
    "alltoall": ("an all-to-all", {
        "ep": ("the MoE alltoall dispatcher's token exchange (token_dispatcher.py all_to_all: mappings.py _AllToAll, "
               "all_to_all_single)", _EP_KNOBS),
        "cp": ("the all-to-all of cp_comm_type a2a or a2a+p2p (Transformer Engine's flash_attn_a2a_communicate, "
               "all_to_all_single)", frames.CP_FIELDS)}),
    "p2p": ("a send or receive", {
        "pp": ("the pipeline's unbatched sends and receives (pipeline_parallel/p2p_communication.py _p2p_ops: "
               "batch_p2p_comm=false, Bridge's choice beside overlap_p2p_comm with VPP > 1)", frames.PP_FIELDS),
        "cp": ("the ring exchange of cp_comm_type p2p (Transformer Engine's flash_attn_p2p_communicate: isend / irecv "
               "unless NVTE_BATCH_MHA_P2P_COMM=1, or CP = 2 on a GPU of compute capability below 10.0, batch them)", frames.CP_FIELDS)}),
}
_KIND = (("gather", re.compile(r"OpType=_?(?:ALL_?GATHER|REDUCE_?SCATTER)")), ("alltoall", re.compile(r"OpType=_?ALL_?TO_?ALL")),
         ("p2p", re.compile(r"OpType=(?:SEND|RECV)\b")))
_UNNAMED_OF = {"DP_COLLECTIVE_TIMEOUT": "dp", "EP_COLLECTIVE_TIMEOUT": "ep", "PIPELINE_P2P_TIMEOUT": "pp"}  # the log-only pick


def unnamed_group(diag: Diagnosis) -> None:
    """A watchdog timeout known from the log only whose lines name no process group: its OpType is a collective more
    than one dimension runs (an all-gather is DP's, TP's, CP's or EP's; an all-to-all EP's or CP's; a send or receive
    PP's or CP's), so the cause says every candidate and names the knobs of each, and that the config (--config) tells
    them apart by the group's size. With the config linked, _regroup has decided by size already."""
    if diag.config.get("from") is not None:
        return
    for cause in diag.causes:
        if cause.finding.id not in _UNNAMED_OF or not cause.groups \
                or any(pg.described(described_text(g)) is not None for g in cause.groups):
            continue
        kinds = {next((k for k, rx in _KIND if rx.search(g.text)), None) for g in cause.groups}
        if len(kinds) != 1 or None in kinds:
            continue
        what, candidates = _CANDIDATES[kinds.pop()]
        sizes = sorted({n for g in cause.groups if (n := pg.size(g.text))})
        said = "; ".join(f"{frames.NAMES[d]}: {text}" for d, (text, _k) in candidates.items())
        knobs = list(dict.fromkeys([k for _t, ks in candidates.values() for k in ks] + ["dist.distributed_timeout_minutes"]))
        size = f"; its group has {'/'.join(map(str, sizes))} ranks (NumelOut / NumelIn)" if sizes else ""
        message = (f"{what} ran into the NCCL watchdog on a process group the line does not name (no group description), "
                   f"which more than one dimension runs: {said}{size}")
        fix = ("pass --config (the run's run_config.yaml) or --recipe: the group's size and the run's layout tell which of "
               "these it is; find the rank that did not join (its own error first), and raise "
               "dist.distributed_timeout_minutes only where every rank waits in it; if it is "
               f"{frames.NAMES[_UNNAMED_OF[cause.finding.id]]}'s: {cause.finding.fix}")
        cause.finding = replace(cause.finding, message=message, fix=findings.Shell(fix), knobs=knobs)
        cause.title = _unnamed_title(what, candidates)


def _unnamed_title(what: str, dims) -> str:
    """The title of a timeout whose line names no group and that several dimensions' groups can have run."""
    return f"{what[0].upper()}{what[1:]} timed out on a group the line does not name: " + " or ".join(
        frames.NAMES[d] for d in dims)


def after_failure(diag: Diagnosis) -> None:
    """A watchdog timeout that follows another cause's error in the same log, on other ranks, waits on the ranks that
    failed there: no cause of its own. It is said so (info, with that cause named) and its own fixes (a longer timeout,
    an overlap turned off) are not offered, which cannot end such a hang (evalAA AA-4: a DP reduce-scatter on rank 0
    after DeepEP's dispatch timed out on ranks 2 and 6, 44 lines before). Lines are compared within one file only:
    per-rank files have no common order. A timeout with training iterations logged between the failure and it (a
    restarted attempt in the same log: recheck62 AI3) is a cause of its own."""
    timeouts = set(BY_GROUP.values())
    ran = {}
    for _label, scan in diag.scans:
        for source, numbers in scan.iteration_lines.items():
            ran.setdefault(source, []).extend(numbers)
    ran = {source: sorted(numbers) for source, numbers in ran.items()}
    for cause in diag.causes:
        if cause.finding.id not in timeouts or not cause.groups:
            continue
        waiting = {r for g in cause.groups for r in g.ranks}
        first = {}
        for g in cause.groups:
            first[g.source] = min(first.get(g.source, g.number), g.number)
        earlier = sorted(((g.number, other, g) for other in diag.causes if other.finding.severity == "error"
                          and other.finding.id not in timeouts for g in other.groups
                          if g.source in first and g.number < first[g.source] and set(g.ranks) - waiting
                          and not _between(ran.get(g.source, ()), g.number, first[g.source])),
                         key=lambda t: t[0])
        if not earlier:
            continue
        _, other, g = earlier[0]
        ranks = ", ".join(str(r) for r in rank_list({r for h in other.groups for r in h.ranks} - waiting))
        cause.finding = replace(cause.finding, severity="info", fix_overrides={}, fix=(
            f"the fix of {other.finding.id} (this wait ends when its ranks do not fail); a longer timeout or an overlap "
            "turned off does not end it"), message=(
            f"{cause.finding.message}; it follows {other.finding.id} (first at {g.source}:{g.number}, "
            f"rank{'s' if ',' in ranks else ''} {ranks}): the "
            "ranks it waits on failed there first, so this timeout is expected after that failure, not a cause of its own"))


def _between(numbers, after: int, before: int) -> bool:
    """Whether any of the sorted line numbers lies strictly between after and before."""
    i = bisect.bisect_right(numbers, after)
    return i < len(numbers) and numbers[i] < before


def _regroup(diag: Diagnosis, analysis) -> dict:
    """A watchdog all-gather or reduce-scatter whose line names no group is DP_COLLECTIVE_TIMEOUT from the log alone,
    an all-to-all EP_COLLECTIVE_TIMEOUT; with the config, each group's size (the element counts' ratio) or the run's
    EP size says which of the run's groups it ran on, and a group of lines moves to that dimension's cause. A config
    that gives no DP size (GPUS_NOT_DIVISIBLE) rules out the groups of other sizes it gives, never DP's. Returns
    finding id -> what the sizes showed."""
    model = analysis.effective.get("model") or {}
    sizes = pg.of_config(model, analysis.data_parallel_size, analysis.state.ddp)
    dp_named = pg.dp_names(model, analysis.data_parallel_size, analysis.state.ddp) if analysis.data_parallel_size else None
    shown: dict = {}
    pp = model.get("pipeline_model_parallel_size") or 1
    for cause in [c for c in diag.causes if c.finding.id == "PIPELINE_P2P_TIMEOUT"]:
        for g in [g for g in cause.groups if _COALESCED.search(g.text) and pg.described(described_text(g)) is None]:
            placed = _placed(g, model, analysis) if pp > 1 else None
            if pp == 1:
                why = "this config has no pipeline (PP 1)"
            elif placed is not None and placed[1] not in placed[2].get("pp", {}).get(pp, {placed[1]}):
                why = (f"rank {placed[0]} is rank {placed[1]} of its group, a place it does not have in its pipeline group "
                       "(Megatron-Core's rank order)")
            else:
                continue
            why += (": a coalesced collective outside the pipeline's batched sends and receives is the DP buckets' "
                    "(Megatron-Core's param_and_grad_buffer runs them in torch's _coalescing_manager)")
            if why not in shown.setdefault(BY_GROUP["dp"], []):
                shown[BY_GROUP["dp"]].append(why)
            _move(diag, cause, g, BY_GROUP["dp"])
    for cause in [c for c in diag.causes if c.finding.id in (BY_GROUP["dp"], BY_GROUP["ep"])]:
        for g in [g for g in cause.groups if pg.described(described_text(g)) is None]:
            target, why, also = (_by_size(g, sizes, _placed(g, model, analysis), dp_named) if cause.finding.id == BY_GROUP["dp"]
                                 else _by_ep(model.get("expert_model_parallel_size") or 1,
                                             model.get("context_parallel_size") or 1,
                                             analysis.state.request.context.get("model.cp_comm_type")))
            if why and why not in shown.setdefault(target or cause.finding.id, []):
                shown[target or cause.finding.id].append(why)
            if target and target != cause.finding.id:
                _move(diag, cause, g, target)
            if also:  # the run's other groups the line fits: their knobs beside the cause's own, all in its title
                held = next(c for c in diag.causes if g in c.groups)
                extra = [k for d in also for k in _ALSO[d]]
                held.finding = replace(held.finding, knobs=list(dict.fromkeys([*held.finding.knobs, *extra])))
                kind = "gather" if cause.finding.id == BY_GROUP["dp"] else "alltoall"
                held.title = _unnamed_title(_CANDIDATES[kind][0], [d for d in (_DIM_OF.get(held.finding.id), *also) if d])
    return shown


def _placed(g: Group, model: dict, analysis) -> tuple | None:
    """(global rank, its rank in the group, the positions that rank has in this config's groups) of a watchdog line
    that prints both; None otherwise."""
    k = pg.in_group_rank(g.text)
    if k is None or not (g.first_rank or "").isdigit() or analysis.data_parallel_size is None:
        return None
    rank, dist = int(g.first_rank), getattr(analysis.state, "dist", None) or {}
    return rank, k, pg.positions(model, analysis.data_parallel_size, rank, bool(dist.get("use_tp_pp_dp_mapping")),
                                  analysis.state.ddp)


def _by_size(g: Group, sizes: dict, placed: tuple | None = None, dp_named: dict | None = None) -> tuple[str | None, str, list]:
    """(the finding the line moves to, None: it stays; what the sizes showed; the other dimensions whose groups have
    the line's size too, which the line cannot be told apart from)."""
    n = pg.size(g.text)
    if n is None:
        return None, "", []
    dims = pg.matching(sizes, n)
    head = f"the collective's group has {n} ranks (NumelIn / NumelOut), and this config's groups are {pg.describe(sizes, dp_named)}"
    number = pg.pg_id(g.text)
    if number and "world" in dims:  # not torch's default group (PG 0), whatever its size (evalN N4)
        dims = [d for d in dims if d != "world"]
        head += f"; the line's PG {number} is not the whole job's group (torch's default group is PG 0)"
    if placed is not None and len(dims) > 1:
        rank, k, where = placed
        fits = [d for d in dims if n not in where.get(d, {}) or k in where[d][n]]
        if fits and len(fits) < len(dims):
            names = " and ".join(pg.NAMES.get(d, "the whole job") for d in fits)
            head += f"; rank {rank} is rank {k} of its group, a place it has in Megatron-Core's rank order in {names}'s only"
            dims = fits
    others = [pg.NAMES[d] for d in dims if d in pg.NAMES and d != "dp"]
    also = [d for d in dims if d in _ALSO]
    if "dp" in dims and sizes["dp"] is None:
        return None, (f"{head}: this config gives no DP size (its GPU count is not a multiple of TP x PP x CP), so DP's "
                      "cannot be ruled out" + (f", nor {' and '.join(others)}'s" if others else "")), \
            [d for d in also if d != "dp"]
    if "dp" in dims:
        return None, f"{head}: DP's" + (f" and {' and '.join(others)}'s too (the line names no group to tell them apart)" if others else ""), \
            [d for d in also if d != "dp"]
    if others:
        first = next(d for d in dims if d in pg.NAMES)  # the pipeline group's: none of the overlap dimensions'
        return BY_GROUP.get(first, "GROUP_COLLECTIVE_TIMEOUT"), f"{head}: {' and '.join(others)}'s, no DP group's" + (
            " (the line names no group to tell them apart)" if len(others) > 1 else ""), [d for d in also if d != first]
    if "world" in dims:
        return "GROUP_COLLECTIVE_TIMEOUT", f"{head}: the whole job's (the default process group), no DP group's", []
    none = "no group but the whole job's" if number and n in sizes.get("world", ()) else "none"
    return None, f"{head}: {none} has {n} ranks; is the log of this config?", []


# each dimension's knobs, for a line that the run's config leaves several of them (_regroup): the candidates' own
_ALSO = {d: knobs for _what, candidates in _CANDIDATES.values() for d, (_text, knobs) in candidates.items()}


def _by_ep(ep: int, cp: int, cp_comm_type=None) -> tuple[str | None, str, list]:
    """An all-to-all on a group the line does not name: the MoE dispatcher's, unless the config has no EP; with EP and
    a CP that exchanges by all-to-all too (cp_comm_type a2a or a2a+p2p: Transformer Engine's flash_attn_a2a_communicate,
    all_to_all_single, as the alltoall dispatcher's), either one's (_CANDIDATES["alltoall"])."""
    if ep > 1 and cp > 1 and "a2a" in str(cp_comm_type or "").lower():
        return None, (f"this config has EP {ep} and CP {cp} with cp_comm_type {cp_comm_type}, and both exchange by "
                      "all-to-all: the MoE dispatcher's or CP's (the line names no group to tell them apart)"), ["cp"]
    if ep > 1:
        return None, "", []
    if cp > 1:
        return BY_GROUP["cp"], "this config has no expert parallelism (EP 1) and CP > 1: the all-to-all is CP's (cp_comm_type a2a)", []
    return None, "this config has no expert parallelism (EP 1) nor CP: no all-to-all of its own; is the log of this config?", []


def _move(diag: Diagnosis, cause: Cause, g: Group, fid: str) -> None:
    cause.groups.remove(g)
    target = next((c for c in diag.causes if c.finding.id == fid), None)
    if target is None:
        diag.causes.insert(diag.causes.index(cause), Cause(generic(fid), [], findings.record(fid).get("overlap_related", True)))
        target = diag.causes[diag.causes.index(cause) - 1]
    target.groups.append(g)
    if not cause.groups:
        diag.causes.remove(cause)


def _from_log_only(cause: Cause, rec: dict, found: dict, effective: dict) -> None:
    """A cause known from the log only, beside the config's analysis: the config finding that explains it takes its
    place (with that finding's proven fix); else its fix is the one the resolved config leaves standing."""
    fid = cause.finding.id
    explainer = next((found[x] for x in rec.get("explained_by") or () if x in found), None)
    if explainer is not None:
        cause.finding, cause.predicted = explainer, True
        cause.overlap_related = findings.record(explainer.id).get("overlap_related", True)
        cause.how = (f"the config analysis explains it: the log shows {fid}, and the config has {explainer.id}, "
                     "which is known to end so")
        return
    cause.how = "no config rule decides this: it is known from the log only"
    for alt in rec.get("log_fix_if") or ():
        if all(_effective(effective, key) == value for key, value in (alt.get("if") or {}).items()) \
                and alt.get("if_finding", fid) in (*found, fid):
            fix = dict(alt.get("fix_overrides") or {})  # proven on the config next (_fix_on_config)
            said = findings.Shell((str(findings.overrides_text(fix)) if fix else "") + alt["fix"])
            cause.finding = replace(cause.finding, fix=said, fix_overrides=fix or cause.finding.fix_overrides)
            cause.how += "; the fix is the one the resolved config leaves"
            return


def _deepep_against_config(cause: Cause, effective: dict) -> None:
    """A DeepEP kernel assert beside a config whose dispatcher runs no DeepEP kernel (alltoall, allgather, or flex with
    HybridEP: Megatron-Core's fused_a2a.py builds deep_ep's Buffer only for flex with the deepep backend): the log
    contradicts the config, and the fix offers no dispatcher the config already has (evalAE AE2-5)."""
    if cause.finding.id != "MOE_DISPATCHER_COMM_FAILED" or not any(g.entry.id == _DEEPEP_ASSERT for g in cause.groups):
        return
    dispatcher = _effective(effective, "model.moe_token_dispatcher_type")
    backend = _effective(effective, "model.moe_flex_dispatcher_backend")
    if dispatcher == "flex" and backend == "deepep":
        return
    runs = f"moe_token_dispatcher_type={fmt(dispatcher)}" + (f" with moe_flex_dispatcher_backend={fmt(backend)}"
                                                             if dispatcher == "flex" else "")
    cause.how = (f"the log's DeepEP kernel contradicts the config: it runs {runs}, under which Megatron-Core builds no "
                 "DeepEP Buffer (fused_a2a.py: flex with the deepep backend only), so the line is another process's "
                 "DeepEP (or the log is not of this config)")
    if low_latency_only(cause):
        cause.how += "; DeepEP's low-latency kernels are no dispatcher of Megatron-Core's in any case"
    cause.finding = replace(cause.finding, fix_overrides={}, fix=shell(
        "check that the log is of this config (its dispatcher runs no DeepEP), else find the process that runs DeepEP "
        "and check the network its EP group crosses (RDMA / RoCE, NVSHMEM IBGDA) and the DeepEP build"))


def _nvshmem_against_config(cause: Cause, effective: dict) -> None:
    """NVSHMEM's warnings beside the run's config: Megatron-Core's DeepEP starts NVSHMEM only for flex with the deepep
    backend on an ETP x EP group of more than 8 ranks (DeepEP 567632d buffer.py:105, config.hpp:79-80), whose internode
    kernels need IBGDA: the IBGDA line is an error there, and a NIC or the remote transport skipped is this training's
    NVSHMEM's (still a warning: NVSHMEM goes on, and which NICs are left the config cannot say); under any other config
    the training starts no NVSHMEM, and either line is another process's (info)."""
    if cause.finding.id not in _NVSHMEM_WARNINGS:
        return
    dispatcher = _effective(effective, "model.moe_token_dispatcher_type")
    backend = _effective(effective, "model.moe_flex_dispatcher_backend")
    ep = _effective(effective, "model.expert_model_parallel_size") or 1
    etp = _effective(effective, "model.expert_tensor_parallel_size") or _effective(effective, "model.tensor_model_parallel_size") or 1
    if not (isinstance(ep, int) and isinstance(etp, int)):
        return
    ranks = ep * etp
    ibgda = cause.finding.id == _IBGDA
    if dispatcher == "flex" and backend == "deepep" and ranks > 8:
        _nvshmem_of_the_run(cause, ranks)
        return
    runs = f"moe_token_dispatcher_type={fmt(dispatcher)}" + (f" with moe_flex_dispatcher_backend={fmt(backend)}"
                                                             if dispatcher == "flex" else "")
    what = ("could not start its IBGDA transport, which this run does not use" if ibgda else
            "left out a NIC or its remote (proxy) transport, in no NVSHMEM of this run's")
    harmless = "transport.cpp:281-286" if ibgda else "transport.cpp:220-228, ibgda.cpp:3792-3853"
    cause.finding = replace(cause.finding, severity="info", fix_overrides={}, fix=shell(
        f"nothing in this training needs {'IBGDA' if ibgda else 'NVSHMEM'}; find the process whose DeepEP or NVSHMEM "
        "printed it (an inference engine's low-latency kernels start NVSHMEM on one node too) if that one fails"),
        message=(
            f"NVSHMEM {what}: it runs {runs} on an ETP x EP group of {ranks} rank{'s' if ranks != 1 else ''}, for which "
            "Megatron-Core's DeepEP starts no NVSHMEM (only flex with the deepep backend on more than 8 ranks does: "
            f"DeepEP buffer.py:105, config.hpp:79-80); the line is another process's, and not fatal by itself (NVSHMEM "
            f"{harmless})"))
    cause.how = "the config's dispatcher starts no NVSHMEM"


# Why the run's own DeepEP starts NVSHMEM and needs IBGDA (DeepEP 567632d)
_RUN_NVSHMEM = ("its DeepEP dispatcher runs on an ETP x EP group of {ranks} ranks (> 8), for which DeepEP starts NVSHMEM "
                "(buffer.py:105, forcing NVSHMEM_IB_ENABLE_IBGDA=1 at :109) and whose internode kernels post their RDMA "
                "through IBGDA (internode.cu:134-138, :492)")


def _nvshmem_of_the_run(cause: Cause, ranks: int) -> None:
    """An NVSHMEM warning where the run's DeepEP starts NVSHMEM (_nvshmem_against_config)."""
    if cause.finding.id == _IBGDA:
        cause.finding = replace(cause.finding, severity="error", message=(
            "NVSHMEM could not start its IBGDA transport, and this run needs it: " + _RUN_NVSHMEM.format(ranks=ranks)
            + ": the dispatch fails or hangs"))
        cause.how = f"the config's flex dispatcher with the deepep backend on ETP x EP = {ranks} ranks needs IBGDA"
        return
    cause.finding = replace(cause.finding, message=(
        "NVSHMEM left out a NIC or its remote (proxy) transport and went on, and this NVSHMEM is the run's own: "
        + _RUN_NVSHMEM.format(ranks=ranks) + ". The line is a warning (transport.cpp:220-228 sets status 0; "
        "the NIC enumeration skips a NIC it cannot use, ibgda.cpp:3792-3853): it is fatal only where no IBGDA NIC is "
        "left (\"init failed for transport: IBGDA\" then follows) or no transport started (\"Unable to initialize "
        "any transports\", :293-296)"))
    cause.how = (f"the config's flex dispatcher with the deepep backend on ETP x EP = {ranks} ranks starts NVSHMEM; "
                 "which NICs are left the config does not say")


def _dp_without_overlap(cause: Cause, analysis) -> None:
    """A DP timeout on a config that runs neither DP overlap: the record's test (turn the overlap off) cannot be
    taken, and the collective ran unoverlapped after the backward (evalW W2-3)."""
    ddp = analysis.effective["ddp"]
    if cause.finding.id != "DP_COLLECTIVE_TIMEOUT" or ddp["overlap_grad_reduce"] or ddp["overlap_param_gather"]:
        return
    cause.finding = replace(cause.finding, fix=shell(
        "find the DP rank that did not join (the one without this line, or the first traceback); if every rank waits "
        "in the same collective on a slow network, raise dist.distributed_timeout_minutes. This config runs neither DP "
        "overlap (ddp.overlap_grad_reduce and overlap_param_gather are false), so the collective ran unoverlapped after "
        "the backward (finalize_model_grads) or in the optimizer step: no overlap order is involved"))


def _registration_against_config(cause: Cause, effective: dict) -> None:
    """NCCL's IB registration failure beside the run's config: ddp.nccl_ub is what makes Megatron-Core register its
    parameter and gradient buffers with NCCL (Megatron-Core 0.19.2 distributed_data_parallel_config.py:118); without
    it NCCL still registers its own network buffers (NCCL 2.26.5 transport/net.cc:847, :991) and, in a captured CUDA
    graph, the collectives' buffers (ncclNetGraphRegisterBuffer, :1620; NCCL_GRAPH_REGISTER defaults to 1,
    enqueue.cc:232)."""
    if cause.finding.id != "NCCL_IB_REGISTRATION_FAILED":
        return
    nccl_ub = _effective(effective, "ddp.nccl_ub")
    if nccl_ub is True:
        said = ("; this config sets ddp.nccl_ub=true, so its parameter and gradient buffers are registered with NCCL "
                "beside NCCL's own")
        fix = cause.finding.fix
    elif nccl_ub is False:
        said = ("; this config has ddp.nccl_ub=false: Megatron-Core registers none of its buffers with NCCL, so the "
                "memory is NCCL's own network buffers or, in a captured CUDA graph, the collectives' buffers NCCL "
                "registers itself (NCCL_GRAPH_REGISTER, default 1)")
        fix = shell("\"Cannot allocate memory\" is the locked-memory (memlock) limit registration pins against: raise "
                    "ulimit -l on the nodes and in the container; export NCCL_IB_DISABLE=1 only to confirm (NCCL leaves "
                    "InfiniBand for sockets, much slower)")
    else:
        return
    cause.finding = replace(cause.finding, message=cause.finding.message + said, fix=fix)


def _fix_on_config(cause: Cause, analysis) -> None:
    """A log-only cause's constant fix, proven on the run's config as resolve proves its own (with the fixes of the
    warnings it brings in); where nothing settles it, the fix says what it brings instead of offering it (evalN N3:
    ddp.overlap_grad_reduce=true on a config whose comm_overlap overwrites it)."""
    from ..findings import proof
    from ..run import schema

    fix = dict(cause.finding.fix_overrides)
    if not fix or cause.predicted:
        return
    if all(_in_effect(analysis, key, value) for key, value in fix.items()):  # (recheck48 R4)
        cause.finding = replace(cause.finding, fix_overrides={}, fix=shell(
            "{fix} is what this config already runs, so the cause the log shows is not this config's: is the log of "
            "this config?", fix=findings.overrides_text(fix)))
        cause.how += "; its fix is already in this config"
        return
    # the same values where the config's comm_overlap section would overwrite a ddp/optimizer one (CommOverlapConfig)
    owned = {f"comm_overlap.{k.partition('.')[2]}": v for k, v in fix.items()
             if k.startswith(("ddp.", "optimizer.")) and k.partition(".")[2] in schema.COMM_OVERLAP}
    candidates = [fix, {**fix, **owned}] if owned and analysis.state.request.comm_overlap is not None else [fix]
    settled = proof.proven(analysis.state, cause.finding.id, candidates, knobs=list(cause.finding.knobs))
    if settled:
        if settled != fix:  # the record's words after its overrides stay (recheck48 R7)
            said, before = str(cause.finding.fix), str(findings.overrides_text(fix))
            rest = said[len(before):] if said.startswith(before) else ""
            cause.finding = replace(cause.finding, fix_overrides=settled,
                                    fix=findings.Shell(str(findings.overrides_text(settled)) + rest))
        return
    cause.finding = replace(cause.finding, fix_overrides={},
                            fix=proof.unproven(analysis.state, [fix], shell("resolve --config with the change you mean")))
    cause.how += "; its fix does not hold on this config"


def _in_effect(analysis, key: str, value) -> bool:
    """Whether the resolved config runs `key` at `value` (a comm_overlap key: what it requests, else what it sets on the
    model or ddp, where the effective config shows it)."""
    section, _, name = key.partition(".")
    if section == "comm_overlap":
        asked = (analysis.state.request.comm_overlap or {}).get(name)
        return asked == value or any(_effective(analysis.effective, f"{s}.{name}") == value for s in ("model", "ddp"))
    return _effective(analysis.effective, key) == value


def _ruled_out_by(rec: dict, effective: dict) -> str:
    """The values of the resolved config that rule a log-only cause out (its record's implausible_if), '' if none."""
    for alt in rec.get("implausible_if") or ():
        if all(_effective(effective, key) == value for key, value in alt.items()):
            return ", ".join(f"{key}={fmt(value)}" for key, value in alt.items())
    return ""


def _expected_by(rec: dict, effective: dict) -> str:
    """Why the resolved config makes a log-only cause expected (its record's expected_if), '' if it does not."""
    for alt in rec.get("expected_if") or ():
        if all(_effective(effective, key) == value for key, value in alt["if"].items()):
            return ", ".join(f"{key}={fmt(value)}" for key, value in alt["if"].items()) + f" ({alt['why']})"
    return ""


def _no_split_makes(cause: Cause, rec: dict, effective: dict) -> str:
    """Where the cause is a size mismatch by a split factor (a `split_factor` selector): the config's splits of the
    sequence (CP; TP and TP x CP with sequence parallel) none of which is the factor the logged sizes show; '' else."""
    selectors = [re.compile(s["line"]) for s in rec.get("logged") or () if isinstance(s, dict) and s.get("split_factor")]
    if not selectors:
        return ""
    tp, cp = _effective(effective, "model.tensor_model_parallel_size") or 1, _effective(effective, "model.context_parallel_size") or 1
    sp = bool(_effective(effective, "model.sequence_parallel"))
    splits = {cp, *((tp, tp * cp) if sp else ())} - {1}
    shown = {causes.split_factor(a, b) for g in cause.groups for rx in selectors if (m := rx.search(g.text))
             and (a := causes.number(m["a"])) is not None and (b := causes.number(m["b"])) is not None}
    shown.discard(None)
    if not shown or shown & splits:
        return ""
    return (f"the sizes differ by a factor of {', '.join(map(str, sorted(shown)))}, which no split of the sequence in this "
            f"config makes (TP {tp}{' with' if sp else ' without'} sequence parallel, CP {cp})")


def _effective(effective: dict, dotted: str):
    section, _, name = dotted.partition(".")
    return (effective.get(section) or {}).get(name)


def rests_on(when: str | None, knobs, unknown) -> bool:
    """An analysis finding that rests on an input the config source does not give. Bridge's summary is printed after
    the config step: it holds what runs (model, ddp, optimizer) but neither the request (comm_overlap) nor the
    environment. So a finding about the request (a comm_overlap knob) says something only about what happens in the
    run (setup, step, steady); one about env_vars reads the environment; a dotted key the source names as not printed
    reads nothing known."""
    gone = set(unknown)
    for k in knobs:
        section = k.partition(".")[0]
        if section == "comm_overlap" and "comm_overlap" in gone and when not in RUN_PHASES:
            return True
        if section == "env_vars" and {"env_vars", "launcher_env"} & gone or "." in k and k in gone:
            return True
    return False


def _shown_facts(diag: Diagnosis, rec: dict) -> dict:
    """The machine facts the log shows, for a finding that its record says such lines prove (`shows`), plus what the
    start-up lines show: multicast off ("MC NOT initialized"), the NVLink domain size (TE's domain lines)."""
    facts = dict(rec.get("shows") or {})
    if diag.facts.get("ub_multicast") is False:
        facts.setdefault("multicast", False)
    domains = diag.facts.get("nvlink_domains")
    if domains:
        facts.setdefault("nvlink_domain", min(len(r) for r in domains.values()) or 1)
    return facts


def scenario_with(sc, machine_facts: dict):
    """The scenario on a machine with these facts as well as those given."""
    from ..run import machine

    m = sc.machine
    given = {k: getattr(m, k) for k in ("nvlink_domain", "gpus_per_node", "multicast", "te_version") if m.sources.get(k) == "given"}
    if m.given_torch_mpi is not None:
        given["torch_mpi"] = m.given_torch_mpi
    return replace(sc, machine=machine.describe(sc.gpu, sc.release, **{**given, **machine_facts}))


# -- compare ---------------------------------------------------------------------------------------------------------


def compare(before: Scan, after: Scan) -> tuple[dict, Finding | None]:
    """Median time per iteration of each side (its first logged iteration left out) and the drop, if any."""
    b, a = _times(before), _times(after)
    out = {"before": _side(b), "after": _side(a)}
    if not b or not a:
        out["change"] = None
        return out, None
    mb, ma = statistics.median(b), statistics.median(a)
    ratio = ma / mb if mb > 0 else math.inf
    out["change"] = round(ratio - 1, 4) if math.isfinite(ratio) else None  # (fuzzL L6: 1e-321 ms before gave +inf%)
    if out["change"] is None or ratio <= SLOWER:
        return out, None
    f = findings.make("THROUGHPUT_DROP", before_ms=f"{mb:.1f}", after_ms=f"{ma:.1f}", change=f"+{(ratio - 1) * 100:.1f}%",
                      n_before=len(b), n_after=len(a))
    return out, f


def _times(scan: Scan) -> list:
    out = []
    for times in scan.iterations.values():
        out += times[1:]
    return out


def _side(times: list) -> dict:
    return {"iterations": len(times), "median_ms": round(statistics.median(times), 3) if times else None}
