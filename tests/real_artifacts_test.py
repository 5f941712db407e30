"""Real optimum-rbln artifacts end to end (issue 9): artifacts of the fake
rebel (tests/fake_rebel/) through the real rbln-artifactd, with the rebel
adapter (codecs/rebel/rbln_codec_rebel.py) as its --codec-command, driven by
the real client rbln-artifact --json.

Every fit is checked against optimum-rbln's rule computed here, from the
fake files' own numbers (per (node, chiplet) bucket, or per node for an
older compiler, with 2 MiB alignment), and against the built-in codec's
answer on a built-in artifact (rbln-artifact-synth) with the same numbers.
Broken codecs (tests/codecs/test_codec.py --mode ...) must fail one request
with a clear error, change nothing and leave nothing behind.

Run by ctest with PYTHONPATH=<build>/python (the generated stubs, among
them container_pb2 for the built-in header) and RBLN_BIN_DIR=<build>/bin.
"""

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
FAKE_REBEL = os.path.join(HERE, "fake_rebel")
sys.path.insert(0, HERE)
from reachable import copy_for_other_users  # noqa: E402

# As root the daemon runs its codec as nobody: copies that nobody can read.
PROGRAMS = copy_for_other_users(
    FAKE_REBEL, os.path.join(SOURCE_DIR, "codecs", "rebel",
                             "rbln_codec_rebel.py"),
    os.path.join(HERE, "codecs", "test_codec.py"))
CODEC_PYTHONPATH = os.path.join(PROGRAMS, "fake_rebel")
ADAPTER = os.path.join(PROGRAMS, "rbln_codec_rebel.py")
TEST_CODEC = os.path.join(PROGRAMS, "test_codec.py")
PYTHON = "/usr/bin/python3"
REBEL_CODEC = f"{PYTHON} {ADAPTER}"
CODEC_NAME = "external (rbln_codec_rebel.py)"
# Guards against a hung client; no test measures time.
CLI_TIMEOUT_S = 120
LOG_WAIT_S = 60

