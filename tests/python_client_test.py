"""The ArtifactService as a serving orchestrator sees it: grpcio and the
generated Python stubs against the real rbln-artifactd on a Unix socket.

Run by ctest with PYTHONPATH=<build>/python (the stubs) and
RBLN_BIN_DIR=<build>/bin (rbln-artifactd, rbln-artifact-synth). Each test
class synthesizes a temporary store and starts its own daemons on it; every
daemon is stopped with SIGTERM, which must end it with exit status 0.

Health checking and reflection are called without their Python packages
(Debian ships neither): as raw methods with hand-encoded messages. The
structured error details are read without grpcio-status (Debian ships none
either): from the grpc-status-details-bin trailer, with the google.rpc.Status
stub the build generates from proto/google/rpc/status.proto.
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import link_store  # noqa: E402  (beside this file)
from google.rpc import status_pb2
from rbln.artifact.v1 import artifact_service_pb2 as pb
from rbln.artifact.v1 import artifact_service_pb2_grpc as pb_grpc

BIN_DIR = os.environ.get("RBLN_BIN_DIR", "")
START_TIMEOUT_S = 30
RPC_TIMEOUT_S = 30
STOP_TIMEOUT_S = 60


def _identity(data):
    return data


def _die_with_parent():
    """In the daemon before exec: SIGKILL it if this test process dies
    (ctest timeout, interrupted run), so that no daemon outlives the test."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def synthesize(preset, out_dir, payload="64KiB"):
    if not BIN_DIR:
        raise RuntimeError("RBLN_BIN_DIR is not set (run through ctest)")
    subprocess.run(
        [os.path.join(BIN_DIR, "rbln-artifact-synth"), "--preset", preset,
         "--payload-bytes", payload, "--out", out_dir],
        check=True, capture_output=True, timeout=120)


def error_detail(error):
    """The rbln.artifact.v1.ErrorDetail of a failed call, read from its
    grpc-status-details-bin trailer (what grpc_status.rpc_status.from_call
    does), or None when the status has no details."""
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        if status.code != error.code().value[0]:
            raise AssertionError("details code %d, status %s" %
                                 (status.code, error.code()))
        for any_detail in status.details:
            detail = pb.ErrorDetail()
            if any_detail.Unpack(detail):
                return detail
    return None


