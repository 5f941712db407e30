"""FitTogether against an independent implementation (issue 46): on random
small groups of random synthesized artifacts (2 to 4 of one NPU family, 1
to 4 nodes each, RBLN-CA and RBLN-CR, random weights and budgets), the
daemon's dry-run counts must equal those of progressive filling computed
here from tests/upstream_reference.py's reading of the containers (which
shares no code with the daemon); no member may be able to take one more
block; and where the minimums do not fit, the daemon must refuse with
FAILED_PRECONDITION and GROUP_DOES_NOT_FIT. And FitMemoryBudget with
--beside C of A must answer as a fit of A alone against a byte budget
reduced by exactly C's aligned memory, computed here.

Run by ctest with PYTHONPATH=<build>/python and RBLN_BIN_DIR=<build>/bin.
RBLN_GROUP_SEED picks the seed (printed), RBLN_GROUP_CASES the number of
groups (default 150).
"""

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

sys.dont_write_bytecode = True

import grpc  # noqa: E402

from rbln.artifact.v1 import artifact_service_pb2 as pb  # noqa: E402
from rbln.artifact.v1 import artifact_service_pb2_grpc as pb_grpc  # noqa: E402

import upstream_reference as upstream  # noqa: E402
from parity_test import draw_shape  # noqa: E402
from python_client_test import BIN_DIR, Daemon, error_detail  # noqa: E402

DEFAULT_SEED = 46
ARTIFACTS = 16


def group_fit(refs, weights, per_chiplet):
    """Progressive filling (docs/memory-model.md, "Several artifacts on one
    device"): the counts, or None when the minimums do not fit."""
    plans = [ref.memory_plan() for ref in refs]

    def use(i, count):
        other, kv_sizes, buckets, _ = plans[i]
        kv = refs[i].kv_bytes_per_bucket(kv_sizes, count)
        return {b: other.get(b, 0) + kv.get(b, 0) for b in buckets}

    counts = [ref.num_min_blocks for ref in refs]
    held = [use(i, counts[i]) for i in range(len(refs))]
    totals = {}
    for uses in held:
        for bucket, nbytes in uses.items():
            totals[bucket] = totals.get(bucket, 0) + nbytes
    if any(total > per_chiplet for total in totals.values()):
        return None
    done = [counts[i] >= refs[i].num_full_blocks for i in range(len(refs))]
    while not all(done):
        i = min((i for i in range(len(refs)) if not done[i]),
                key=lambda i: (Fraction(counts[i],
                                        refs[i].num_full_blocks * weights[i]),
                               i))
        grown = use(i, counts[i] + 1)
        if all(totals[b] - held[i][b] + grown[b] <= per_chiplet
               for b in grown):
            for b in grown:
                totals[b] += grown[b] - held[i][b]
            held[i] = grown
            counts[i] += 1
            done[i] = counts[i] >= refs[i].num_full_blocks
        else:
            done[i] = True
    return counts


def fits_together(refs, counts, per_chiplet):
    totals = {}
    for ref, count in zip(refs, counts):
        other, kv_sizes, buckets, _ = ref.memory_plan()
        kv = ref.kv_bytes_per_bucket(kv_sizes, count)
        for b in buckets:
            totals[b] = totals.get(b, 0) + other.get(b, 0) + kv.get(b, 0)
    return all(total <= per_chiplet for total in totals.values())


