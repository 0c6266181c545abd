"""What a run shows and keeps of its steps: the per-step figures
of Algorithm 1 that metrics.jsonl and the console report: how each role's responses were parsed (format failures
apart from wrong work), what a step's rollout and teacher did as sums that ranks add up, the means a step reports
from those sums (A^OPD, A^role, the reverse-KL estimate per role, Eq. 5, 8, 9), and the cost of a step (per-phase
seconds, peak memory); the step's one console line; the few responses per step the run report's heat maps show
(report.py); and the figures of an evaluation run (run_figures, Fig. 3-4) and over its seeds (mean_std).
"""

import resource
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from infra.data import append_episodes, json_text
from loss import opd_advantage, role_advantage
from scaling import distributed


def format_counts(episodes):
    """Per role, how its responses were parsed under the rules of DECISIONS.md D5 (prompts.py): {role: {"responses":
    n, rule: count, ..., "truncated": count, "unparsed": count}}, rule as named by extract_program /
    extract_test_case / extract_answer. A response with no readable artefact is "truncated" when the response limit
    cut it (e.g. inside its opened code block: a length problem) and "unparsed" when it ended by itself (a format
    problem). Every agent counts once, under its role."""
    out = {}
    for e in episodes:
        for turn in e.turns:
            parsed_by = turn.parsed_by  # a team's turn reads it from its pairings
            for seat, resp in turn.responses.items():
                c = out.setdefault(
                    resp.role, {"responses": 0, "truncated": 0, "unparsed": 0}
                )
                c["responses"] += 1
                rule = parsed_by[seat] or (
                    "truncated" if resp.truncated else "unparsed"
                )
                c[rule] = c.get(rule, 0) + 1
    return out


def format_shares(counts):
    """format_counts' counts (or their sums over ranks) as % of each role's responses: {role: {rule: %}}."""
    return {
        role: {
            k: 100 * v / c["responses"]
            for k, v in sorted(c.items())
            if k != "responses"
        }
        for role, c in sorted(counts.items())
        if c["responses"]
    }


def format_metrics(episodes, roles=None):
    """Per role (of `roles`, default all), the % of its responses read by each parsing rule
    (DECISIONS.md D5) and the % whose artefact could not be read at all: parse_truncated_ROLE when
    the response limit cut it (a length problem), parse_unparsed_ROLE when it ended without one (a
    format problem); neither is wrong work (App. D.5 scoring)."""
    shares = format_shares(format_counts(episodes))
    return {
        f"parse_{rule}_{role}": v
        for role, of_role in shares.items()
        if roles is None or role in roles
        for rule, v in of_role.items()
    }


def squash_spaces(value):
    """Artefacts compared for 'revised': whitespace-insensitive text, not meaning (DECISIONS.md D10)."""
    return None if value is None else " ".join(value.split())


def revision_counts(decisions):
    """Fig. 4a-b: each decision (role, ok, before, after) is an agent's at a disagreeing turn t with a turn t+1,
    ok its own check at t (None: undecided, skipped), before and after its own artefact at t and t+1 (tuples of
    texts); it succeeds iff it revised exactly when its check failed. Returns per role the counts of n, success,
    revised_when_right and kept_when_wrong."""
    stats = {}
    for role, ok, before, after in decisions:
        if ok is None:
            continue
        revised = any(
            squash_spaces(b) != squash_spaces(a) for b, a in zip(before, after)
        )
        s = stats.setdefault(
            role, {"n": 0, "success": 0, "revised_when_right": 0, "kept_when_wrong": 0}
        )
        s["n"] += 1
        s["success"] += revised == (not ok)
        s["revised_when_right"] += revised and ok
        s["kept_when_wrong"] += (not revised) and (not ok)
    return stats


def run_figures(episodes, attributions, solved, decisions):
    """The figures of one evaluation run (App. D.5, Fig. 4): accuracy (solved(episode, its attributions)) and turns
    per domain, revise-iff-wrong and its two failure modes per role (revision_counts of decisions(episodes,
    attributions)), and the parsing shares (format_metrics)."""
    m = {}
    for domain in ("code", "math"):
        mine = [
            (e, atts)
            for e, atts in zip(episodes, attributions)
            if e.problem["domain"] == domain
        ]
        if mine:
            m[f"acc_{domain}"] = (
                100 * sum(solved(e, atts) for e, atts in mine) / len(mine)
            )
            # no agreement: T turns
            m[f"turns_{domain}"] = sum(len(e.turns) for e, _ in mine) / len(mine)
    for role, s in revision_counts(decisions(episodes, attributions)).items():
        if s["n"]:
            m[f"revise_iff_wrong_{role}"] = 100 * s["success"] / s["n"]
            m[f"revised_when_right_{role}"] = 100 * s["revised_when_right"] / s["n"]
            m[f"kept_when_wrong_{role}"] = 100 * s["kept_when_wrong"] / s["n"]
    return {**m, **format_metrics(episodes)}


