"""The pipeline's iteration from an event simulation of Megatron-Core 0.19.2's schedules (pipeline_parallel/
schedules.py): each pipeline rank runs its forward and backward steps in the order the schedule function runs them,
a step starting when the rank is free and what it receives has arrived (the previous stage's forward output, the next
stage's backward gradient), each transfer arriving `p2p` seconds after the step that sends it ends.

Without VPP (forward_backward_pipelining_without_interleaving): rank r runs min(pp - r - 1, m) warm-up forwards, then
forward i + w and backward i in turn, then the cool-down backwards. With VPP (forward_backward_pipelining_with_interleaving):
the virtual micro-batches follow get_schedule_table (groups of microbatch_group_size_per_vp_stage micro-batches, each
group through chunk 0, then chunk 1, ...), warm-up get_pp_rank_microbatches' 2 (pp - r - 1) + (vp - 1) x group
forwards, then forward k + warm-up and backward k in turn (a backward's chunk vp - 1 - the table's), then the rest;
chunk c's forward on rank 0 waits on chunk c - 1's on the last rank, chunk c's backward on the last rank on chunk
c + 1's on rank 0. The work is linear in pp x vp x micro-batches (each step once, each wake-up once)."""

from __future__ import annotations

from dataclasses import dataclass


# Steps (pp x vp x 2 x micro-batches) past which the budget does not simulate (pure Python, about a microsecond each:
# this many take about a second) and falls back to the even-stage count (schedule() says so)
MAX_STEPS = 1 << 21


@dataclass(frozen=True)
class Paced:
    """The simulated pipeline: when each rank ends its last step (the step ends with the last), and each rank's
    time waiting (its end, less its own steps' time, at the iteration's end: the bubble it sees)."""
    iteration_s: float
    ends: tuple
    busy: tuple

    def wait(self, rank: int) -> float:
        return self.iteration_s - self.busy[rank]


def table(m: int, vp: int, group: int) -> list:
    """get_schedule_table: (micro-batch, chunk) per virtual micro-batch."""
    out = []
    for low in range(0, m, group):
        high = m if low + group >= m else low + group
        out += [(i, c) for c in range(vp) for i in range(low, high)]
    return out


def order(pp: int, m: int, vp: int = 1, group: int | None = None, extra_warmup: int = 0) -> list:
    """Each rank's steps in the order its schedule function runs them: ("F" or "B", chunk, micro-batch)."""
    out = []
    if vp <= 1:
        for r in range(pp):
            w = min(pp - r - 1, m)
            steps = [("F", 0, i) for i in range(w)]
            for i in range(m - w):
                steps += [("F", 0, w + i), ("B", 0, i)]
            out.append(steps + [("B", 0, i) for i in range(m - w, m)])
        return out
    group = group or pp
    tab, total = table(m, vp, group), m * vp
    for r in range(pp):
        w = min(2 * (pp - r - 1) + (vp - 1) * group + extra_warmup, total)
        fwd = [("F", c, i) for i, c in tab]
        bwd = [("B", vp - 1 - c, i) for i, c in tab]
        steps = fwd[:w]
        for k in range(total - w):
            steps += [fwd[k + w], bwd[k]]
        out.append(steps + bwd[total - w:])
    return out


def simulate(fwd: list, bwd: list, m: int, vp: int = 1, group: int | None = None, p2p: float = 0.0,
             extra_warmup: int = 0) -> Paced:
    """The schedule's iteration with rank r's forward and backward of one micro-batch through all its chunks fwd[r] and
    bwd[r] (each chunk 1/vp of them) and each transfer p2p seconds (a number, or one per boundary r -> r + 1, the
    last entry rank pp - 1 -> rank 0 for VPP's chunk hand-over)."""
    pp = len(fwd)
    hop = list(p2p) if isinstance(p2p, (list, tuple)) else [p2p] * pp
    steps = order(pp, m, vp, group, extra_warmup)
    f = [x / vp for x in fwd]
    b = [x / vp for x in bwd]
    done: dict = {}
    waiting: dict = {}  # a step not yet done -> the rank blocked on it
    pos, clock = [0] * pp, [0.0] * pp
    ready = list(range(pp))
    while ready:
        r = ready.pop()
        seq = steps[r]
        while pos[r] < len(seq):
            kind, c, i = seq[pos[r]]
            if kind == "F":
                dep = ((r - 1, "F", c, i), hop[r - 1]) if r > 0 else ((pp - 1, "F", c - 1, i), hop[pp - 1]) if c > 0 else None
            else:
                dep = ((r + 1, "B", c, i), hop[r]) if r < pp - 1 else ((0, "B", c + 1, i), hop[pp - 1]) if c < vp - 1 else None
            start = clock[r]
            if dep is not None:
                if dep[0] not in done:
                    waiting[dep[0]] = r
                    break
                start = max(start, done[dep[0]] + dep[1])
            key = (r, kind, c, i)
            clock[r] = done[key] = start + (f[r] if kind == "F" else b[r])
            pos[r] += 1
            if key in waiting:
                ready.append(waiting.pop(key))
    if any(pos[r] < len(steps[r]) for r in range(pp)):  # (the schedule's order never deadlocks: a bug here)
        raise AssertionError("pipeline simulation stalled")
    return Paced(max(clock), tuple(clock), tuple(m * (x + y) for x, y in zip(fwd, bwd)))


def steps(pp: int, m: int, vp: int = 1) -> int:
    return 2 * pp * m * max(1, vp)


