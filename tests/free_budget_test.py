"""`free` budgets follow the live probe (issue 46, item 4): a fake rbln-smi
answers `-j` with the `used` figures of a file the test changes; a dry-run
FitMemoryBudget and FitTogether with budget "free" / "free-50%" answer
from what the probe says now (a change of `used` between two calls changes
the answer), --devices picks the devices, Describe shows what is used and
free per device, and the spec table's figures are refused for `free`.

Run by ctest with PYTHONPATH=<build>/python and RBLN_BIN_DIR=<build>/bin.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True

import grpc  # noqa: E402

from rbln.artifact.v1 import artifact_service_pb2 as pb  # noqa: E402
from rbln.artifact.v1 import artifact_service_pb2_grpc as pb_grpc  # noqa: E402

from python_client_test import BIN_DIR, Daemon  # noqa: E402

GIB = 2**30
# What rbln-smi prints as each device's total (the daemon takes the spec's
# available figure, not this).
TOTAL = 16877879296

FAKE = """#!/bin/sh
# A fake rbln-smi: -j prints the devices, each `used` from the file.
[ "$1" = -j ] || { echo "usage: rbln-smi -j" >&2; exit 2; }
exec /usr/bin/python3 - "$0.used" <<'PY'
import json, sys
used = [int(x) for x in open(sys.argv[1]).read().split()]
print(json.dumps({"KMD_version": "1.3.73", "devices": [
    {"npu": str(i), "name": "RBLN-CA12", "device": "rbln%d" % i,
     "memory": {"used": str(u), "total": "TOTAL"}}
    for i, u in enumerate(used)]}))
PY
""".replace("TOTAL", str(TOTAL))


class FreeBudgetTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="rbln-free-")
        store = os.path.join(cls.root, "store")
        for name, layers in (("big", 32), ("small", 8)):
            subprocess.run(
                [os.path.join(BIN_DIR, "rbln-artifact-synth"), "--preset",
                 "llama3-8b-ca12-tp4", "--layers", str(layers),
                 "--payload-bytes", "4KiB", "--out",
                 os.path.join(store, name)],
                check=True, capture_output=True)
        cls.smi = os.path.join(cls.root, "rbln-smi")
        with open(cls.smi, "w") as f:
            f.write(FAKE)
        os.chmod(cls.smi, 0o755)
        cls.set_used([0, 0, 0, 0, 0, 0])
        cls.daemon = Daemon(store, os.path.join(cls.root, "d.sock"),
                            ["--rbln-smi", cls.smi])
        cls.stub = pb_grpc.ArtifactServiceStub(
            grpc.insecure_channel(cls.daemon.address))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    @classmethod
    def set_used(cls, used):
        with open(cls.smi + ".used", "w") as f:
            f.write(" ".join(str(u) for u in used))

    def fit(self, budget, devices=()):
        return self.stub.FitMemoryBudget(pb.FitMemoryBudgetRequest(
            artifact="big", budget=budget, devices=list(devices),
            options=pb.WriteOptions(dry_run=True)), timeout=60)

    def test_free_follows_what_is_in_use_now(self):
        self.set_used([0, 0, 0, 0, 0, 0])
        idle = self.fit("free").new_num_blocks
        self.set_used([0, 2 * GIB, 0, 0, 0, 0])
        busy = self.fit("free")
        self.assertLess(busy.new_num_blocks, idle)
        self.assertTrue(any("free now" in w for w in busy.warnings),
                        busy.warnings)
        # The busy device left out: the count comes back.
        self.assertEqual(self.fit("free", devices=[0, 2, 3, 4])
                         .new_num_blocks, idle)
        self.set_used([0, 0, 0, 0, 0, 0])
        self.assertLess(self.fit("free-80%").new_num_blocks, idle)

    def test_a_group_sizes_against_what_is_free(self):
        self.set_used([0, 0, 0, 0, 0, 0])
        request = pb.FitTogetherRequest(
            members=[pb.Member(artifact="big"), pb.Member(artifact="small")],
            budget="free", options=pb.WriteOptions(dry_run=True))
        idle = self.stub.FitTogether(request, timeout=60)
        self.set_used([GIB // 2, GIB // 2, GIB // 2, GIB // 2, 0, 0])
        busy = self.stub.FitTogether(request, timeout=60)
        self.assertLess(sum(m.new_num_blocks for m in busy.members),
                        sum(m.new_num_blocks for m in idle.members))
        self.assertLess(busy.buckets[0].budget_bytes,
                        idle.buckets[0].budget_bytes)

    def test_describe_shows_used_and_free_per_device(self):
        self.set_used([GIB, 0, 0, 0, 0, 0])
        # A probe newer than any kept reply: what Describe reports is the
        # probe's last look.
        self.fit("free")
        reply = self.stub.DescribeArtifact(
            pb.DescribeArtifactRequest(artifact="small"), timeout=60)
        self.assertEqual(len(reply.devices), 6)
        self.assertEqual(reply.devices[0].used_bytes, GIB)
        self.assertEqual(reply.devices[0].free_bytes,
                         reply.devices[0].available_bytes - GIB)
        self.assertEqual(reply.devices[1].free_bytes,
                         reply.devices[1].available_bytes)

    def test_devices_the_probe_did_not_find_are_refused(self):
        self.set_used([0, 0, 0, 0, 0, 0])
        with self.assertRaises(grpc.RpcError) as caught:
            self.fit("free", devices=[0, 1, 2, 9])
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)


class FreeWithoutAProbeTest(unittest.TestCase):

    def test_the_spec_table_cannot_say_what_is_free(self):
        root = tempfile.mkdtemp(prefix="rbln-free-")
        try:
            store = os.path.join(root, "store")
            subprocess.run([os.path.join(BIN_DIR, "rbln-artifact-synth"),
                            "--out", os.path.join(store, "a")],
                           check=True, capture_output=True)
            daemon = Daemon(store, os.path.join(root, "d.sock"))
            try:
                stub = pb_grpc.ArtifactServiceStub(
                    grpc.insecure_channel(daemon.address))
                with self.assertRaises(grpc.RpcError) as caught:
                    stub.FitMemoryBudget(pb.FitMemoryBudgetRequest(
                        artifact="a", budget="free",
                        options=pb.WriteOptions(dry_run=True)), timeout=60)
                self.assertEqual(caught.exception.code(),
                                 grpc.StatusCode.FAILED_PRECONDITION)
                self.assertIn("--beside", caught.exception.details())
            finally:
                daemon.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
