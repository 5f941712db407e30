"""Parity with optimum-rbln-cli (issue 41, item 11): the daemon's dry-run
FitMemoryBudget and SetKvcacheNumBlocks answers on random synthesized
artifacts against tests/upstream_reference.py, an independent reading of
upstream's rules.

Every case must agree with upstream (the same count, with upstream's
warnings about a count above the current one and above the full one; or
both refuse, the daemon as upstream's reason calls for: a budget that does
not parse or exceeds the device INVALID_ARGUMENT, a count below the minimum
BELOW_MIN_BLOCKS, a budget that fits fewer BUDGET_BELOW_MIN), or be one of
the differences docs/compatibility.md lists:
  bare-1          the budget "1", one byte to upstream, refused here;
  spelling        a budget spelled as Python reads it but this tool refuses
                  as a likely typo ("1.", "8e-1", "null", ...);
  nothing-fits    a budget no count fits, where upstream answers 1 block;
  no-resizable    no tensor resizes, where upstream rewrites the config;
  exceeds-device  a count the device cannot hold: a dry run answers it with
                  fits_device false (which must equal the reference's own fit
                  at the whole device), a write refuses it (checked on a few
                  artifacts: FAILED_PRECONDITION, EXCEEDS_DEVICE with the
                  largest count that fits, the files unchanged);
and one extension: "NGiB", which upstream does not parse, must give the
count upstream gives for "NGB".

Run by ctest with PYTHONPATH=<build>/python and RBLN_BIN_DIR=<build>/bin.
RBLN_PARITY_SEED picks the seed (printed, so a failure can be rerun),
RBLN_PARITY_CASES the number of cases (default 300), RBLN_PARITY_VERBOSE=1
prints every case.
"""

import ctypes
import ctypes.util
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter

sys.dont_write_bytecode = True

import grpc  # noqa: E402

from rbln.artifact.v1 import artifact_service_pb2 as pb  # noqa: E402
from rbln.artifact.v1 import artifact_service_pb2_grpc as pb_grpc  # noqa: E402
from rbln.artifact.v1 import container_pb2  # noqa: E402

import upstream_reference as upstream  # noqa: E402
# The daemon (spec-table DRAM: --rbln-smi none) and the ErrorDetail of a
# failed call, as the Python client test has them.
from python_client_test import BIN_DIR, Daemon, error_detail  # noqa: E402

DEFAULT_SEED = 41
RPC_TIMEOUT_S = 30
MIB = 2**20
GIB = 2**30
# The daemon's hard limit on a count (ErrorDetail.TOO_MANY_BLOCKS).
COUNT_LIMIT = 2**31 - 1

# The NPUs artifacts target, by family.
NPUS = {"RBLN-CA": ["RBLN-CA02", "RBLN-CA12", "RBLN-CA22"],
        "RBLN-CR": ["RBLN-CR03", "RBLN-CR13"]}

# Budgets upstream's parser reads that this tool refuses as likely typos
# (docs/compatibility.md): one of them per artifact.
LISTED_SPELLINGS = ("1.", "8e-1", "+0.5", "0.8_0", '"80%"', "null",
                    "10\tGB", "10  GB", "1.000000000000000001")

# Words the daemon's warnings share with upstream's two: the target is above
# the current count (issue 41, item 6), above the full count.
ABOVE_CURRENT_WARNING = "may fail to allocate at runtime"
ABOVE_FULL_WARNING = "never used"


# Random artifacts.