class Daemon:
    """rbln-artifactd on a Unix socket, started and waited for."""

    def __init__(self, store, socket_path, extra_flags=(), env=None,
                 log_level="warn"):
        """env: the daemon's environment (default: this process's)."""
        self.socket_path = socket_path
        self.address = "unix:" + socket_path
        self.err = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [os.path.join(BIN_DIR, "rbln-artifactd"), "--store", store,
             "--listen", self.address, "--log-level", log_level] +
            # Spec-table figures whatever NPUs this host has, unless the
            # caller chooses.
            ([] if "--rbln-smi" in extra_flags else ["--rbln-smi", "none"]) +
            list(extra_flags),
            stdout=subprocess.DEVNULL, stderr=self.err, env=env,
            preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    "rbln-artifactd exited at start with %d: %s" %
                    (self.process.returncode, self.stderr()))
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(socket_path)
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                raise RuntimeError(
                    "rbln-artifactd did not listen within %d s: %s" %
                    (START_TIMEOUT_S, self.stderr()))
            time.sleep(0.02)

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def stop(self):
        """SIGTERM; the daemon must exit 0 and remove its socket."""
        try:
            self.process.send_signal(signal.SIGTERM)
            try:
                code = self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(
                    "rbln-artifactd did not stop within %d s of SIGTERM" %
                    STOP_TIMEOUT_S)
            if code != 0:
                raise AssertionError(
                    "rbln-artifactd exited with %d after SIGTERM: %s" %
                    (code, self.stderr()))
            if os.path.exists(self.socket_path):
                raise AssertionError("rbln-artifactd left its socket behind")
        finally:
            self.err.close()


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="rbln-py-test-")
        cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
        cls.store = os.path.join(cls.root, "store")
        os.mkdir(cls.store)
        synthesize("tiny", os.path.join(cls.store, "tiny"))
        synthesize("llama3-8b-ca12-tp4", os.path.join(cls.store, "llama"))
        cls.daemon = Daemon(cls.store, os.path.join(cls.root, "d.sock"))
        cls.channel = grpc.insecure_channel(cls.daemon.address)
        cls.stub = pb_grpc.ArtifactServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.stop()
        print("rbln-artifactd stopped cleanly on SIGTERM")

    # Helpers.

    def config_count(self, name):
        """kvcache_num_blocks as rbln_config.json on disk says."""
        with open(os.path.join(self.store, name, "rbln_config.json")) as f:
            config = json.load(f)
        # The count may sit at the top level or under a submodule config.
        if "kvcache_num_blocks" in config:
            return config["kvcache_num_blocks"]
        for value in config.values():
            if isinstance(value, dict) and "kvcache_num_blocks" in value:
                return value["kvcache_num_blocks"]
        self.fail("no kvcache_num_blocks in %s/rbln_config.json" % name)

    def get(self, name):
        return self.stub.GetKvcacheNumBlocks(
            pb.GetKvcacheNumBlocksRequest(artifact=name),
            timeout=RPC_TIMEOUT_S)

    # Tests.

    def test_describe_artifact(self):
        reply = self.stub.DescribeArtifact(
            pb.DescribeArtifactRequest(artifact="llama", verify_payload=True),
            timeout=RPC_TIMEOUT_S)
        self.assertEqual(reply.artifact, "llama")
        self.assertEqual(reply.npu, "RBLN-CA12")
        self.assertEqual(reply.num_nodes, 4)
        self.assertEqual(reply.kvcache_num_blocks, self.config_count("llama"))
        self.assertGreaterEqual(reply.kvcache_num_blocks,
                                reply.num_min_blocks)
        self.assertLessEqual(reply.kvcache_num_blocks, reply.num_full_blocks)
        self.assertEqual(len(reply.buckets),
                         reply.num_nodes * reply.chiplets_per_node)
        for bucket in reply.buckets:
            self.assertGreater(bucket.kv_bytes_per_block, 0)
            self.assertEqual(bucket.kv_bytes,
                             bucket.kv_bytes_per_block *
                             reply.kvcache_num_blocks)
            self.assertEqual(bucket.headroom_bytes,
                             bucket.available_bytes - bucket.other_bytes -
                             bucket.kv_bytes)
        self.assertEqual(sorted(g.compiled_model_name for g in reply.graphs),
                         ["decoder_batch_1", "decoder_batch_4", "prefill"])
        print("DescribeArtifact llama: %d blocks, %d buckets" %
              (reply.kvcache_num_blocks, len(reply.buckets)))

    def test_dry_run_fit_writes_nothing(self):
        before = self.get("llama").kvcache_num_blocks
        reply = self.stub.FitMemoryBudget(
            pb.FitMemoryBudgetRequest(
                artifact="llama", budget="0.8",
                options=pb.WriteOptions(dry_run=True)),
            timeout=RPC_TIMEOUT_S)
        self.assertFalse(reply.written)
        self.assertEqual(reply.previous_num_blocks, before)
        # 80% of the device fits fewer blocks than the compile-time 100%.
        self.assertLess(reply.new_num_blocks, before)
        self.assertTrue(reply.HasField("fit"))
        self.assertEqual(reply.fit.budget, "80%")
        self.assertEqual(len(reply.fit.buckets), 4)
        for bucket in reply.fit.buckets:
            self.assertEqual(bucket.available_bytes,
                             reply.fit.budget_per_chiplet)
            self.assertGreaterEqual(bucket.headroom_bytes, 0)
        self.assertEqual(self.get("llama").kvcache_num_blocks, before)
        self.assertEqual(self.config_count("llama"), before)
        print("FitMemoryBudget 0.8 dry run: %d -> %d, nothing written" %
              (before, reply.new_num_blocks))

    def test_set_with_expected_current(self):
        current = self.get("tiny")
        target = current.num_min_blocks + 1
        self.assertNotEqual(target, current.kvcache_num_blocks)
        reply = self.stub.SetKvcacheNumBlocks(
            pb.SetKvcacheNumBlocksRequest(
                artifact="tiny", num_blocks=target,
                options=pb.WriteOptions(
                    expected_current=current.kvcache_num_blocks)),
            timeout=RPC_TIMEOUT_S)
        self.assertTrue(reply.written)
        self.assertEqual(reply.previous_num_blocks,
                         current.kvcache_num_blocks)
        self.assertEqual(reply.new_num_blocks, target)
        self.assertEqual(self.config_count("tiny"), target)

        # The same request again: its expectation is now stale.
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.SetKvcacheNumBlocks(
                pb.SetKvcacheNumBlocksRequest(
                    artifact="tiny", num_blocks=target + 1,
                    options=pb.WriteOptions(
                        expected_current=current.kvcache_num_blocks)),
                timeout=RPC_TIMEOUT_S)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.ABORTED)
        self.assertIn(str(target), raised.exception.details())
        detail = error_detail(raised.exception)
        self.assertIsNotNone(detail, "no grpc-status-details-bin")
        self.assertEqual(detail.reason, pb.ErrorDetail.CAS_MISMATCH)
        self.assertEqual(pb.ErrorDetail.Reason.Name(detail.reason),
                         "CAS_MISMATCH")
        self.assertEqual(detail.artifact, "tiny")
        self.assertTrue(detail.HasField("current_num_blocks"))
        self.assertEqual(detail.current_num_blocks, target)
        self.assertEqual(self.get("tiny").kvcache_num_blocks, target)
        self.assertEqual(self.config_count("tiny"), target)
        print("SetKvcacheNumBlocks with expected_current: ok, then ABORTED")

    def test_below_minimum_carries_the_bounds(self):
        current = self.get("tiny")
        self.assertGreater(current.num_min_blocks, 0)
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.SetKvcacheNumBlocks(
                pb.SetKvcacheNumBlocksRequest(
                    artifact="tiny", num_blocks=current.num_min_blocks - 1),
                timeout=RPC_TIMEOUT_S)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)
        detail = error_detail(raised.exception)
        self.assertIsNotNone(detail, "no grpc-status-details-bin")
        self.assertEqual(detail.reason, pb.ErrorDetail.BELOW_MIN_BLOCKS)
        self.assertEqual(detail.artifact, "tiny")
        self.assertEqual(detail.num_min_blocks, current.num_min_blocks)
        self.assertEqual(detail.num_full_blocks, current.num_full_blocks)
        self.assertEqual(detail.current_num_blocks,
                         current.kvcache_num_blocks)

    def test_force_writes_what_does_not_fit_and_nothing_else(self):
        """WriteOptions.force: a Set above what the device holds is refused
        without it and written with it; force never passes expected_current
        and goes only with a Set."""
        current = self.get("tiny")
        huge = 100000
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.SetKvcacheNumBlocks(
                pb.SetKvcacheNumBlocksRequest(artifact="tiny", num_blocks=huge),
                timeout=RPC_TIMEOUT_S)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.FAILED_PRECONDITION)
        detail = error_detail(raised.exception)
        self.assertEqual(detail.reason, pb.ErrorDetail.EXCEEDS_DEVICE)
        self.assertTrue(detail.HasField("max_fitting_num_blocks"))
        self.assertEqual(self.config_count("tiny"),
                         current.kvcache_num_blocks)

        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.SetKvcacheNumBlocks(
                pb.SetKvcacheNumBlocksRequest(
                    artifact="tiny", num_blocks=huge,
                    options=pb.WriteOptions(
                        force=True,
                        expected_current=current.kvcache_num_blocks + 1)),
                timeout=RPC_TIMEOUT_S)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.ABORTED)

        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.FitMemoryBudget(
                pb.FitMemoryBudgetRequest(
                    artifact="tiny", budget="0.8",
                    options=pb.WriteOptions(force=True, dry_run=True)),
                timeout=RPC_TIMEOUT_S)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("force applies only to SetKvcacheNumBlocks",
                      raised.exception.details())

        reply = self.stub.SetKvcacheNumBlocks(
            pb.SetKvcacheNumBlocksRequest(
                artifact="tiny", num_blocks=huge,
                options=pb.WriteOptions(force=True)),
            timeout=RPC_TIMEOUT_S)
        self.assertTrue(reply.written)
        self.assertTrue(reply.HasField("fits_device"))
        self.assertFalse(reply.fits_device)
        self.assertEqual(reply.store, os.path.realpath(self.store))
        self.assertEqual(self.config_count("tiny"), huge)
        # Back to where it was, which fits.
        reply = self.stub.SetKvcacheNumBlocks(
            pb.SetKvcacheNumBlocksRequest(
                artifact="tiny", num_blocks=current.kvcache_num_blocks),
            timeout=RPC_TIMEOUT_S)
        self.assertTrue(reply.fits_device)

    def test_unknown_artifact_is_not_found(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.get("no-such-model")
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("no-such-model", raised.exception.details())

    def test_path_outside_store_is_permission_denied(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.get("../store/tiny")
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.PERMISSION_DENIED)

    def test_list_and_device_info(self):
        listing = self.stub.ListArtifacts(pb.ListArtifactsRequest(),
                                          timeout=RPC_TIMEOUT_S)
        self.assertEqual(os.path.realpath(listing.store),
                         os.path.realpath(self.store))
        names = {a.artifact: a for a in listing.artifacts}
        self.assertLessEqual({"llama", "tiny"}, set(names))
        self.assertEqual(names["llama"].kvcache_num_blocks,
                         self.config_count("llama"))
        self.assertEqual(names["llama"].num_nodes, 4)
        self.assertFalse(any(a.error for a in listing.artifacts))
        info = self.stub.GetDeviceInfo(pb.GetDeviceInfoRequest(),
                                       timeout=RPC_TIMEOUT_S)
        self.assertIn("RBLN-CA", [d.family for d in info.devices])
        for device in info.devices:
            self.assertGreater(device.available_bytes, 0)
            self.assertLessEqual(device.available_bytes, device.total_bytes)

    def test_health_check_serving(self):
        check = self.channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=_identity, response_deserializer=_identity)
        # HealthCheckResponse{status: SERVING}, for the server ("") and by
        # the service's name: HealthCheckRequest{service: NAME}.
        self.assertEqual(check(b"", timeout=RPC_TIMEOUT_S), b"\x08\x01")
        name = b"rbln.artifact.v1.ArtifactService"
        self.assertEqual(
            check(b"\x0a" + bytes([len(name)]) + name,
                  timeout=RPC_TIMEOUT_S), b"\x08\x01")
        # A service the daemon does not serve is unknown to it.
        other = b"no.such.Service"
        with self.assertRaises(grpc.RpcError) as raised:
            check(b"\x0a" + bytes([len(other)]) + other,
                  timeout=RPC_TIMEOUT_S)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_health_not_serving_once_shutdown_starts(self):
        """A watcher of the service's health sees NOT_SERVING at SIGTERM
        (its own daemon: the class's keeps serving)."""
        store = os.path.join(self.root, "health-store")
        os.makedirs(store, exist_ok=True)
        daemon = Daemon(store, os.path.join(self.root, "health.sock"))
        try:
            with grpc.insecure_channel(daemon.address) as channel:
                watch = channel.unary_stream(
                    "/grpc.health.v1.Health/Watch",
                    request_serializer=_identity,
                    response_deserializer=_identity)
                name = b"rbln.artifact.v1.ArtifactService"
                updates = watch(b"\x0a" + bytes([len(name)]) + name,
                                timeout=RPC_TIMEOUT_S)
                self.assertEqual(next(updates), b"\x08\x01")  # SERVING
                daemon.process.send_signal(signal.SIGTERM)
                self.assertEqual(next(updates), b"\x08\x02")  # NOT_SERVING
                updates.cancel()
        finally:
            daemon.stop()

    def test_reflection_lists_the_service(self):
        info = self.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=_identity, response_deserializer=_identity)
        # ServerReflectionRequest{list_services: ""}.
        responses = info(iter([b"\x3a\x00"]), timeout=RPC_TIMEOUT_S)
        first = next(responses)
        responses.cancel()
        self.assertIn(b"rbln.artifact.v1.ArtifactService", first)