os.environ.pop("FAKE_REBEL_API", None)
os.environ.pop("FAKE_REBEL_CHATTER", None)
sys.path.insert(0, FAKE_REBEL)
import make_fake_artifact  # noqa: E402
import rebel  # noqa: E402  (the fake, per_chiplet: reads files of every API)
from python_client_test import BIN_DIR, Daemon  # noqa: E402
from rbln.artifact.v1 import container_pb2  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
ALIGNMENT = 2 * MiB
# docs/memory-model.md, "Available DRAM (spec table)": (per chiplet,
# chiplets per node).
SPEC_TABLE = {"RBLN-CA": (16 * GiB - 288 * MiB, 1),
              "RBLN-CR": (144 * GiB // 4 - GiB, 4)}
# The built-in container's preamble (docs/rbln-container.md §3).
CONTAINER_MAGIC = b"\x89RBL\r\n\x1a\n"
PREAMBLE = struct.Struct("<8sHHIQQQQQQ")


def align_2mib(size):
    return -(-size // ALIGNMENT) * ALIGNMENT


def available_per_chiplet(npu):
    for family, (per_chiplet, chiplets) in SPEC_TABLE.items():
        if npu.startswith(family):
            return per_chiplet, chiplets
    raise AssertionError(f"no spec-table entry for {npu}")


def fake_header(path):
    """The JSON line of a fake .rbln file."""
    with open(path, "rb") as f:
        if f.readline() != rebel.MAGIC:
            raise AssertionError(f"{path} is not a fake rebel file")
        return json.loads(f.readline())


def fake_payload(path):
    """The bytes of a fake .rbln after its two header lines."""
    with open(path, "rb") as f:
        f.readline()
        f.readline()
        return f.read()


def tree_state(root):
    """{relative path: (mode, sha256 of the content or None)} of everything
    under root, directories included."""
    state = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(parent, name)
            st = os.lstat(path)
            digest = None
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            state[os.path.relpath(path, root)] = (st.st_mode, digest)
    return state


def debris(root):
    """Staging, retired and codec scratch directories left under root."""
    return sorted(
        os.path.join(parent, name)
        for parent, dirs, files in os.walk(root) for name in dirs + files
        if ".staging" in name or ".retired-" in name
        or name.startswith(".codec-"))


# The fit of optimum-rbln, computed from the fake files' numbers. -----------


def optimum_fit(graphs, metas_resizable, current, full, budget, per_node):
    """The largest m in [1, full] that fits, else 0. graphs: the fake
    headers of every .rbln (the first is prefill); metas_resizable: {tensor:
    resizable}; budget: bytes per bucket. per_node: one bucket per node (an
    older compiler): other = the node's get_alloc_per_node_by_key without
    KV keys, each tensor's size on the node the sum over its chiplets."""
    prefill = graphs[0]
    nodes, chiplets = prefill["num_nodes"], prefill["chiplets_per_node"]

    def bucket_sum(grid, node, chiplet):
        return sum(grid[node]) if per_node else grid[node][chiplet]

    buckets = [(n, c) for n in range(nodes)
               for c in range(1 if per_node else chiplets)]
    other = {b: sum(bucket_sum(grid, *b) for g in graphs
                    for grid in g["alloc"].values()) for b in buckets}

    def fits(m):
        for b in buckets:
            kv = 0
            for name, grid in prefill["dram_tensors"].items():
                size = bucket_sum(grid, *b)
                if metas_resizable[name]:
                    kv += align_2mib(size * m // current)
                else:
                    kv += align_2mib(size)
            if other[b] + kv > budget:
                return False
        return True

    for m in range(full, 0, -1):
        if fits(m):
            return m
    return 0


def budget_per_bucket(budget, npu, per_node):
    """floor(f * available) for a fraction or percentage, X / chiplets (or X
    per node) for bytes."""
    per_chiplet, chiplets = available_per_chiplet(npu)
    available = per_chiplet * chiplets if per_node else per_chiplet
    if budget.endswith("%"):
        return available * int(budget[:-1]) // 100
    if budget.endswith("GiB"):
        total = int(budget[:-3]) * GiB
        return total if per_node else total // chiplets
    numerator, denominator = {"0.5": (1, 2), "0.9": (9, 10)}[budget]
    return available * numerator // denominator


# Artifacts. -----------------------------------------------------------------


def full_blocks(config):
    return (config["max_seq_len"] // config["kvcache_block_size"] *
            config["batch_size"])


def decoder_config(npu, tp, count, metas, metas_key="kvcache_metas"):
    config = {
        "cls_name": "RBLNLlamaForCausalLM",
        "npu": npu,
        "tensor_parallel_size": tp,
        "optimum_rbln_version": "0.9.3",
        "_compile_cfgs": [{"compiled_model_name": "prefill"},
                          {"compiled_model_name": "decoder_batch_8"}],
        "batch_size": 8,
        "max_seq_len": 131072,
        "attn_impl": "flash_attn",
        "kvcache_partition_len": 256,
        "kvcache_block_size": 256,
        "kvcache_num_blocks": count,
        "note": "caf\u00e9 \\/ one-line",
    }
    if metas is not None:
        config[metas_key] = metas
    return config


def asymmetric_models(npu, nodes, chiplets, current):
    """prefill and decoder_batch_8 where every bucket differs: three
    full-attention layers (K and V) and one sliding-window layer, sizes at
    `current` blocks, none a multiple of 2 MiB per block."""
    def grid(fn):
        return [[fn(n, c) for c in range(chiplets)] for n in range(nodes)]

    tensors = {}
    for layer in range(3):
        for kind, extra in (("key", 0), ("value", 1)):
            tensors[f"past_key_values.{layer}.{kind}"] = grid(
                lambda n, c, layer=layer, extra=extra: current * (
                    200000 + 30011 * layer + 7013 * c + 503 * n + extra))
    for kind in ("key", "value"):
        tensors[f"past_key_values.3.{kind}"] = grid(
            lambda n, c: 3 * MiB + 4096 * c + 512 * n)
    prefill = {"npu": npu, "num_nodes": nodes, "chiplets_per_node": chiplets,
               "alloc": {"weights": grid(
                   lambda n, c: 16 * GiB + 37 * MiB * c + 11 * MiB * n),
                   "program": grid(lambda n, c: 64 * MiB + 4096 * c)},
               "dram_tensors": tensors}
    decoder = dict(prefill, alloc={"workspace": grid(
        lambda n, c: 16 * MiB + 3 * MiB * c + MiB * n)})
    return {"prefill": prefill, "decoder_batch_8": decoder}


def metas_of(models, fixed=("past_key_values.3.key",
                            "past_key_values.3.value")):
    return [{"name": name, "layer_index": int(name.split(".")[1]),
             "shape": [8, 256, 128], "dtype": "float16",
             "layer_type": ("sliding_attention" if name in fixed else
                            "full_attention"),
             "is_auto": name not in fixed}
            for name in models["prefill"]["dram_tensors"]]


def flat_spec(npu="RBLN-CR03", nodes=2, current=512, metas_key="kvcache_metas",
              metas=None):
    chiplets = available_per_chiplet(npu)[1]
    models = asymmetric_models(npu, nodes, chiplets, current)
    if metas is None:
        metas = metas_of(models)
    return {"rbln_config": decoder_config(npu, nodes, current, metas,
                                          metas_key),
            "models": models, "payload_bytes": 100000,
            "companions": {"config.json": '{"model_type": "llama"}\n'},
            "submodule": None}


def builtin_as_fake_spec(builtin_dir):
    """The spec of a fake artifact with the memory numbers of a built-in one
    (rbln-artifact-synth's): each container's header read with the
    generated container_pb2, its allocations summed by key per (node,
    chiplet), its KV tensors as they are; the same rbln_config.json."""
    models = {}
    for name in sorted(os.listdir(builtin_dir)):
        if not name.endswith(".rbln"):
            continue
        with open(os.path.join(builtin_dir, name), "rb") as f:
            data = f.read()
        (magic, _, _, _, header_offset, header_length, _, _, _,
         _) = PREAMBLE.unpack_from(data)
        assert magic == CONTAINER_MAGIC, name
        header = container_pb2.ContainerHeader.FromString(
            data[header_offset:header_offset + header_length])
        nodes, chiplets = header.num_nodes, header.chiplets_per_node

        def add(grids, key, placements):
            grid = grids.setdefault(
                key, [[0] * chiplets for _ in range(nodes)])
            for p in placements:
                grid[p.node][p.chiplet] += p.bytes

        alloc, tensors = {}, {}
        for allocation in header.allocations:
            add(alloc, allocation.key, allocation.placements)
        for tensor in header.kv_tensors:
            add(tensors, tensor.name, tensor.placements)
        models[name[:-len(".rbln")]] = {
            "npu": header.npu, "num_nodes": nodes,
            "chiplets_per_node": chiplets, "alloc": alloc,
            "dram_tensors": tensors}
    with open(os.path.join(builtin_dir, "rbln_config.json")) as f:
        config = json.load(f)
    # prefill first: optimum_fit takes the KV tensors from the first graph.
    models = dict(sorted(models.items(), key=lambda kv: kv[0] != "prefill"))
    return {"rbln_config": config, "models": models, "payload_bytes": 4096,
            "submodule": None}


def resizable_of(config):
    """optimum-rbln's rule: is_auto and full attention (a missing layer_type
    is full attention); a can_resize key decides nothing."""
    metas = config.get("cache_metas", config.get("kvcache_metas"))
    return {m["name"]: m["is_auto"] and m.get(
        "layer_type", "full_attention") == "full_attention" for m in metas}


def daemon_env(api="per_chiplet", chatter=False):
    env = dict(os.environ, PYTHONPATH=CODEC_PYTHONPATH, FAKE_REBEL_API=api,
               PYTHONDONTWRITEBYTECODE="1")
    if chatter:
        env["FAKE_REBEL_CHATTER"] = "1"
    return env


class Base(unittest.TestCase):
    """A temporary store; helpers to run the client against a daemon."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="rbln-real-test-")
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.store = os.path.join(self.root, "store")
        os.mkdir(self.store)
        self.daemons = 0

    def start(self, codec=REBEL_CODEC, api="per_chiplet", flags=(),
              chatter=False, log_level="warn"):
        """A daemon on the store, stopped (exit 0 checked) at cleanup."""
        self.daemons += 1
        # The old version goes before a write replies, so that debris()
        # right after a write sees what the write left (the grace period
        # is tested in tests/e2e_test.cc).
        extra = ["--old-version-grace-seconds", "0"] + list(flags)
        if codec:
            extra += ["--codec-command", codec]
        daemon = Daemon(self.store,
                        os.path.join(self.root, f"d{self.daemons}.sock"),
                        extra, env=daemon_env(api, chatter),
                        log_level=log_level)
        self.daemon = daemon
        self.addCleanup(daemon.stop)  # exit 0 after SIGTERM, checked
        return daemon

    def make(self, name, spec):
        path = os.path.join(self.store, name)
        make_fake_artifact.write_artifact(spec, path)
        return path

    def cli(self, *args, expect_ok=True):
        """rbln-artifact --json ARGS: the parsed reply (or error object)."""
        done = subprocess.run(
            [os.path.join(BIN_DIR, "rbln-artifact"), "--server",
             self.daemon.address, "--json"] + list(args),
            capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        lines = done.stdout.strip().splitlines()
        reply = json.loads(lines[-1]) if lines else {}
        if expect_ok and done.returncode != 0:
            self.fail(f"rbln-artifact {' '.join(args)} exited "
                      f"{done.returncode}: {done.stdout}{done.stderr}\n"
                      f"daemon: {self.daemon.stderr()[-3000:]}")
        if not expect_ok:
            self.assertNotEqual(done.returncode, 0, done.stdout)
            self.assertIn("error", reply, done.stdout + done.stderr)
        return reply

    def error(self, *args):
        """The error message of a call that must fail."""
        reply = self.cli(*args, expect_ok=False)
        return reply["error"]

    def assert_unchanged(self, before, what):
        self.assertEqual(tree_state(self.store), before,
                         f"the store changed after {what}")
        self.assertEqual(debris(self.store), [], what)


class FlatArtifactTest(Base):
    """Cases 1 and 2: get, describe, set, --output-dir, dry run and fit on
    a flat fake artifact (RBLN-CR, 2 nodes of 4 chiplets, every bucket
    different) through the rebel adapter."""

    def setUp(self):
        super().setUp()
        self.spec = flat_spec()
        self.path = self.make("flat", self.spec)
        self.start()
        with open(os.path.join(self.path, "rbln_config.json"), "rb") as f:
            self.config_bytes = f.read()

    def graphs(self, path=None):
        path = path or self.path
        return [fake_header(os.path.join(path, name + ".rbln"))
                for name in ("prefill", "decoder_batch_8")]

    def expected_fit(self, budget, current, path=None):
        config = self.spec["rbln_config"]
        return optimum_fit(self.graphs(path), resizable_of(config), current,
                           full_blocks(config),
                           budget_per_bucket(budget, config["npu"], False),
                           per_node=False)

    def assert_resized(self, path, count):
        """Every .rbln, reloaded with the fake, holds each resizable tensor
        at per_block * count and each fixed one as compiled; payloads and the
        rest of each header as written; the config differs from the source's
        only in the count's digits."""
        resizable = resizable_of(self.spec["rbln_config"])
        for name, original in self.spec["models"].items():
            file = os.path.join(path, name + ".rbln")
            sizes = rebel.RBLNCompiledModel(file).exp_get_dram_tensor_sizes()
            self.assertEqual(sorted(sizes), sorted(original["dram_tensors"]))
            for tensor, grid in original["dram_tensors"].items():
                want = ([[size // 512 * count for size in node]
                         for node in grid] if resizable[tensor] else grid)
                self.assertEqual(sizes[tensor], want, f"{name}: {tensor}")
            header = fake_header(file)
            self.assertEqual(header["alloc"], original["alloc"], name)
            self.assertEqual(
                fake_payload(file),
                make_fake_artifact.payload_bytes_of(
                    name, self.spec["payload_bytes"]), name)
        with open(os.path.join(path, "rbln_config.json"), "rb") as f:
            self.assertEqual(f.read(), self.config_bytes.replace(
                b'"kvcache_num_blocks": 512',
                b'"kvcache_num_blocks": %d' % count))

    def test_get_and_describe(self):
        got = self.cli("--get-kvcache-num-blocks", "--model-id", self.path)
        self.assertEqual(got["kvcache_num_blocks"], 512)
        self.assertEqual(got["compiled_num_blocks"], 0)  # unknown
        self.assertEqual(got["num_full_blocks"], 4096)
        self.assertEqual(got["num_min_blocks"], 513)
        described = self.cli("--describe", "--model-id", self.path)
        self.assertEqual(described["compiled_num_blocks"], 0)
        self.assertFalse(described["memory_per_node"])
        self.assertEqual(described["submodule"], "")
        self.assertEqual((described["num_nodes"],
                          described["chiplets_per_node"]), (2, 4))
        self.assertEqual((described["resizable_kv_tensors"],
                          described["fixed_kv_tensors"]), (6, 2))
        self.assertEqual(
            sorted((g["file_name"], g["codec"]) for g in described["graphs"]),
            [("decoder_batch_8.rbln", CODEC_NAME),
             ("prefill.rbln", CODEC_NAME)])
        # Each bucket as the fake's numbers say: other summed over both
        # graphs, KV at the current count aligned per tensor.
        graphs = self.graphs()
        resizable = resizable_of(self.spec["rbln_config"])
        self.assertEqual(len(described["buckets"]), 8)
        for bucket in described["buckets"]:
            n, c = bucket["node"], bucket["chiplet"]
            self.assertEqual(bucket["other_bytes"], sum(
                grid[n][c] for g in graphs for grid in g["alloc"].values()))
            tensors = graphs[0]["dram_tensors"]
            self.assertEqual(bucket["kv_bytes"], sum(
                align_2mib(grid[n][c]) for grid in tensors.values()))
            self.assertEqual(bucket["kv_bytes_per_block"], sum(
                grid[n][c] // 512 for name, grid in tensors.items()
                if resizable[name]))
            self.assertEqual(bucket["available_bytes"], 35 * GiB)
        self.assertEqual(described["max_fitting_num_blocks"],
                         self.expected_fit("100%", 512))

    def test_describe_verify_counts_no_file_of_the_codec(self):
        # The codec's files carry no checksums: nothing is counted as
        # verified, and the text says which files were not.
        described = self.cli("--describe", "--verify", "--model-id",
                             self.path)
        self.assertEqual((described["verified_segments"],
                          described["verified_bytes"]), (0, 0))
        done = subprocess.run(
            [os.path.join(BIN_DIR, "rbln-artifact"), "--server",
             self.daemon.address, "--describe", "--verify", "--model-id",
             self.path],
            capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertNotIn("every checksum matched", done.stdout)
        self.assertTrue(done.stdout.endswith(
            "\nnot verified: 2 graph files of an external codec, which "
            "carry no checksums\n"), done.stdout)

    def test_set_in_place(self):
        reply = self.cli("--set-kvcache-num-blocks", "700", "--model-id",
                         self.path)
        self.assertTrue(reply["written"])
        self.assertEqual((reply["previous_num_blocks"],
                          reply["new_num_blocks"]), (512, 700))
        self.assert_resized(self.path, 700)
        self.assertEqual(debris(self.store), [])
        self.assertEqual(self.cli("--get-kvcache-num-blocks", "--model-id",
                                  self.path)["kvcache_num_blocks"], 700)

    def test_set_output_dir_leaves_the_source(self):
        before = tree_state(self.path)
        out = os.path.join(self.store, "flat-600")
        reply = self.cli("--set-kvcache-num-blocks", "600", "--model-id",
                         self.path, "--output-dir", out)
        self.assertTrue(reply["written"])
        self.assertEqual(tree_state(self.path), before)
        self.assert_resized(out, 600)
        with open(os.path.join(out, "config.json")) as f:
            self.assertEqual(f.read(),
                             self.spec["companions"]["config.json"])
        self.assertEqual(debris(self.store), [])

    def test_dry_runs_change_nothing(self):
        before = tree_state(self.store)
        reply = self.cli("--set-kvcache-num-blocks", "900", "--dry-run",
                         "--model-id", self.path)
        self.assertFalse(reply["written"])
        self.assertEqual(reply["new_num_blocks"], 900)
        reply = self.cli("--set-memory-budget", "0.5", "--dry-run",
                         "--model-id", self.path, "--output-dir",
                         os.path.join(self.store, "never"))
        self.assertFalse(reply["written"])
        self.assert_unchanged(before, "dry runs")

    def test_fit_equals_optimum_rbln_rule(self):
        """A fraction, a percentage and bytes; then written, and again on
        the resized artifact (current != compiled): the same rule."""
        answers = {}
        for budget in ("0.5", "49%", "72GiB"):
            with self.subTest(budget=budget):
                reply = self.cli("--set-memory-budget", budget, "--dry-run",
                                 "--model-id", self.path)
                want = self.expected_fit(budget, 512)
                self.assertGreater(want, 513)
                self.assertLess(want, 4096)
                self.assertEqual(reply["new_num_blocks"], want)
                self.assertEqual(
                    reply["fit"]["budget_per_chiplet"],
                    budget_per_bucket(budget, "RBLN-CR03", False))
                answers[budget] = want
        # The three budgets are different, and so are their answers.
        self.assertEqual(len(set(answers.values())), 3, answers)
        fitted = answers["0.5"]
        reply = self.cli("--set-memory-budget", "0.5", "--model-id",
                         self.path)
        self.assertTrue(reply["written"])
        self.assertEqual(reply["new_num_blocks"], fitted)
        self.assert_resized(self.path, fitted)
        # Already resized (current != the count the files were made at):
        # the rule on the resized files' numbers, and the same answers.
        for budget in ("0.5", "49%", "72GiB"):
            with self.subTest(resized=budget):
                reply = self.cli("--set-memory-budget", budget, "--dry-run",
                                 "--model-id", self.path)
                self.assertEqual(reply["previous_num_blocks"], fitted)
                self.assertEqual(reply["new_num_blocks"],
                                 self.expected_fit(budget, fitted))
                self.assertEqual(reply["new_num_blocks"], answers[budget])


class SameNumbersTest(Base):
    """Case 2 (b): the fit of the external codec on a fake artifact equals
    the built-in codec's on a built-in artifact with the same numbers, and
    both equal optimum-rbln's rule; with a sliding-window (fixed) tensor, at
    the compiled count and after a resize."""

    def setUp(self):
        super().setUp()
        builtin = os.path.join(self.store, "builtin")
        subprocess.run(
            [os.path.join(BIN_DIR, "rbln-artifact-synth"), "--npu",
             "RBLN-CR03", "--num-devices", "2", "--layers", "5",
             "--kv-heads", "8", "--head-dim", "128", "--max-seq-len",
             "131072", "--block-size", "256", "--batch-size", "8",
             "--sliding-window-layers", "1", "--sliding-window", "512",
             "--weight-bytes", str(128 * GiB), "--payload-bytes", "64KiB",
             "--out", builtin], check=True, capture_output=True,
            timeout=CLI_TIMEOUT_S)
        self.builtin = builtin
        self.spec = builtin_as_fake_spec(builtin)
        self.fake = self.make("fake", self.spec)
        self.start()

    def fit(self, path, budget):
        return self.cli("--set-memory-budget", budget, "--dry-run",
                        "--model-id", path)

    def test_fits_agree(self):
        described = {
            name: self.cli("--describe", "--model-id", path)
            for name, path in (("builtin", self.builtin),
                               ("fake", self.fake))}
        self.assertEqual(described["builtin"]["graphs"][0]["codec"],
                         "built-in")
        self.assertEqual(described["fake"]["graphs"][0]["codec"], CODEC_NAME)
        self.assertEqual(described["fake"]["fixed_kv_tensors"], 2)
        self.assertEqual(described["builtin"]["buckets"],
                         described["fake"]["buckets"])
        config = self.spec["rbln_config"]
        current = config["kvcache_num_blocks"]
        for budget in ("0.5", "49%", "72GiB", "0.9"):
            with self.subTest(budget=budget):
                builtin = self.fit(self.builtin, budget)["new_num_blocks"]
                fake = self.fit(self.fake, budget)["new_num_blocks"]
                graphs = [fake_header(os.path.join(self.fake, n + ".rbln"))
                          for n in self.spec["models"]]
                rule = optimum_fit(
                    graphs, resizable_of(config), current,
                    full_blocks(config),
                    budget_per_bucket(budget, "RBLN-CR03", False), False)
                self.assertEqual(fake, rule)
                self.assertEqual(builtin, rule)
                self.assertGreater(rule, 0)
        # Both resized to the same count, then fitted again.
        for path in (self.builtin, self.fake):
            self.cli("--set-kvcache-num-blocks", "600", "--model-id", path)
        for budget in ("0.5", "72GiB"):
            with self.subTest(resized=budget):
                builtin = self.fit(self.builtin, budget)
                fake = self.fit(self.fake, budget)
                self.assertEqual(fake["previous_num_blocks"], 600)
                self.assertEqual(fake["new_num_blocks"],
                                 builtin["new_num_blocks"])
                self.assertEqual(fake["fit"]["buckets"],
                                 builtin["fit"]["buckets"])



class OlderCompilerTest(Base):
    """Case 3: a compiler without exp_rescale_buffer_size, and one that
    reports memory per node only."""

    def test_no_rescale_is_refused_and_changes_nothing(self):
        path = self.make("flat", flat_spec())
        self.start(api="no_rescale")
        before = tree_state(self.store)
        for args in (["--set-kvcache-num-blocks", "700"],
                     ["--set-memory-budget", "0.5"],
                     ["--set-kvcache-num-blocks", "700", "--output-dir",
                      os.path.join(self.store, "copy")]):
            with self.subTest(args=args):
                error = self.error(*args, "--model-id", path)
                self.assertEqual(error["code"], "FAILED_PRECONDITION")
                self.assertIn("older", error["message"])
                self.assertIn("exp_rescale_buffer_size", error["message"])
                self.assertIn("upgrade rebel-compiler", error["message"])
                self.assert_unchanged(before, " ".join(args))
        self.assertEqual(self.cli("--get-kvcache-num-blocks", "--model-id",
                                  path)["kvcache_num_blocks"], 512)
        self.assertEqual(self.cli("--describe", "--model-id",
                                  path)["resizable_kv_tensors"], 6)

    def test_per_node_fits_per_node(self):
        spec = flat_spec()
        path = self.make("flat", spec)
        self.start(api="per_node")
        described = self.cli("--describe", "--model-id", path)
        self.assertTrue(described["memory_per_node"])
        self.assertEqual(described["chiplets_per_node"], 1)
        self.assertEqual(len(described["buckets"]), 2)
        config = spec["rbln_config"]
        graphs = [fake_header(os.path.join(path, name + ".rbln"))
                  for name in spec["models"]]
        answers = set()
        for budget in ("0.5", "49%", "72GiB"):
            with self.subTest(budget=budget):
                reply = self.cli("--set-memory-budget", budget, "--dry-run",
                                 "--model-id", path)
                want = optimum_fit(graphs, resizable_of(config), 512,
                                   full_blocks(config),
                                   budget_per_bucket(budget, "RBLN-CR03",
                                                     True), per_node=True)
                self.assertEqual(reply["new_num_blocks"], want)
                self.assertGreater(want, 513)
                answers.add(want)
        # Per node, the chiplets pool their memory: 0.5 fits more than the
        # per-chiplet rule on the same files allows (the fullest chiplet
        # limits that one).
        per_chiplet = optimum_fit(graphs, resizable_of(config), 512,
                                  full_blocks(config),
                                  budget_per_bucket("0.5", "RBLN-CR03",
                                                    False), per_node=False)
        self.assertNotIn(per_chiplet, answers)
        reply = self.cli("--set-memory-budget", "0.5", "--model-id", path)
        self.assertTrue(reply["written"])
        sizes = rebel.RBLNCompiledModel(
            os.path.join(path, "prefill.rbln")).exp_get_dram_tensor_sizes()
        count = reply["new_num_blocks"]
        grid = spec["models"]["prefill"]["dram_tensors"][
            "past_key_values.0.key"]
        self.assertEqual(sizes["past_key_values.0.key"],
                         [[size // 512 * count for size in node]
                          for node in grid])


def codec_file_text(kv_per_block, current, mode=None):
    facts = {"test_codec": 1, "granularity": "chiplet", "num_nodes": 1,
             "buckets_per_node": 1, "other": {"weights": [[GiB]]},
             "kv_tensors": {"kv0": [[kv_per_block * current]]}}
    if mode:
        facts["mode"] = mode
    return json.dumps(facts)


class BrokenCodecTest(Base):
    """Case 4: a codec that hangs, exits, answers garbage or writes
    outside its scratch directory: a clear error through the client,
    nothing changed, nothing left behind, and the daemon keeps serving."""

    def make_test_codec_artifact(self, name):
        path = os.path.join(self.store, name)
        os.mkdir(path)
        config = {"cls_name": "RBLNLlamaForCausalLM", "npu": "RBLN-CA12",
                  "max_seq_len": 4096, "kvcache_block_size": 256,
                  "batch_size": 1, "attn_impl": "eager",
                  "kvcache_num_blocks": 16,
                  "kvcache_metas": [{"name": "kv0", "layer_index": 0,
                                     "shape": [1, 256, 64],
                                     "dtype": "float16", "is_auto": True}]}
        with open(os.path.join(path, "rbln_config.json"), "w") as f:
            json.dump(config, f, indent=2)
        for graph in ("prefill", "decoder_batch_1"):
            with open(os.path.join(path, graph + ".rbln"), "w") as f:
                f.write(codec_file_text(MiB, 16))
        return path

    def check(self, mode, operations, expect_code, expect_text):
        outside = os.path.join(self.store, "outside")
        path = self.make_test_codec_artifact("model")
        self.start(codec=f"{PYTHON} {TEST_CODEC} --mode {mode} --outside "
                   f"{outside}", flags=["--codec-timeout-seconds", "2"])
        before = tree_state(self.store)
        for args in operations:
            args = [os.path.join(self.store, a) if a == "copy" else a
                    for a in args]
            with self.subTest(mode=mode, args=args):
                error = self.error(*args, "--model-id", path)
                self.assertEqual(error["code"], expect_code, error)
                self.assertIn(expect_text, error["message"])
                self.assertIn(".rbln", error["message"])
                self.assert_unchanged(before, " ".join(args))
                self.assertFalse(os.path.lexists(outside))
                # The daemon serves on.
                self.assertEqual(self.cli("--get-kvcache-num-blocks",
                                          "--model-id", path)
                                 ["kvcache_num_blocks"], 16)

    WRITES = (["--set-kvcache-num-blocks", "8"],
              ["--set-memory-budget", "0.5", "--output-dir", "copy"])

    def test_hang(self):
        self.check("hang", [["--describe"]] + list(self.WRITES),
                   "DEADLINE_EXCEEDED", "--codec-timeout-seconds")

    def test_exit(self):
        self.check("exit", [["--describe"]] + list(self.WRITES),
                   "UNAVAILABLE", "exited")

    def test_garbage(self):
        self.check("garbage", [["--describe"]] + list(self.WRITES),
                   "INTERNAL", "not protocol")

    def test_write_outside(self):
        if os.geteuid() != 0:
            self.skipTest("the codec runs as the daemon's own user when the "
                          "daemon is not root: it could write outside")
        self.check("write-outside", list(self.WRITES), "INTERNAL",
                   "the codec failed")

    def test_a_good_codec_works_on_these_files(self):
        """The same artifact with a behaving codec: resized (so that the
        failures above are the modes', not the artifact's)."""
        path = self.make_test_codec_artifact("model")
        self.start(codec=f"{PYTHON} {TEST_CODEC}")
        reply = self.cli("--set-kvcache-num-blocks", "8", "--model-id", path)
        self.assertTrue(reply["written"])
        with open(os.path.join(path, "prefill.rbln")) as f:
            self.assertEqual(json.load(f)["kv_tensors"]["kv0"], [[8 * MiB]])



class ConfigVariantsTest(Base):
    """Case 5: cache_metas with and without a can_resize key (which decides
    nothing), kvcache_metas with is_auto; a config with neither is refused
    for describe and set, while get answers the count."""

    def variant(self, name, metas_key, edit):
        spec = flat_spec(npu="RBLN-CA12", nodes=1)
        metas = metas_of(spec["models"])
        for meta in metas:
            edit(meta)
        spec["rbln_config"] = decoder_config("RBLN-CA12", 1, 512, metas,
                                             metas_key)
        return spec, self.make(name, spec)

    def test_variants_resize_what_they_say(self):
        def can_resize(meta):
            # A can_resize key that says layer 2 is fixed decides nothing:
            # optimum-rbln goes by is_auto and layer_type alone.
            meta["can_resize"] = meta["is_auto"] and meta["layer_index"] != 2

        def no_can_resize(meta):
            pass

        def layer_type_absent(meta):
            if meta["layer_type"] == "full_attention":
                del meta["layer_type"]

        variants = {
            "cache-metas-can-resize": ("cache_metas", can_resize, 6),
            "cache-metas": ("cache_metas", no_can_resize, 6),
            "kvcache-metas": ("kvcache_metas", layer_type_absent, 6),
        }
        made = {name: self.variant(name, key, edit)
                for name, (key, edit, _) in variants.items()}
        self.start()
        for name, (_, _, resizable) in variants.items():
            with self.subTest(variant=name):
                spec, path = made[name]
                described = self.cli("--describe", "--model-id", path)
                self.assertEqual((described["resizable_kv_tensors"],
                                  described["fixed_kv_tensors"]),
                                 (resizable, 8 - resizable))
                # The variants' other allocations alone are over an
                # RBLN-CA (flat_spec's weights are for RBLN-CR): forced.
                self.cli("--set-kvcache-num-blocks", "600", "--model-id",
                         path, "--force")
                want = resizable_of(spec["rbln_config"])
                self.assertEqual(sum(want.values()), resizable)
                sizes = rebel.RBLNCompiledModel(os.path.join(
                    path, "prefill.rbln")).exp_get_dram_tensor_sizes()
                for tensor, grid in spec["models"]["prefill"][
                        "dram_tensors"].items():
                    self.assertEqual(
                        sizes[tensor],
                        [[size // 512 * 600 for size in node]
                         for node in grid] if want[tensor] else grid, tensor)

    def test_neither_key_is_refused(self):
        spec = flat_spec(npu="RBLN-CA12", nodes=1)
        del spec["rbln_config"]["kvcache_metas"]
        path = self.make("no-metas", spec)
        self.start()
        self.assertEqual(self.cli("--get-kvcache-num-blocks", "--model-id",
                                  path)["kvcache_num_blocks"], 512)
        before = tree_state(self.store)
        for args in (["--describe"], ["--set-kvcache-num-blocks", "600"]):
            with self.subTest(args=args):
                message = self.error(*args, "--model-id", path)["message"]
                self.assertIn("cache_metas", message)
                self.assertIn("kvcache_metas", message)
                self.assert_unchanged(before, " ".join(args))


class NpuResolutionTest(Base):
    """An artifact that names no NPU (optimum-rbln's re-save can leave
    `_compile_cfgs[].npu` null, and the rebel adapter reads none from the
    files): sized for the NPU of the probe's lowest-index device; with no
    probe, a budget is refused and a set is written unchecked, saying so;
    --device-dram needs no NPU."""

    def setUp(self):
        super().setUp()
        spec = flat_spec(npu="RBLN-CR03")
        config = spec["rbln_config"]
        del config["npu"]
        for compile_cfg in config["_compile_cfgs"]:
            compile_cfg["npu"] = None
        self.path = self.make("no-npu", spec)
        self.smi = os.path.join(self.root, "rbln-smi")
        with open(self.smi, "w") as f:
            f.write("#!/bin/sh\ncat " + os.path.join(
                HERE, "testdata", "rbln-smi", "rbln-smi-rebel-cr13.txt") +
                "\n")
        os.chmod(self.smi, 0o755)

    def test_the_probes_lowest_index_device_names_it(self):
        self.start(flags=["--rbln-smi", self.smi])
        fit = self.cli("--set-memory-budget", "0.5", "--model-id", self.path,
                       "--dry-run")
        self.assertIn("NPU RBLN-CR13 from the probe's lowest-index device",
                      fit["fit"]["dram_source"])
        self.assertIn("fits_device", fit)
        described = self.cli("--describe", "--model-id", self.path)
        self.assertIn("NPU RBLN-CR13 from the probe's lowest-index device",
                      described["dram_source"])

    def test_without_a_probe_a_budget_is_refused_and_a_set_unchecked(self):
        self.start()  # with --rbln-smi none
        before = tree_state(self.store)
        error = self.error("--set-memory-budget", "0.5", "--model-id",
                           self.path)
        self.assertEqual(error["code"], "FAILED_PRECONDITION")
        self.assertIn("the artifact names no NPU", error["message"])
        self.assertIn("the probe is off", error["message"])
        self.assertIn("give the daemon --device-dram", error["message"])
        self.assert_unchanged(before, "a refused budget")
        reply = self.cli("--set-kvcache-num-blocks", "600", "--model-id",
                         self.path)
        self.assertTrue(reply["written"])
        self.assertNotIn("fits_device", reply)
        self.assertTrue(any("was not checked against a device" in warning
                            for warning in reply["warnings"]),
                        reply["warnings"])

    def test_device_dram_needs_no_npu(self):
        self.start(flags=["--device-dram", "140GiB,4"])
        fit = self.cli("--set-memory-budget", "0.5", "--model-id", self.path,
                       "--dry-run")
        self.assertIn("override (--device-dram)", fit["fit"]["dram_source"])
        self.assertEqual(fit["fit"]["budget_per_chiplet"], 70 * 2**30 // 4)


class MultimodalTest(Base):
    """Case 6: Llava's layout, the decoder as the language_model
    submodule."""

    def setUp(self):
        super().setUp()
        spec = flat_spec(npu="RBLN-CA12", nodes=1)
        spec["submodule"] = "language_model"
        self.spec = spec
        self.path = self.make("llava", spec)
        self.before = tree_state(self.path)
        self.files = {}
        for name in ("rbln_config.json", "language_model/rbln_config.json"):
            with open(os.path.join(self.path, name), "rb") as f:
                self.files[name] = f.read()
        self.start()

    def assert_resized(self, path, count):
        for name, original in self.spec["models"].items():
            sizes = rebel.RBLNCompiledModel(os.path.join(
                path, "language_model", name + ".rbln")
            ).exp_get_dram_tensor_sizes()
            resizable = resizable_of(self.spec["rbln_config"])
            for tensor, grid in original["dram_tensors"].items():
                self.assertEqual(sizes[tensor], [
                    [size // 512 * count for size in node] for node in grid]
                    if resizable[tensor] else grid, tensor)
        # The parent's config: only language_model.kvcache_num_blocks (the
        # one count in it: json.dump writes the nested object's key once).
        for name, original in self.files.items():
            self.assertEqual(original.count(b'"kvcache_num_blocks": 512'), 1)
            with open(os.path.join(path, name), "rb") as f:
                self.assertEqual(f.read(), original.replace(
                    b'"kvcache_num_blocks": 512',
                    b'"kvcache_num_blocks": %d' % count), name)
        after = tree_state(path)
        for name, state in self.before.items():
            if (name.startswith("vision_tower") or
                    name == "compiled_model.rbln"):
                self.assertEqual(after[name][1], state[1], name)
        self.assertEqual(sorted(after), sorted(self.before))

    def test_get_describe_set(self):
        got = self.cli("--get-kvcache-num-blocks", "--model-id", self.path)
        self.assertEqual(got["kvcache_num_blocks"], 512)
        described = self.cli("--describe", "--model-id", self.path)
        self.assertEqual(described["submodule"], "language_model")
        self.assertEqual(sorted(g["file_name"] for g in described["graphs"]),
                         ["decoder_batch_8.rbln", "prefill.rbln"])
        out = os.path.join(self.store, "llava-700")
        # Its other allocations alone are over an RBLN-CA: forced.
        self.cli("--set-kvcache-num-blocks", "700", "--model-id", self.path,
                 "--output-dir", out, "--force")
        self.assertEqual(tree_state(self.path), self.before)
        self.assert_resized(out, 700)
        reply = self.cli("--set-kvcache-num-blocks", "600", "--model-id",
                         self.path, "--force")
        self.assertTrue(reply["written"])
        self.assertIs(reply["fits_device"], False)
        self.assert_resized(self.path, 600)
        self.assertEqual(debris(self.store), [])


class WithoutCodecTest(Base):
    """Case 7: no --codec-command: get answers, describe and set name the
    file and say to configure --codec-command."""

    def test_get_only(self):
        path = self.make("flat", flat_spec(npu="RBLN-CA12", nodes=1))
        self.start(codec=None)
        self.assertEqual(self.cli("--get-kvcache-num-blocks", "--model-id",
                                  path)["kvcache_num_blocks"], 512)
        before = tree_state(self.store)
        for args in (["--describe"], ["--set-kvcache-num-blocks", "600"],
                     ["--set-memory-budget", "0.5"]):
            with self.subTest(args=args):
                message = self.error(*args, "--model-id", path)["message"]
                self.assertRegex(message, r"(prefill|decoder_batch_8)\.rbln")
                self.assertIn("--codec-command", message)
                self.assert_unchanged(before, " ".join(args))


class InspectCacheTest(Base):
    """Case 8: a second describe does not load the files again. The fake
    says "loaded PATH" on every load (FAKE_REBEL_CHATTER=1); the adapter
    sends it to stderr, which the daemon logs. One worker, so the log's
    order is the codec's."""

    def loads(self):
        return self.daemon.stderr().count("rebel(fake): loaded")

    def wait_for_loads(self, count):
        deadline = time.monotonic() + LOG_WAIT_S
        while self.loads() < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.loads()

    def test_second_describe_is_served_from_the_cache(self):
        path = self.make("flat", flat_spec(npu="RBLN-CA12", nodes=1))
        self.start(flags=["--codec-workers", "1"], chatter=True,
                   log_level="info")
        self.cli("--describe", "--model-id", path)
        self.assertEqual(self.wait_for_loads(2), 2)  # prefill, decoder
        self.cli("--describe", "--model-id", path)
        # A changed file (its ctime and mtime) is inspected again: its load
        # line comes after any the second describe would have caused.
        os.utime(os.path.join(path, "prefill.rbln"))
        self.cli("--describe", "--model-id", path)
        self.assertGreaterEqual(self.wait_for_loads(3), 3)
        # Stopped, the daemon has logged every line the worker wrote before
        # (the loads of the second describe, had there been any, too).
        self.daemon.process.send_signal(signal.SIGTERM)
        self.daemon.process.wait(timeout=CLI_TIMEOUT_S)
        log = self.daemon.stderr()
        self.assertEqual(log.count("rebel(fake): loaded"), 3, log)


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