def draw_shape(rng, index):
    """Synthesizer flags for artifact `index`: the attention kind, NPU family
    and device count cycle so that a short run still covers each."""
    attn = ("flash_attn", "eager")[index % 2]
    family = ("RBLN-CA", "RBLN-CR")[(index // 2) % 2]
    devices = (1, 2, 4)[(index // 4) % 3]
    layers = rng.randint(2, 24)
    kv_heads = devices * rng.choice((1, 2, 4))
    head_dim = rng.choice((64, 128, 256))
    dtype = rng.choice(("float16", "bfloat16", "float32"))
    if attn == "flash_attn":
        block = rng.choice((1024, 2048, 4096))
        partitions = rng.randint(2, 16)
        max_seq_len = block * partitions
        # Batch sizes below and above max_seq_len / block_size: the two
        # sides of the flash minimum.
        if rng.random() < 0.5:
            batch = rng.randint(1, partitions)
        else:
            batch = rng.randint(partitions, 2 * partitions + 2)
    else:
        max_seq_len = block = rng.choice((1024, 2048, 4096, 8192))
        batch = rng.randint(1, 16)
    decoder_batches = sorted({batch} | {b for b in (1, batch // 2, batch - 1)
                                        if b >= 1 and rng.random() < 0.4})
    flags = ["--npu", rng.choice(NPUS[family]), "--attn-impl", attn,
             "--num-devices", str(devices), "--layers", str(layers),
             "--kv-heads", str(kv_heads), "--head-dim", str(head_dim),
             "--dtype", dtype, "--max-seq-len", str(max_seq_len),
             "--block-size", str(block), "--batch-size", str(batch),
             "--decoder-batch-sizes"] + [str(b) for b in decoder_batches]
    if rng.random() < 0.35:
        sliding = sorted(rng.sample(range(layers), rng.randint(1, layers - 1)))
        window = rng.choice((256, 512, 1024, 4096))
        flags += (["--sliding-window-layers"] +
                  [str(layer) for layer in sliding] +
                  ["--sliding-window", str(window)])
    # Weights up to three quarters of the devices' available DRAM (upstream's
    # _dram_spec), so that some budgets fit every block and some few.
    dram, reserved = upstream.dram_spec(family)
    chiplets = 1 if family == "RBLN-CA" else 4
    available = (dram // chiplets - reserved) * chiplets
    weights = int(devices * available * rng.uniform(0.02, 0.75))
    flags += ["--weight-bytes", "%dB" % weights]
    full = (max_seq_len // block) * batch
    if rng.random() < 0.5:
        flags += ["--kvcache-num-blocks", str(rng.randint(1, 2 * full + 2))]
    return flags


def synthesize(rng, index, store):
    """A random artifact in the store; returns (name, synthesizer flags).
    A draw the synthesizer refuses (a model that does not fit, say) is
    replaced by another."""
    name = "a%02d" % index
    for _ in range(8):
        flags = draw_shape(rng, index)
        command = [os.path.join(BIN_DIR, "rbln-artifact-synth"),
                   "--payload-bytes", "4KiB",
                   "--out", os.path.join(store, name)] + flags
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=60)
        if done.returncode == 0:
            break
        if done.returncode != 1:
            raise RuntimeError("rbln-artifact-synth %s: %s" %
                               (" ".join(flags), done.stderr.strip()))
    else:
        raise RuntimeError("no artifact the synthesizer accepts for %s" % name)
    edit = ""
    # Some artifacts as optimum-rbln writes them less often: an older config
    # without layer_type, and one where no tensor resizes (every
    # full-attention cache compiled with a fixed count).
    if index % 7 == 3:
        edit = "no layer_type"
        rewrite_metas(store, name, lambda m: m.pop("layer_type", None))
    elif index % 11 == 5:
        edit = "no resizable tensor"
        rewrite_metas(store, name, lambda m: m.update(is_auto=False))
        for entry in os.listdir(os.path.join(store, name)):
            if entry.endswith(".rbln"):
                rewrite_header(os.path.join(store, name, entry), fix_tensors)
    return name, flags, edit


def rewrite_metas(store, name, change):
    path = os.path.join(store, name, "rbln_config.json")
    with open(path) as f:
        config = json.load(f)
    key = "cache_metas" if "cache_metas" in config else "kvcache_metas"
    for meta in config.get(key) or []:
        change(meta)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def fix_tensors(header):
    for tensor in header.kv_tensors:
        tensor.resizable = False


_xxhash = None


def xxh64(data):
    """XXH64 with seed 0, from the libxxhash the daemon links."""
    global _xxhash
    if _xxhash is None:
        library = ctypes.CDLL(ctypes.util.find_library("xxhash") or
                              "libxxhash.so.0")
        library.XXH64.restype = ctypes.c_uint64
        library.XXH64.argtypes = (ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_uint64)
        _xxhash = library
        # The examples of docs/rbln-container.md, section 2.
        assert xxh64(b"") == 0xEF46DB3751D8E999
        assert xxh64(b"example payload\n") == 0xA7259AD5BCB22A26
    return _xxhash.XXH64(data, len(data), 0)


def rewrite_header(path, change):
    """Changes a container's header in place (docs/rbln-container.md): the
    new header in the old region, then both checksums of the preamble."""
    with open(path, "r+b") as f:
        preamble = bytearray(f.read(128))
        offset, length, capacity = struct.unpack_from("<QQQ", preamble, 16)
        f.seek(offset)
        header = container_pb2.ContainerHeader.FromString(f.read(length))
        change(header)
        data = header.SerializeToString(deterministic=True)
        if len(data) > capacity:
            raise RuntimeError("%s: the new header does not fit" % path)
        f.seek(offset)
        f.write(data + bytes(max(0, length - len(data))))
        struct.pack_into("<QQ", preamble, 24, len(data), capacity)
        struct.pack_into("<Q", preamble, 56, xxh64(data))
        struct.pack_into("<Q", preamble, 120, xxh64(bytes(preamble[:120])))
        f.seek(0)
        f.write(preamble)


# Budgets and counts for one artifact.


def bytes_needed(ref, plan, num_blocks):
    """The per-chiplet bytes the tightest bucket needs at num_blocks."""
    other, kv_sizes, buckets, _ = plan
    kv = ref.kv_bytes_per_bucket(kv_sizes, num_blocks)
    return max(other.get(b, 0) + kv.get(b, 0) for b in buckets)


def draw_budgets(rng, index, ref):
    """About a dozen budgets: most of them between the bytes the minimum
    count needs and those the full count needs, where the answer is a count
    in between, spelled in every form; then the edge of a count (its exact
    bytes, one byte less, as a fraction, as a percentage), one nothing fits,
    one above the device."""
    plan = ref.memory_plan()
    chiplets = plan[3]
    total = ref.available_total(chiplets)
    low = total
    if ref.has_resizable_tensor:
        low = bytes_needed(ref, plan, max(ref.num_min_blocks, 1)) * chiplets
        high = min(total, bytes_needed(ref, plan, ref.num_full_blocks) *
                   chiplets * 21 // 20)
    if low >= total or not ref.has_resizable_tensor:
        low, high = MIB, total  # no count in between: anywhere, then

    def band():
        return rng.randint(low, max(low, high))

    budgets = [
        "%.*f" % (rng.choice((2, 3, 7)), band() / total),
        "%.*f" % (rng.choice((2, 3)), rng.uniform(0.05, 0.99)),
        ("1.0", "100%", ".8", "1")[index % 4],
        rng.choice(("%d%%" % max(1, round(100 * band() / total)),
                    "%.1f%%" % max(0.1, 100 * band() / total))),
        "%d%s" % (max(1, round(band() / GIB)), rng.choice(("GB", "gb", "Gb"))),
        "%dGiB" % max(1, round(band() / GIB)),
        "%dMB" % max(1, band() // MIB),
        str(band()),
    ]
    if ref.has_resizable_tensor:
        edge = bytes_needed(ref, plan, rng.randint(1, ref.num_full_blocks))
        edge *= chiplets
        # The same edge as a fraction and a percentage with all the digits a
        # double has: upstream multiplies in floating point and truncates.
        budgets += [str(max(MIB, edge)), str(max(MIB, edge - 1)),
                    "%.17g" % (edge / total), "%.15g%%" % (100 * edge / total)]
        nothing = bytes_needed(ref, plan, 1) * chiplets - 1
        budgets.append(str(nothing) if MIB <= nothing <= total else "2MB")
    else:
        budgets += ["50%", "2MB"]
    budgets.append(rng.choice(("%dGB" % (total // GIB + 1), "1TB", "1.5")))
    budgets.append(LISTED_SPELLINGS[index % len(LISTED_SPELLINGS)])
    return budgets


def draw_counts(rng, index, ref):
    low = ref.num_min_blocks
    current = ref.kvcache_num_blocks
    full = ref.num_full_blocks
    candidates = [rng.randint(current + 1, max(current + 1, full)),
                  full + rng.randint(1, 8)]
    max_fit = ref.max_fitting_num_blocks(cap_at_full=False)
    if max_fit is not None:
        candidates.append(max_fit + rng.randint(1, 4))
    else:
        candidates.append(current + 1)
    del candidates[index % 3]
    return [max(low - 1, 0), low] + candidates


# Comparing one case.


class Tally:
    """Cases by kind, and the disagreements in full."""

    def __init__(self):
        self.kinds = Counter()
        self.disagreements = []
        self.verbose = os.environ.get("RBLN_PARITY_VERBOSE") == "1"

    @property
    def cases(self):
        return sum(self.kinds.values())

    def record(self, kind, case, ours, theirs, why=None):
        """why: None when the case is as it should be, else what differs."""
        if why is not None:
            kind = "DISAGREE"
            self.disagreements.append((case, ours, theirs, why))
        self.kinds[kind] += 1
        if self.verbose:
            print("%-16s %s\n    daemon:   %s\n    upstream: %s%s" %
                  (kind, case, ours, theirs, "\n    " + why if why else ""))


def call(method, request):
    """(reply, None) or (None, the grpc.RpcError)."""
    try:
        return method(request, timeout=RPC_TIMEOUT_S), None
    except grpc.RpcError as error:
        return None, error


def describe(reply, error):
    if error is not None:
        detail = error_detail(error)
        reason = (" [%s]" % pb.ErrorDetail.Reason.Name(detail.reason)
                  if detail else "")
        return "%s%s: %s" % (error.code().name, reason, error.details())
    fits = (str(reply.fits_device) if reply.HasField("fits_device")
            else "unset")
    return "OK %d -> %d, fits_device %s, warnings %s" % (
        reply.previous_num_blocks, reply.new_num_blocks, fits,
        list(reply.warnings))


def describe_outcome(outcome):
    if outcome.error is not None:
        return "refuses: %s" % outcome.error
    return "writes %d%s, warnings %s" % (
        outcome.target, " (no count fit; fell back to 1)"
        if outcome.nothing_fit else "", outcome.warnings)


def warning_mismatch(reply, outcome):
    """Why the daemon's warnings do not say what upstream's do, or None."""
    said = " ".join(reply.warnings)
    for needle, upstream_words in ((ABOVE_CURRENT_WARNING, "above current"),
                                   (ABOVE_FULL_WARNING, "above full")):
        theirs = any(needle in w for w in outcome.warnings)
        ours = needle in said
        if theirs != ours:
            return "upstream %s the %s warning, the daemon %s" % (
                "gives" if theirs else "does not give", upstream_words,
                "does" if ours else "does not")
    return None


# How the daemon refuses what upstream refuses, by upstream's reason; an
# "artifact" refusal (one upstream cannot read) may be any.
EXPECTED_REFUSALS = {
    ("budget", "budget"): (grpc.StatusCode.INVALID_ARGUMENT, None),
    ("budget", "below-min"): (grpc.StatusCode.FAILED_PRECONDITION,
                              pb.ErrorDetail.BUDGET_BELOW_MIN),
    ("count", "below-min"): (grpc.StatusCode.INVALID_ARGUMENT,
                             pb.ErrorDetail.BELOW_MIN_BLOCKS),
}


def refusal_mismatch(error, code, reason=None):
    """Why error is not `code` with ErrorDetail `reason`, or None."""
    if error.code() != code:
        return "not %s" % code.name
    detail = error_detail(error)
    if reason is not None and (detail is None or detail.reason != reason):
        return "no ErrorDetail %s" % pb.ErrorDetail.Reason.Name(reason)
    return None


def judge_refusal(what, ref, outcome, error, budget):
    """(kind, why) for a request the daemon refused."""
    if what == "budget" and budget == "1":
        return "bare-1", refusal_mismatch(error,
                                          grpc.StatusCode.INVALID_ARGUMENT)
    if what == "budget" and budget in LISTED_SPELLINGS:
        return "spelling", refusal_mismatch(error,
                                            grpc.StatusCode.INVALID_ARGUMENT)
    kind = "both refuse" if outcome.error is not None else None
    expected = EXPECTED_REFUSALS.get((what, outcome.refusal))
    why = (refusal_mismatch(error, *expected) if expected else None)
    if why is not None:
        why = "both refuse, but for upstream's reason: " + why
    if not ref.has_resizable_tensor and (
            error.code() == grpc.StatusCode.FAILED_PRECONDITION and
            "no resizable" in error.details()):
        # Refused for the artifact before the request's own fault: fine.
        return kind or "no-resizable", None
    if kind is not None:
        return kind, why
    if not ref.has_resizable_tensor:
        return None, "no tensor resizes: FAILED_PRECONDITION saying so"
    if what == "budget" and outcome.nothing_fit and outcome.target == 1:
        return "nothing-fits", refusal_mismatch(
            error, grpc.StatusCode.FAILED_PRECONDITION,
            pb.ErrorDetail.BUDGET_BELOW_MIN)
    return None, "the daemon refuses what upstream writes"


def judge_answer(ref, reply, outcome):
    """(kind, why) for a request the daemon answered."""
    if outcome.error is not None:
        return None, "the daemon answers what upstream refuses"
    if reply.new_num_blocks != outcome.target:
        return None, "counts differ"
    if not reply.HasField("fits_device"):
        return None, "fits_device unset although the artifact names its NPU"
    fits = ref.fits_device(outcome.target)
    if reply.fits_device != fits:
        return None, "fits_device %s, the reference's fit at the device %s" % (
            reply.fits_device, fits)
    kind = "agree" if fits else "exceeds-device (dry run)"
    return kind, warning_mismatch(reply, outcome)


def check(stub, tally, name, ref, what, value, case_prefix):
    """One dry run: a budget (what "budget") or a count ("count")."""
    options = pb.WriteOptions(dry_run=True)
    extension = what == "budget" and value.lower().endswith("gib")
    if what == "budget":
        # Upstream reads no GiB; its GB are the same bytes.
        asked = value[:-3] + "GB" if extension else value
        outcome = ref.set_memory_budget(asked)
        reply, error = call(stub.FitMemoryBudget, pb.FitMemoryBudgetRequest(
            artifact=name, budget=value, options=options))
        case = "%s budget %r" % (case_prefix, value)
    else:
        outcome = ref.set_kvcache_num_blocks(value)
        reply, error = call(stub.SetKvcacheNumBlocks,
                            pb.SetKvcacheNumBlocksRequest(
                                artifact=name, num_blocks=value,
                                options=options))
        case = "%s count %d" % (case_prefix, value)
    if error is not None:
        kind, why = judge_refusal(what, ref, outcome, error, value)
    else:
        kind, why = judge_answer(ref, reply, outcome)
    if extension and kind == "agree":
        kind = "GiB extension"
    theirs = describe_outcome(outcome)
    if extension:
        theirs = "(for %s) %s" % (asked, theirs)
    tally.record(kind, case, describe(reply, error), theirs, why)


def artifact_digest(directory):
    digest = hashlib.sha256()
    for entry in sorted(os.listdir(directory)):
        digest.update(entry.encode() + b"\0")
        with open(os.path.join(directory, entry), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def check_refused_write(stub, tally, store, name, ref, case_prefix):
    """A real Set of one block more than the device holds, without force:
    refused with EXCEEDS_DEVICE and the largest count that fits (as
    upstream's search at 100% of the device finds it: at most the full
    count), and not a byte of the artifact changed."""
    count = ref.max_fitting_num_blocks(cap_at_full=False) + 1
    max_fit = ref.max_fitting_num_blocks()
    before = artifact_digest(os.path.join(store, name))
    reply, error = call(stub.SetKvcacheNumBlocks,
                        pb.SetKvcacheNumBlocksRequest(artifact=name,
                                                      num_blocks=count))
    if error is None:
        why = "written although the device cannot hold it"
    else:
        why = refusal_mismatch(error, grpc.StatusCode.FAILED_PRECONDITION,
                               pb.ErrorDetail.EXCEEDS_DEVICE)
        detail = error_detail(error)
        if why is None and not detail.HasField("max_fitting_num_blocks"):
            why = "no max_fitting_num_blocks"
        elif why is None and detail.max_fitting_num_blocks != max_fit:
            why = "max_fitting_num_blocks %d, the reference %d" % (
                detail.max_fitting_num_blocks, max_fit)
    if artifact_digest(os.path.join(store, name)) != before:
        why = (why + "; " if why else "") + "the artifact's bytes changed"
    tally.record("exceeds-device (write)",
                 "%s set %d (written, no force)" % (case_prefix, count),
                 describe(reply, error),
                 "cannot hold it: %d blocks fit the device" % max_fit, why)


def run(seed, cases, root):
    rng = random.Random(seed)
    store = os.path.join(root, "store")
    os.mkdir(store)
    tally = Tally()
    # A short run (the sanitizer build's) takes a few cases of each of more
    # artifacts, so that it still meets every kind of artifact.
    per_artifact = max(5, cases // 12)
    daemon = Daemon(store, os.path.join(root, "d.sock"))
    try:
        with grpc.insecure_channel("unix:" + daemon.socket_path) as channel:
            stub = pb_grpc.ArtifactServiceStub(channel)
            index = 0
            while tally.cases < cases:
                name, flags, edit = synthesize(rng, index, store)
                prefix = "seed %d, artifact %s (synth %s%s)," % (
                    seed, name, " ".join(flags),
                    "; then " + edit if edit else "")
                ref = upstream.Artifact(os.path.join(store, name))
                work = ([("budget", b)
                         for b in draw_budgets(rng, index, ref)] +
                        [("count", c) for c in draw_counts(rng, index, ref)])
                if len(work) > per_artifact:
                    work = sorted(rng.sample(work, per_artifact),
                                  key=work.index)
                for what, value in work:
                    if tally.cases >= cases:
                        break
                    check(stub, tally, name, ref, what, value, prefix)
                # Last: on an old daemon the write changes the artifact.
                max_fit = ref.max_fitting_num_blocks(cap_at_full=False)
                if (index % 4 == 1 and tally.cases < cases and
                        max_fit is not None and
                        ref.num_min_blocks <= max_fit < COUNT_LIMIT):
                    check_refused_write(stub, tally, store, name, ref, prefix)
                index += 1
    finally:
        daemon.stop()
    return tally, index


def main():
    if not BIN_DIR:
        print("RBLN_BIN_DIR is not set (run through ctest)", file=sys.stderr)
        return 2
    seed = int(os.environ.get("RBLN_PARITY_SEED") or DEFAULT_SEED)
    cases = int(os.environ.get("RBLN_PARITY_CASES") or 300)
    print("upstream parity: seed %d (RBLN_PARITY_SEED=%d reruns it), %d cases"
          % (seed, seed, cases))
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="rbln-parity-")
    try:
        tally, artifacts = run(seed, cases, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    agreed = tally.kinds["agree"] + tally.kinds["both refuse"]
    listed = ", ".join("%s %d" % (k, tally.kinds[k]) for k in (
        "bare-1", "spelling", "nothing-fits", "no-resizable", "exceeds-device (dry run)",
        "exceeds-device (write)"))
    print("upstream parity: seed %d: %d cases on %d artifacts in %.1f s: %d "
          "agree (%d both refuse), %d GiB extension; listed differences: %s; "
          "%d disagree" % (seed, tally.cases, artifacts,
                           time.monotonic() - started, agreed,
                           tally.kinds["both refuse"],
                           tally.kinds["GiB extension"], listed,
                           len(tally.disagreements)))
    if not tally.disagreements:
        return 0
    for case, ours, theirs, why in tally.disagreements:
        print("\nDISAGREEMENT (seed %d): %s\n  %s\n  daemon:   %s\n"
              "  upstream: %s" % (seed, case, why, ours, theirs))
    return 1


if __name__ == "__main__":
    sys.exit(main())