def exchange_penalty(own, exchanged):
    """Fig. 3a: the accuracy the exchanged seats lose, per domain (points)."""
    return {
        f"exchange_penalty_{d}": own[f"acc_{d}"] - exchanged[f"acc_{d}"]
        for d in ("code", "math")
        if f"acc_{d}" in exchanged
    }


def mean_std(per_seed):
    """An evaluation's figures over its seeds: {metric: {"mean", "std"}} from one dict per seed (std 0 for one)."""
    keys = sorted({k for m in per_seed for k in m})
    out = {}
    for k in keys:
        vals = [m[k] for m in per_seed if k in m]
        std = statistics.stdev(vals) if len(vals) > 1 else 0.0
        out[k] = {"mean": statistics.fmean(vals), "std": std}
    return out


@dataclass
class StepLog:
    """What a run keeps of one step of Algorithm 1 beside its update: the seconds of each phase, to
    the millisecond (cf. App. D.6.4, Table 4), with `show` a line naming the phase that runs and the
    seconds of those done; the step's episodes (`episodes`: the JSONL file of --save-episodes); a
    few scored responses for the run report's heat maps (`samples`: a JSONL file, written when
    given); and the step's metrics.jsonl record, its figures summed over ranks (close)."""

    step: int
    device: str = "cpu"  # whose peak memory the record reports
    show: bool = False
    # append the step's episodes here (data.append_episodes)
    episodes: str | None = None
    samples: str | None = None  # append step_samples here
    tok: object = None  # the students' tokenizer, for the samples' token texts
    seconds: dict = field(default_factory=dict)  # phase -> seconds, as each ends

    def __post_init__(self):
        self.line = tqdm(
            total=0, bar_format="{desc}", leave=False, disable=not self.show
        )

    @contextmanager
    def phase(self, name):
        """`with log.phase("rollout"): ...` times one phase."""
        done = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
        self.line.set_description_str(f"step {self.step}: {name} (done: {done})")
        start = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - start, 3)

    def record(self, episodes):
        """The step's episodes, appended as the rollout ends (so a later phase's crash keeps them)."""
        if self.episodes:
            append_episodes(self.episodes, episodes, step=self.step)

    def sample(self, items, batch):
        """A few scored responses for the heat maps (step_samples); batch: the step's problems."""
        if self.samples:
            with open(self.samples, "a") as f:
                f.writelines(
                    json_text(s) + "\n"
                    for s in step_samples(self.step, items, batch, self.tok)
                )

    def close(self, counts, updated, figures=None):
        """The step's metrics.jsonl record. counts: what this rank's step did as sums (rollout_counts),
        added up over every rank here; figures: the record's figures from those sums (default
        rollout_metrics); updated: train.update's figures. Clears the progress line."""
        total = add_counts(distributed.gather(counts))
        self.line.close()
        return {
            "step": self.step,
            **(figures or rollout_metrics)(total),
            **updated,
            "seconds": self.seconds,
            "peak_memory_mb": round(peak_memory_mb(self.device), 1),
        }


def rollout_counts(episodes, attributions, items, overlong):
    """What this rank's rollout and teacher did, as sums, so that ranks add up (add_counts): episodes, turns,
    conflicts, stops, verdict outcomes (App. F.6), tokens, and per seat (under "roles": a pair's seats are its roles)
    the token sums of A^OPD (Eq. 8), A^role (Eq. 9) and the sampled reverse-KL estimate log pi_theta - log pi_T that
    Eq. 5 minimises. attributions: one list per episode (attribution.attribute_episodes)."""
    atts = [a for per_episode in attributions for a in per_episode]
    roles = {}
    for seat in sorted({it.seat for it in items}):
        mine = [it for it in items if it.seat == seat]
        lp_s, lp_t, lp_c = (
            torch.cat([getattr(it, k) for it in mine])
            for k in ("lp_student", "lp_target", "lp_contrast")
        )
        roles[seat] = {
            "a_opd": opd_advantage(lp_t, lp_s).sum().item(),
            "a_role": role_advantage(lp_t, lp_c).sum().item(),
            "reverse_kl": (lp_s - lp_t).sum().item(),
            "responses": len(mine),
            "tokens": len(lp_s),
        }
    return {
        "tokens": {
            "rollout": sum(len(it.response.tokens) for it in items),
            "teacher": sum(
                len(it.ctx_target) + len(it.ctx_contrast) + 2 * len(it.response.tokens)
                for it in items
            ),
        },
        "roles": roles,
        "episodes": len(episodes),
        "turns": sum(len(e.turns) for e in episodes),
        "conflicts": sum(not t.agree for e in episodes for t in e.turns),
        "attributed": len(atts),
        "stopped": {
            k: sum(e.stopped == k for e in episodes)
            for k in {e.stopped for e in episodes}
        },
        "outcomes": {
            k: sum(a.outcome == k for a in atts) for k in {a.outcome for a in atts}
        },
        "format": format_counts(episodes),
        "teacher_overlong": overlong,
    }