ASSUMPTION = (
    "PP: the bubble is the costed rank's wait in an event simulation of Megatron-Core's schedule (schedules.py "
    "forward_backward_pipelining_without_interleaving: rank r runs pp - r - 1 warm-up forwards, then a forward and a "
    "backward in turn, then the cool-down backwards; with VPP forward_backward_pipelining_with_interleaving's order, "
    "micro-batches in groups of microbatch_group_size_per_vp_stage through each model chunk in turn, 2 (pp - r - 1) + "
    "(vp - 1) x group warm-up forwards): each forward waits on the previous stage's (recv_forward), each backward on "
    "the next stage's (send_forward_recv_backward), every stage at its own pace: its micro-batch forward and backward "
    "with its exposed TP, CP and EP communication and PP transfers of one micro-batch (with VPP a rank's chunks 1/vp "
    "of it each), the step ending with the last stage's; with even stages it is (pp - 1) / vp micro-batches of the "
    "stage's forward and backward with that exposed communication (the simulation's own result there: "
    "tests/test_budget_pipeline.py), so a nearly even layout and an even one agree; the budget costs the rank whose "
    "iteration is the longest under the schedule (the pipeline's end, then its own once-an-iteration DP, embedding "
    "and finalize_model_grads time): every rank ends its step with the optimizer's gradient-norm all-reduce over the "
    "model-parallel group, or the whole instance with the distributed optimizer (Megatron-Core optimizer.py "
    "clip_grad_norm, clip_grads.py get_grad_norm_fp32; Bridge train.py reduce_max_stat_across_model_parallel_group), "
    "so the step users see is the slowest rank's; of ranks whose iterations are equal, the slowest stage")


def per_microbatch(items: list, overlap_cost: dict, m: int) -> float:
    """A rank's exposed communication and overlap cost of one micro-batch: TP, CP and EP, and its PP transfers (not DP
    nor the embedding's all-reduce nor finalize_model_grads': once an iteration, beside the pipeline)."""
    per = sum(i.seconds - i.hidden for i in items
              if i.dimension in ("tp", "cp", "ep") or (i.dimension == "pp" and i.collective == "send_recv"))
    return (per + sum(overlap_cost.values())) / max(1, m)


@dataclass(frozen=True)
class Bubble:
    """Each pipeline rank's wait (the bubble it sees) and the stages' micro-batch forward and backward; paced: whether
    the schedule was simulated (uneven stages), else the even-stage count (even stages, or past MAX_STEPS)."""
    waits: tuple
    stages: tuple
    paced: bool
    even_s: tuple  # (pp - 1) / vp micro-batches of each rank's own forward and backward with its exposed communication

    def said(self, rank: int, vp: int, pp: int, m: int) -> str:
        """What the bubble is here: the costed rank's wait, the busiest stage's, against the even-stage count."""
        if not self.paced:
            if len(set(self.stages)) > 1:  # (too many steps to simulate)
                return (f": {steps(pp, m, vp):,} forward and backward steps, past the {MAX_STEPS:,} the budget "
                        f"simulates: the even-stage count of the costed rank's micro-batch, {self.waits[rank] * 1e3:,.1f} ms, "
                        "where the stages are uneven")
            return ""
        busiest = max(range(pp), key=lambda r: (self.stages[r], -r))
        per = ", ".join(f"{s * 1e3:,.1f}" for s in self.stages)
        line = (f": here the stages' micro-batch forward and backward with their exposed communication take {per} ms (ranks 0 to {pp - 1}), so the "
                f"costed rank {rank} waits {self.waits[rank] * 1e3:,.1f} ms (the even-stage count of its micro-batch "
                f"{self.even_s[rank] * 1e3:,.1f} ms)")
        if busiest != rank:
            line += (f", the slowest stage, rank {busiest}, {self.waits[busiest] * 1e3:,.1f} ms (its even-stage count "
                     f"{self.even_s[busiest] * 1e3:,.1f} ms)")
        return line

    def to_dict(self, rank: int) -> dict:
        pp = len(self.stages)
        busiest = max(range(pp), key=lambda r: (self.stages[r], -r))
        return {"paced": self.paced, "stages_ms": [round(s * 1e3, 3) for s in self.stages],
                "waits_ms": [round(w * 1e3, 3) for w in self.waits], "costed_rank": rank,
                "busiest_rank": busiest, "busiest_wait_ms": round(self.waits[busiest] * 1e3, 3),
                "even_count_ms": round(self.even_s[rank] * 1e3, 3)}


def bubble(times: list, paced: list, m: int, vp: int = 1, group: int | None = None, extra_warmup: int = 0) -> Bubble:
    """Each rank's wait under the schedule, rank r's micro-batch forward and backward times[r] (paced[r] with its
    exposed communication of one micro-batch): simulated at paced; where the paced stages are even the closed count
    (pp - 1) / vp micro-batches of paced, which is the simulation's result (tests/test_budget_pipeline.py), so the
    two agree in the limit of nearly even stages (the exposed communication in the fill and drain either way)."""
    pp, vp = len(times), max(1, vp)
    mb = tuple(f + b for f, b in paced)
    even = tuple((pp - 1) / vp * x for x in mb) if pp > 1 else (0.0,) * pp
    if pp < 2 or len(set(paced)) == 1 or steps(pp, m, vp) > MAX_STEPS:
        return Bubble(even, mb, False, even)
    run = simulate([f for f, _ in paced], [b for _, b in paced], m, vp, group, extra_warmup=extra_warmup)
    return Bubble(tuple(run.wait(r) for r in range(pp)), mb, True, even)