class LargeStoreListTest(unittest.TestCase):
    """A store of 10,000 artifacts (hard links of one), listed in pages."""

    COUNT = 10000

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="rbln-py-list-")
        cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
        cls.store = os.path.join(cls.root, "store")
        cls.names = link_store.link_store(
            os.path.join(BIN_DIR, "rbln-artifact-synth"), cls.store,
            cls.COUNT)
        cls.daemon = Daemon(cls.store, os.path.join(cls.root, "d.sock"))
        cls.channel = grpc.insecure_channel(cls.daemon.address)
        cls.stub = pb_grpc.ArtifactServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.stop()

    def page(self, **request):
        return self.stub.ListArtifacts(pb.ListArtifactsRequest(**request),
                                       timeout=RPC_TIMEOUT_S)

    def all_pages(self, **request):
        """Every name, following next_page_token; and the pages taken."""
        names, pages, token = [], 0, ""
        while True:
            reply = self.page(page_token=token, **request)
            pages += 1
            self.assertEqual(bool(reply.roots), pages == 1)
            self.assertFalse([a for a in reply.artifacts if a.error])
            names += [a.artifact for a in reply.artifacts]
            token = reply.next_page_token
            if not token:
                return names, pages

    def test_lists_every_artifact_in_pages_in_byte_order(self):
        names, pages = self.all_pages()
        self.assertEqual(names, self.names)
        self.assertEqual(pages, self.COUNT // 1000)
        names, pages = self.all_pages(page_size=3000)
        self.assertEqual(names, self.names)
        self.assertEqual(pages, 4)
        # Larger than 10,000 is 10,000.
        self.assertEqual(len(self.page(page_size=50000).artifacts),
                         self.COUNT)

    def test_prefix_is_plain_bytes(self):
        names, _ = self.all_pages(prefix="team1", page_size=700)
        self.assertEqual(names,
                         [n for n in self.names if n.startswith("team1")])
        names, _ = self.all_pages(prefix="team2/m00250")
        self.assertEqual(names, ["team2/m00250%d" % i for i in range(10)])

    def test_token_from_a_store_that_changed_meanwhile(self):
        first = self.page(page_size=2, prefix="team9/")
        self.assertEqual([a.artifact for a in first.artifacts],
                         self.names[9000:9002])
        # The last name returned goes, one before it and one after it come:
        # the next page continues after the last name returned.
        moved = os.path.join(self.store, "team9/m009001")
        os.rename(moved, moved + "x")
        os.rename(os.path.join(self.store, "team9/m009000"),
                  os.path.join(self.store, "team9/m009000a"))
        try:
            rest = self.page(page_size=2, prefix="team9/",
                             page_token=first.next_page_token)
            self.assertEqual([a.artifact for a in rest.artifacts],
                             ["team9/m009001x", "team9/m009002"])
        finally:
            os.rename(moved + "x", moved)
            os.rename(os.path.join(self.store, "team9/m009000a"),
                      os.path.join(self.store, "team9/m009000"))

    def test_bad_page_size_and_token_are_invalid_argument(self):
        for request in (dict(page_size=-1), dict(page_token="not a token"),
                        dict(page_token="TDE6OTk5OnRlYW0x")):
            with self.assertRaises(grpc.RpcError) as caught:
                self.page(**request)
            self.assertEqual(caught.exception.code(),
                             grpc.StatusCode.INVALID_ARGUMENT)
            self.assertRegex(caught.exception.details(),
                             "page_size|page_token")


class LongWriteTest(unittest.TestCase):
    """Writes that take a moment: SIGTERM in the middle of one, and a caller
    that goes away in the middle of one."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="rbln-py-test-")
        cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
        cls.store = os.path.join(cls.root, "store")
        os.mkdir(cls.store)
        # Big enough that copying it takes a moment.
        synthesize("tiny", os.path.join(cls.store, "big"), payload="128MiB")

    def wait_until_running(self, stub, future, operation_id):
        """True once the daemon reports the write running (bounded)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not future.done() and time.monotonic() < deadline:
            progress = stub.GetWriteProgress(
                pb.GetWriteProgressRequest(operation_id=operation_id),
                timeout=RPC_TIMEOUT_S)
            if progress.running:
                return True
            time.sleep(0.002)
        return False

    def staging_debris(self):
        found = []
        for parent, dirs, files in os.walk(self.store):
            found += [os.path.join(parent, e) for e in dirs + files
                      if ".staging-" in e or ".retired-" in e]
        return found

    def test_sigterm_lets_a_running_write_finish(self):
        daemon = Daemon(self.store, os.path.join(self.root, "d.sock"))
        try:
            with grpc.insecure_channel(daemon.address) as channel:
                stub = pb_grpc.ArtifactServiceStub(channel)
                current = stub.GetKvcacheNumBlocks(
                    pb.GetKvcacheNumBlocksRequest(artifact="big"),
                    timeout=RPC_TIMEOUT_S)
                target = current.num_min_blocks
                future = stub.SetKvcacheNumBlocks.future(
                    pb.SetKvcacheNumBlocksRequest(
                        artifact="big", num_blocks=target,
                        options=pb.WriteOptions(output_dir="big_copy",
                                                operation_id="shutdown-test")),
                    timeout=STOP_TIMEOUT_S)
                # The signal lands in the middle of the write.
                in_flight = self.wait_until_running(stub, future,
                                                    "shutdown-test")
                daemon.process.send_signal(signal.SIGTERM)
                reply = future.result()
                self.assertTrue(reply.written)
                self.assertEqual(reply.new_num_blocks, target)
                self.assertEqual(reply.output_dir, "big_copy")
        finally:
            daemon.stop()  # SIGTERM again is harmless; must exit 0
        print("write %s when SIGTERM arrived; it finished and the daemon "
              "exited 0" % ("was running" if in_flight else "had finished"))

        # A fresh daemon finds both artifacts whole (payload checksums
        # verified) and no staging debris.
        daemon = Daemon(self.store, os.path.join(self.root, "d2.sock"))
        try:
            with grpc.insecure_channel(daemon.address) as channel:
                stub = pb_grpc.ArtifactServiceStub(channel)
                for name, count in (("big", current.kvcache_num_blocks),
                                    ("big_copy", target)):
                    reply = stub.DescribeArtifact(
                        pb.DescribeArtifactRequest(artifact=name,
                                                   verify_payload=True),
                        timeout=RPC_TIMEOUT_S)
                    self.assertEqual(reply.kvcache_num_blocks, count)
                listing = stub.ListArtifacts(pb.ListArtifactsRequest(),
                                             timeout=RPC_TIMEOUT_S)
                self.assertIn("big_copy",
                              [a.artifact for a in listing.artifacts])
        finally:
            daemon.stop()
        self.assertEqual(self.staging_debris(), [])

    def test_caller_gone_mid_write_changes_nothing_and_frees_its_slot(self):
        daemon = Daemon(self.store, os.path.join(self.root, "d3.sock"),
                        ["--max-concurrent-writes", "1"])
        try:
            with grpc.insecure_channel(daemon.address) as channel:
                stub = pb_grpc.ArtifactServiceStub(channel)
                current = stub.GetKvcacheNumBlocks(
                    pb.GetKvcacheNumBlocksRequest(artifact="big"),
                    timeout=RPC_TIMEOUT_S)
                target = current.num_min_blocks + 1
                for output_dir in ("", "big_cancelled"):
                    future = stub.SetKvcacheNumBlocks.future(
                        pb.SetKvcacheNumBlocksRequest(
                            artifact="big", num_blocks=target,
                            options=pb.WriteOptions(
                                output_dir=output_dir,
                                operation_id="cancel-test")),
                        timeout=STOP_TIMEOUT_S)
                    self.wait_until_running(stub, future, "cancel-test")
                    future.cancel()
                    # The one write slot comes back: a real (in-place) write
                    # is admitted (retrying while the daemon notices); dry
                    # runs are not counted, so they would prove nothing.
                    deadline = time.monotonic() + START_TIMEOUT_S
                    while True:
                        try:
                            reply = stub.SetKvcacheNumBlocks(
                                pb.SetKvcacheNumBlocksRequest(
                                    artifact="big",
                                    num_blocks=current.kvcache_num_blocks),
                                timeout=RPC_TIMEOUT_S)
                            break
                        except grpc.RpcError as e:
                            if (e.code() != grpc.StatusCode.UNAVAILABLE or
                                    time.monotonic() > deadline):
                                raise
                            time.sleep(0.01)
                    # The artifact is whole, at the old count or (when the
                    # cancel came after the commit point) the new one.
                    described = stub.DescribeArtifact(
                        pb.DescribeArtifactRequest(artifact="big",
                                                   verify_payload=True),
                        timeout=RPC_TIMEOUT_S)
                    self.assertIn(described.kvcache_num_blocks,
                                  (current.kvcache_num_blocks, target))
                    if output_dir and os.path.exists(
                            os.path.join(self.store, output_dir)):
                        # Published before the cancel arrived: whole.
                        copy = stub.DescribeArtifact(
                            pb.DescribeArtifactRequest(artifact=output_dir,
                                                       verify_payload=True),
                            timeout=RPC_TIMEOUT_S)
                        self.assertEqual(copy.kvcache_num_blocks, target)
                    print("cancelled %s write: big has %d blocks" %
                          ("in-place" if not output_dir else "copy",
                           described.kvcache_num_blocks))
        finally:
            daemon.stop()
        self.assertEqual(self.staging_debris(), [])


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