def add_counts(parts):
    """Nested dicts of numbers summed key by key (a key missing from one counts as 0)."""
    out = {}
    for part in parts:
        for k, v in part.items():
            out[k] = (
                add_counts([out.get(k, {}), v])
                if isinstance(v, dict)
                else out.get(k, 0) + v
            )
    return out


def rollout_metrics(c):
    """The step's metrics from the counts of all ranks: per-role means per token, turns per episode, conflict rate."""
    means = ("a_opd", "a_role", "reverse_kl")
    return {
        "tokens": c["tokens"],
        "roles": {
            r: {
                **{k: s[k] / max(1, s["tokens"]) for k in means},
                "responses": s["responses"],
                "tokens": s["tokens"],
            }
            for r, s in sorted(c.get("roles", {}).items())
        },
        "turns_per_episode": c["turns"] / max(1, c["episodes"]),
        "conflict_rate": c["conflicts"] / max(1, c["attributed"]),
        "stopped": dict(sorted(c.get("stopped", {}).items())),
        "outcomes": dict(sorted(c.get("outcomes", {}).items())),
        "format": format_shares(c.get("format", {})),
        "teacher_overlong": c["teacher_overlong"],
    }


def logprob_gap(logps, items):
    """|trainer - sampler| log pi_theta (Eq. 8) per token of one micro-batch of train.Scored items and their
    re-scored log-probs, as (max, sum, count), so that ranks add up (gap_metrics); None without a sampled response
    (a micro-batch of sharding.Padding, episode -1)."""
    pairs = [(lp, it) for lp, it in zip(logps, items) if it.episode >= 0]
    if not pairs:
        return None
    gaps = torch.cat([(lp.detach().cpu() - it.lp_student).abs() for lp, it in pairs])
    return gaps.max().item(), gaps.sum().item(), gaps.numel()


def gap_metrics(parts):
    """logprob_gap (the max) and logprob_gap_mean from every rank's logprob_gap (None: a rank without one); 0 would
    be exactly on-policy (train.joint_rollout says where a gap comes from)."""
    gaps = [g for g in parts if g is not None]
    if not gaps:
        return {}
    return {
        "logprob_gap": max(g[0] for g in gaps),
        "logprob_gap_mean": sum(g[1] for g in gaps) / max(1, sum(g[2] for g in gaps)),
    }


def step_line(m):
    """A step's one console line, from its metrics.jsonl record m: the loss of Eq. 13 (the mean over the step's
    optimizer updates), per scored token the reverse-KL estimate log pi_theta - log pi_T (Eq. 5) and A^role (Eq. 9)
    over all roles, the conflict rate, the step's seconds, and the skipped steps so far when there are any."""
    roles = m["roles"].values()
    tokens = max(1, sum(s["tokens"] for s in roles))
    per_token = lambda k: sum(s[k] * s["tokens"] for s in roles) / tokens
    loss = f"{sum(m['loss']) / len(m['loss']):.4f}" if m["loss"] else "-"
    skipped = f" | skipped {m['skipped_total']}" if m.get("skipped_total") else ""
    return (
        f"step {m['step']} | loss {loss} | reverse KL {per_token('reverse_kl'):.4f} | A^role "
        f"{per_token('a_role'):+.4f} | conflict {m['conflict_rate']:.2f} | {sum(m['seconds'].values()):.1f} s"
        + skipped
    )


def token_pieces(tok, tokens):
    """The text each token adds to the decoded response (the pieces join to about tok.decode(tokens)), decoded
    in windows of a few tokens so that leading spaces survive; a character split across tokens (UTF-8: at most 4
    bytes) goes to the token that completes it."""
    pieces, prefix, read = [], 0, 0
    for k in range(1, len(tokens) + 1):
        done, now = tok.decode(tokens[prefix:read]), tok.decode(tokens[prefix:k])
        if now.endswith("\ufffd") and k < len(tokens) and k - read < 4:
            pieces.append("")
            continue
        pieces.append(now[len(done) :])
        prefix, read = read, k
    return pieces


def step_samples(step, items, batch, tok, per_role=2):
    """A few of a step's scored responses for the run report's heat maps (report.py): per role, its first scored
    response in each of the first `per_role` episodes that have one, as {"step", "problem": its id, "role" (the seat),
    "pieces": the text of each token (token_pieces), "a_role": A^role per token (Eq. 9), "a_opd": A^OPD per
    token (Eq. 8)}. items: train.Scored after Phase 2 (lp_target, lp_contrast, lp_student, each (L,)); batch: the
    step's problems, indexed by Scored.episode."""
    chosen = {}
    for it in items:
        mine = chosen.setdefault(it.seat, {})
        if len(mine) < per_role and it.episode not in mine:
            mine[it.episode] = it
    return [
        {
            "step": step,
            "problem": batch[it.episode]["id"],
            "role": role,
            "pieces": token_pieces(tok, it.response.tokens),
            "a_role": role_advantage(it.lp_target, it.lp_contrast).tolist(),
            "a_opd": opd_advantage(it.lp_target, it.lp_student).tolist(),
        }
        for role, mine in sorted(chosen.items())
        for it in mine.values()
    ]


def peak_memory_mb(device):
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