def make_store(rng, store):
    """Random artifacts the reference reads, by family: {family: [(name,
    ref)]}."""
    by_family = {}
    index = 0
    while sum(len(v) for v in by_family.values()) < ARTIFACTS:
        index += 1
        name = "g%02d" % index
        flags = draw_shape(rng, index)
        # Lighter weights than parity_test's, so that groups of 2 to 4 fit
        # often: 1% to 20% of the devices' DRAM.
        at = flags.index("--weight-bytes")
        flags[at + 1] = "%dB" % int(int(flags[at + 1][:-1]) *
                                    rng.uniform(0.02, 0.25))
        done = subprocess.run(
            [os.path.join(BIN_DIR, "rbln-artifact-synth"), "--payload-bytes",
             "4KiB", "--out", os.path.join(store, name)] + flags,
            capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            continue  # a draw the synthesizer refuses
        ref = upstream.Artifact(os.path.join(store, name))
        if not ref.has_resizable_tensor:
            continue
        family = "RBLN-CR" if ref.npu.startswith("RBLN-CR") else "RBLN-CA"
        by_family.setdefault(family, []).append((name, ref))
    return by_family


def draw_budget(rng):
    kind = rng.random()
    if kind < 0.4:
        return "%.2f" % rng.uniform(0.2, 1.0)
    if kind < 0.8:
        return "%d%%" % rng.randint(20, 100)
    return "%dGB" % rng.randint(2, 14)


def run(seed, cases, root):
    rng = random.Random(seed)
    store = os.path.join(root, "store")
    os.makedirs(store)
    by_family = make_store(rng, store)
    daemon = Daemon(store, os.path.join(root, "d.sock"))
    failures, kinds = [], {"agree": 0, "both refuse": 0}
    skipped = 0
    try:
        stub = pb_grpc.ArtifactServiceStub(grpc.insecure_channel(daemon.address))
        families = [f for f, members in by_family.items() if len(members) >= 2]
        for case in range(cases):
            family = rng.choice(families)
            size = rng.randint(2, min(4, len(by_family[family])))
            members = rng.sample(by_family[family], size)
            weights = [rng.randint(1, 5) for _ in members]
            budget = draw_budget(rng)
            refs = [ref for _, ref in members]
            num_chiplets = max(ref.memory_plan()[3] for ref in refs)
            try:
                # The reference reads a fraction as a float, as upstream's
                # CLI hands it over.
                as_given = (float(budget) if "." in budget and
                            budget[-1].isdigit() else budget)
                per_chiplet = upstream.resolve_memory_budget(
                    as_given, refs[0].available_total(num_chiplets)) // \
                    num_chiplets
            except upstream.UpstreamError:
                skipped += 1  # e.g. a byte budget above the device
                continue
            expected = group_fit(refs, weights, per_chiplet)
            request = pb.FitTogetherRequest(
                members=[pb.Member(artifact=name, weight=w)
                         for (name, _), w in zip(members, weights)],
                budget=budget, options=pb.WriteOptions(dry_run=True))
            what = "case %d: %s weights %s budget %s" % (
                case, [name for name, _ in members], weights, budget)
            try:
                reply = stub.FitTogether(request, timeout=60)
            except grpc.RpcError as error:
                detail = error_detail(error)
                if (expected is None and
                        error.code() == grpc.StatusCode.FAILED_PRECONDITION and
                        detail is not None and
                        detail.reason == pb.ErrorDetail.GROUP_DOES_NOT_FIT):
                    kinds["both refuse"] += 1
                else:
                    failures.append("%s: daemon %s %s, reference %s" % (
                        what, error.code(), error.details(), expected))
                continue
            got = [m.new_num_blocks for m in reply.members]
            if got != expected:
                failures.append("%s: daemon %s, reference %s" % (
                    what, got, expected))
                continue
            for i, ref in enumerate(refs):
                if got[i] >= ref.num_full_blocks:
                    continue
                more = list(got)
                more[i] += 1
                if fits_together(refs, more, per_chiplet):
                    failures.append("%s: member %d could take one more" %
                                    (what, i))
            kinds["agree"] += 1
        kinds["beside"], more = beside_cases(rng, stub, by_family, 40)
        failures += more
    finally:
        daemon.stop()
    kinds["skipped"] = skipped
    return kinds, failures


def uses_at_current(ref):
    """Each bucket's whole memory at the artifact's current count."""
    other, kv_sizes, buckets, _ = ref.memory_plan()
    kv = ref.kv_bytes_per_bucket(kv_sizes, ref.kvcache_num_blocks or 1)
    return {b: other.get(b, 0) + kv.get(b, 0) for b in buckets}


def outcome(call):
    try:
        return call().new_num_blocks
    except grpc.RpcError as error:
        detail = error_detail(error)
        return (error.code(), detail.reason if detail else None)


def beside_cases(rng, stub, by_family, cases):
    """--beside C of A equals a fit of A alone against a byte budget
    reduced, per bucket, by exactly C's aligned memory (computed here from
    the reference): checked where C's use is the same in every bucket of A,
    so that the reduced budget is one byte count."""
    checked, failures = 0, []
    pairs = [(a, c) for members in by_family.values()
             for a in members for c in members if a[0] != c[0]]
    rng.shuffle(pairs)
    for (a_name, a_ref), (c_name, c_ref) in pairs:
        if checked >= cases:
            break
        c_use = uses_at_current(c_ref)
        a_buckets = a_ref.memory_plan()[2]
        if not a_buckets <= set(c_use) or \
                len({c_use[b] for b in a_buckets}) != 1:
            continue
        chiplets = max(b[1] for b in a_buckets) + 1
        per_chiplet = rng.randint(2, 14) * 2**30 // chiplets
        reduced = per_chiplet - c_use[next(iter(a_buckets))]
        if reduced < 2**20:
            continue
        budget = "%dB" % (per_chiplet * chiplets)
        beside = outcome(lambda: stub.FitMemoryBudget(
            pb.FitMemoryBudgetRequest(artifact=a_name, budget=budget,
                                      beside=[c_name],
                                      options=pb.WriteOptions(dry_run=True)),
            timeout=60))
        alone = outcome(lambda: stub.FitMemoryBudget(
            pb.FitMemoryBudgetRequest(artifact=a_name,
                                      budget="%dB" % (reduced * chiplets),
                                      options=pb.WriteOptions(dry_run=True)),
            timeout=60))
        checked += 1
        if beside != alone:
            failures.append("%s beside %s, budget %s: %s; alone with %dB: %s"
                            % (a_name, c_name, budget, beside,
                               reduced * chiplets, alone))
    return checked, failures


def main():
    seed = int(os.environ.get("RBLN_GROUP_SEED") or DEFAULT_SEED)
    cases = int(os.environ.get("RBLN_GROUP_CASES") or 150)
    print("group parity: seed %d (RBLN_GROUP_SEED=%d reruns it), %d groups" %
          (seed, seed, cases))
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="rbln-group-")
    try:
        kinds, failures = run(seed, cases, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("group parity: seed %d: %d agree, %d both refuse, %d disagree, %d "
          "skipped (a budget the reference refuses); --beside against a "
          "reduced budget: %d pairs; in %.1f s" % (
              seed, kinds["agree"], kinds["both refuse"], len(failures),
              kinds["skipped"], kinds["beside"], time.monotonic() - started))
    for failure in failures:
        print("DISAGREEMENT (seed %d): %s" % (seed, failure))
    if kinds["agree"] == 0 or kinds["beside"] == 0:
        print("no group was sized, or no --beside pair: the test checked "
              "too little")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
