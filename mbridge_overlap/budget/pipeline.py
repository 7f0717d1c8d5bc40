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
c + 1's on rank 0. events() steps through every step (linear in pp x vp x micro-batches); simulate() steps through the
warm-up, the steady part until its state repeats (plus a constant) and the cool-down, and extrapolates the steady
part between (rounds(), interleaved(): exact, the schedule being a max-plus map; tests/test_budget_pipeline.py checks
it against events() on random uneven stages)."""

from __future__ import annotations

import functools
from dataclasses import dataclass


# Steps the budget steps through at most, a bound on its time and memory: simulate() steps through the warm-up, the
# steady part until it repeats and the cool-down (most schedules: a few thousand steps, milliseconds, whatever the
# micro-batches); one that does not repeat stops here: pure Python, interleaved() about 8 us a step (this many about
# a second and 25 MB, measured), rounds() about 1 us; past it the even-stage count (Bubble.said says so)
MAX_STEPS = 1 << 17


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
             extra_warmup: int = 0, limit: int | None = None) -> Paced | None:
    """The schedule's iteration with rank r's forward and backward of one micro-batch through all its chunks fwd[r] and
    bwd[r] (each chunk 1/vp of them) and each transfer p2p seconds (a number, or one per boundary r -> r + 1, the
    last entry rank pp - 1 -> rank 0 for VPP's chunk hand-over). Without VPP by rounds (rounds(): the steady part is
    periodic and is extrapolated, not stepped through), with VPP by events(); None where more than limit steps would
    be stepped through."""
    pp = len(fwd)
    hop = list(p2p) if isinstance(p2p, (list, tuple)) else [p2p] * pp
    if max(1, vp) == 1 and m >= pp:
        return rounds(list(fwd), list(bwd), m, hop, limit)
    if max(1, vp) > 1:
        return interleaved(list(fwd), list(bwd), m, vp, group or pp, hop, extra_warmup, limit)
    if limit is not None and steps(pp, m, vp) > limit:
        return None
    return events(fwd, bwd, m, vp, group, hop, extra_warmup)


PERIODS = 8  # the longest period (in rounds) rounds() looks for in the steady state
TOL = 1e-12  # relative: a round's state this close to an earlier one plus a constant is periodic (see rounds())


def rounds(f: list, b: list, m: int, hop: list, limit: int | None = None) -> Paced | None:
    """forward_backward_pipelining_without_interleaving (m >= pp) round by round: in round k rank r runs forward
    k + pp - 1 - r (where 0 <= it < m), then backward k (where 0 <= k < m): a forward waits on the previous rank's of
    round k - 1, a backward on the next rank's of round k; the same steps in the same order as events().
    In the steady rounds (0 <= k <= m - pp: every rank runs both) round k's state x_k (each rank's last forward's end
    and its clock) is the same max-plus map of x_{k-1}, x_k = A (x) x_{k-1}, a map that adds a constant to all of its
    inputs' outputs alike and moves no output by more than its inputs moved (non-expansive in the largest
    difference). So where x_k = x_{k-c} + L (every entry, within e = TOL x the state's size), x_{k+jc} = x_k + jL
    within je for every j while the rounds stay steady: the steady rounds are skipped j periods at a time (exact
    where the times add exactly, else within j e: about 1e-12 of the iteration), and only the warm-up, the rounds
    until the state repeats, and the cool-down are stepped through. None where more than limit steps would be."""
    pp = len(f)
    fw, clock = [0.0] * pp, [0.0] * pp
    bw = [0.0] * pp
    last = m - pp  # the last steady round
    seen: list = []
    done = 0
    k = -(pp - 1)
    while k < m:
        for r in range(pp - 1, -1, -1):  # (descending: rank r - 1's forward is still round k - 1's)
            if 0 <= k + pp - 1 - r < m:
                start = clock[r]
                if r and fw[r - 1] + hop[r - 1] > start:
                    start = fw[r - 1] + hop[r - 1]
                clock[r] = fw[r] = start + f[r]
                done += 1
        if 0 <= k < m:
            for r in range(pp - 1, -1, -1):
                start = clock[r]
                if r < pp - 1 and bw[r + 1] + hop[r] > start:
                    start = bw[r + 1] + hop[r]
                clock[r] = bw[r] = start + b[r]
                done += 1
        if limit is not None and done > limit:
            return None
        if 0 <= k < last:
            state = fw + clock
            jump = _period(seen, state)
            if jump is not None:
                c, lift = jump
                j = (last - k) // c
                if j > 0:
                    fw = [x + j * lift for x in fw]
                    clock = [x + j * lift for x in clock]
                    bw = list(clock)  # (a steady round ends with each rank's backward)
                    k += j * c
                    seen = []
            else:
                seen.append(state)
                del seen[:-PERIODS]
        k += 1
    return Paced(max(clock), tuple(clock), tuple(m * (x + y) for x, y in zip(f, b)))


def _period(seen: list, state: list) -> tuple | None:
    """(c, L) where state is seen[-c] plus L in every entry (within TOL of the state's size), the smallest such c."""
    scale = TOL * max(1.0, max(abs(x) for x in state))
    for c in range(1, len(seen) + 1):
        old = seen[-c]
        lift = state[0] - old[0]
        if all(abs(x - y - lift) <= scale for x, y in zip(state, old)):
            return c, lift
    return None


def interleaved(fwd: list, bwd: list, m: int, vp: int, group: int, hop: list, extra_warmup: int = 0,
                limit: int | None = None) -> Paced | None:
    """forward_backward_pipelining_with_interleaving as events() runs it (the same steps, order and waits), the steady
    part extrapolated as rounds() does. Rank r's local round k runs forward table position k + w_r and backward
    position k; table positions in whole groups repeat every P = group x vp positions (micro-batch i + group in place
    of i). The run stops at cuts, rank r at the start of its local round n P + o_r (o_r: the ranks' offsets, so that
    no step before a cut waits on one after it; a rank left waiting short of its cut says otherwise, and the run
    goes on without cuts); the state at a cut is each rank's clock and the ends of its forwards and backwards in the
    W positions before its next ones (every step after the cut waits on no earlier one). Where cut n's state is cut
    n - c's plus L (within TOL), later cuts are too while every rank's steps stay in whole groups of its steady part:
    the run jumps j c periods (state plus j L, the max-plus map being non-expansive as in rounds())."""
    pp, total = len(fwd), m * vp
    f = [x / vp for x in fwd]
    b = [x / vp for x in bwd]
    w = [min(2 * (pp - r - 1) + (vp - 1) * group + extra_warmup, total) for r in range(pp)]
    full = m // group * group * vp  # the positions in whole groups
    period = group * vp

    def tab(p: int) -> tuple:  # table position -> (micro-batch, chunk)
        low = p // period * group if p < full else m // group * group
        size = min(group, m - low)
        off = p - low * vp
        return low + off % size, off // size

    def at(i: int, c: int) -> int:  # (micro-batch, chunk) -> table position
        low = i // group * group
        return low * vp + c * min(group, m - low) + i - low

    def step(r: int, s: int) -> tuple:  # rank r's s-th step: (is a forward, table position)
        if s < w[r]:
            return True, s
        j = s - w[r]
        if j < 2 * (total - w[r]):
            return (True, w[r] + j // 2) if j % 2 == 0 else (False, j // 2)
        return False, s - total

    fd: list = [{} for _ in range(pp)]
    bd: list = [{} for _ in range(pp)]
    waiting: dict = {}
    pos, clock = [0] * pp, [0.0] * pp
    end = 2 * total
    # the offsets: o_r - o_(r-1) in [-2, 0], o_0 - o_(pp-1) in [2 (pp - 1) - group, group] (forward and backward
    # hand-overs between chunks)
    need = max(0, 2 * (pp - 1) - group)
    window = 2 * period + 4 * pp + 2 * extra_warmup + 4
    cuts = need <= min(group, 2 * (pp - 1)) and full > 0
    off, left = [0] * pp, need
    for r in range(1, pp):
        d = min(2, left)
        off[r], left = off[r - 1] - d, left - d
    off = [-o for o in off]  # (rank r's local round n P + off[r] at cut n: global round less o_r)
    n = -(-window // period) + 1
    cap = [min(end, w[r] + 2 * (n * period + off[r])) for r in range(pp)] if cuts else [end] * pp
    seen: list = []
    stepped = 0
    ready = list(range(pp))
    while True:
        while ready:
            r = ready.pop()
            while pos[r] < cap[r]:
                fwd_step, p = step(r, pos[r])
                i, c = tab(p)
                if fwd_step:
                    dep = (r - 1, True, p, hop[r - 1]) if r > 0 else (pp - 1, True, at(i, c - 1), hop[pp - 1]) if c > 0 else None
                else:
                    dep = (r + 1, False, p, hop[r]) if r < pp - 1 else (0, False, at(i, c - 1), hop[pp - 1]) if c > 0 else None
                start = clock[r]
                if dep is not None:
                    got = (fd if dep[1] else bd)[dep[0]].get(dep[2])
                    if got is None:
                        waiting[(dep[0], dep[1], dep[2])] = r
                        break
                    if got + dep[3] > start:
                        start = got + dep[3]
                clock[r] = t = start + (f[r] if fwd_step else b[r])
                (fd if fwd_step else bd)[r][p] = t
                pos[r] += 1
                stepped += 1
                r_next = waiting.pop((r, fwd_step, p), None)
                if r_next is not None:
                    ready.append(r_next)
            if limit is not None and stepped > limit:
                return None
        if all(pos[r] == end for r in range(pp)):
            break
        if any(pos[r] < cap[r] for r in range(pp)) or cap == [end] * pp:
            if cap == [end] * pp:  # (the schedule's order never deadlocks: a bug here)
                raise AssertionError("pipeline simulation stalled")
            cap, cuts = [end] * pp, False  # (a cut the offsets do not make: no more cuts)
            ready = [r for r in range(pp) if (r not in waiting.values())]
            continue
        # every rank at its cut n: its state, against earlier cuts'
        rounds_at = [n * period + off[r] for r in range(pp)]
        state = list(clock)
        try:
            for r in range(pp):
                nf, nb = w[r] + rounds_at[r], rounds_at[r]
                state += [fd[r][p] for p in range(nf - window, nf)] + [bd[r][p] for p in range(nb - window, nb)]
        except KeyError:
            state = None
        jump = _period(seen, state) if state is not None else None
        later = min(full - w[r] - rounds_at[r] for r in range(pp))  # positions before a rank's steps leave whole groups
        if jump is not None and later // (jump[0] * period) > 0:
            c, lift = jump
            j = later // (c * period)
            shift, add = j * c * period, j * lift
            for r in range(pp):
                nf, nb = w[r] + rounds_at[r], rounds_at[r]
                for p in range(nf - window, nf):
                    fd[r][p + shift] = fd[r][p] + add
                for p in range(nb - window, nb):
                    bd[r][p + shift] = bd[r][p] + add
                clock[r] += add
                pos[r] += 2 * shift
            cap, seen = [end] * pp, []
        else:
            seen = (seen + [state])[-PERIODS:] if state is not None else []
            n += 1
            nxt = [w[r] + 2 * (n * period + off[r]) for r in range(pp)]
            cap = nxt if all(w[r] + n * period + off[r] <= full for r in range(pp)) else [end] * pp
        ready = list(range(pp))
    return Paced(max(clock), tuple(clock), tuple(m * (x + y) for x, y in zip(fwd, bwd)))


def events(fwd: list, bwd: list, m: int, vp: int = 1, group: int | None = None, p2p: float = 0.0,
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
    the schedule was simulated (uneven stages), else the even-stage count (even stages, or a steady part that did not
    repeat within MAX_STEPS steps)."""
    waits: tuple
    stages: tuple
    paced: bool
    even_s: tuple  # (pp - 1) / vp micro-batches of each rank's own forward and backward with its exposed communication

    def said(self, rank: int, vp: int, pp: int, m: int) -> str:
        """What the bubble is here: the costed rank's wait, the busiest stage's, against the even-stage count."""
        if not self.paced:
            if len(set(self.stages)) > 1:  # (too many steps to simulate)
                return (f": of its {steps(pp, m, vp):,} forward and backward steps the schedule's steady part did not "
                        f"repeat within the {MAX_STEPS:,} the budget steps through: the even-stage count of the costed "
                        f"rank's micro-batch, {self.waits[rank] * 1e3:,.1f} ms, where the stages are uneven")
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
    if pp < 2 or len(set(paced)) == 1:
        return Bubble(even, mb, False, even)
    run = _simulated(tuple(f for f, _ in paced), tuple(b for _, b in paced), m, vp, group, extra_warmup)
    if run is None:
        return Bubble(even, mb, False, even)
    return Bubble(tuple(run.wait(r) for r in range(pp)), mb, True, even)


@functools.lru_cache(maxsize=32)
def _simulated(fwd: tuple, bwd: tuple, m: int, vp: int, group: int | None, extra_warmup: int) -> Paced | None:
    """simulate() within MAX_STEPS, once per stages' times: a flipped setting that leaves them (DP's, the
    optimizer's) reuses the base's run."""
    return simulate(list(fwd), list(bwd), m, vp, group, extra_warmup=extra_warmup, limit=MAX_STEPS)
