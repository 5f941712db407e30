#!/usr/bin/python3
"""deploy/kubernetes/, checked offline (docs/deploying.md, "A fleet").

ManifestTest: every YAML document in deploy/kubernetes/ is valid against the
Kubernetes API schemas and type declarations (deploy/kubernetes/validate/:
the npm packages kubernetes-models and typescript, installed into the build
directory by `npm ci` from its lock file); broken copies of them are
refused, each with a message that names what is wrong; the Jobs that
deploy/fleet-budget.sh renders are valid too.

ConfigMapTest: the ConfigMap's config file, taken out of the YAML by the
same parser, starts the real rbln-artifactd with its paths moved into a
temporary directory and its addresses onto free loopback ports: the health
port answers SERVING without credentials, and the fleet's client
certificate (cn:fleet-job, an operator there) writes over mutual TLS.

Without node and npm the tests skip (exit 77), saying why.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

SKIP = 77
SOURCE = os.environ.get(
    "RBLN_SOURCE_DIR",
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("RBLN_BIN_DIR", os.path.join(SOURCE, "build", "bin"))
VALIDATOR_DIR = os.environ.get(
    "RBLN_K8S_VALIDATOR_DIR", os.path.join(BIN, "..", "k8s-validate"))
MANIFESTS = os.path.join(SOURCE, "deploy", "kubernetes")
TIMEOUT_S = 300  # turns a hang into a failure (the first run installs)


def validator(*args, stdout_only=False):
    """deploy/kubernetes/validate/validate.sh ARGS: (exit code, output).
    With stdout_only, the output is what the script prints as its result
    (the first run's npm install, on stderr, is left out) and stderr is
    returned only on a failure."""
    run = subprocess.run(
        [os.path.join(MANIFESTS, "validate", "validate.sh"), VALIDATOR_DIR,
         *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stdout_only else subprocess.STDOUT,
        text=True, timeout=TIMEOUT_S, check=False)
    if run.returncode == SKIP:
        raise unittest.SkipTest((run.stdout + (run.stderr or "")).strip())
    if stdout_only and run.returncode != 0:
        return run.returncode, run.stdout + run.stderr
    return run.returncode, run.stdout


class ManifestTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="k8s-manifests-")
        self.addCleanup(shutil.rmtree, self.tmp)

    def test_every_manifest_is_valid(self):
        code, out = validator(MANIFESTS)
        self.assertEqual(code, 0, out)
        # The namespace, ConfigMap, DaemonSet, Service and the Job template.
        self.assertIn("5 documents in 5 files are valid", out)

    def broken_copy(self, file, old, new):
        """deploy/kubernetes/ copied, with `old` replaced by `new` in
        `file`."""
        copy = os.path.join(tempfile.mkdtemp(dir=self.tmp), "kubernetes")
        shutil.copytree(MANIFESTS, copy,
                        ignore=shutil.ignore_patterns("validate"))
        path = os.path.join(copy, file)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertIn(old, text)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        return copy, path

    def test_broken_manifests_are_refused(self):
        cases = [
            # A port that is not a number.
            ("daemonset.yaml", "containerPort: 50051",
             "containerPort: \"fifty\"", "containerPort must be integer"),
            # A container without its name (misspelt).
            ("jobs/budget-job.yaml", "- name: set-memory-budget",
             "- nme: set-memory-budget", "must have required property name"),
            # A memory limit that is no quantity.
            ("daemonset.yaml", "memory: 512Mi", "memory: lots",
             "must match format \"quantity\""),
            # A misspelt optional field: the schemas allow unknown fields,
            # the type declarations do not.
            ("daemonset.yaml", "readOnlyRootFilesystem: true",
             "readOnlyRootFilesytem: true",
             "'\"readOnlyRootFilesytem\"' does not exist in type"),
            ("jobs/budget-job.yaml", "nodeSelector:", "nodeSelecter:",
             "'\"nodeSelecter\"' does not exist in type 'IPodSpec'"),
            # A misspelt kind.
            ("service.yaml", "kind: Service", "kind: Servise",
             "unknown apiVersion/kind v1 Servise"),
            # A key given twice: YAML keeps one silently elsewhere.
            ("configmap.yaml", "  namespace: rbln-artifactd\n",
             "  namespace: rbln-artifactd\n  namespace: default\n",
             "Map keys must be unique"),
            # Not YAML at all.
            ("jobs/budget-job.yaml", "backoffLimit: 0", "backoffLimit: [0",
             "budget-job.yaml"),
        ]
        # One run over all the copies (each starts node and TypeScript).
        copies = [self.broken_copy(file, old, new) + (message,)
                  for file, old, new, message in cases]
        code, out = validator(*[copy for copy, _, _ in copies])
        self.assertEqual(code, 1, out)
        lines = out.splitlines()
        for copy, path, message in copies:
            with self.subTest(path=path, message=message):
                self.assertTrue(
                    any(line.startswith(path) and message in line
                        for line in lines), out)
                # Nothing else of that copy is wrong.
                self.assertEqual(
                    [line for line in lines if line.startswith(copy + "/")
                     and not line.startswith(path)], [], out)

    def test_rendered_budget_jobs_are_valid(self):
        render = subprocess.run(
            [os.path.join(SOURCE, "deploy", "fleet-budget.sh"), "--render",
             "--nodes", "npu-1 npu-2.example.com", "--artifact", "llama/v1",
             "--budget", "80%", "--image", "registry.example/rbln:1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=TIMEOUT_S, check=False)
        self.assertEqual(render.returncode, 0, render.stderr)
        self.assertIsNone(
            re.search(r"@(RUN|INDEX|NODE|ARTIFACT|BUDGET)@", render.stdout),
            render.stdout)
        for expected in ('kubernetes.io/hostname: "npu-1"',
                         'kubernetes.io/hostname: "npu-2.example.com"',
                         "/var/lib/rbln-artifactd/llama/v1",
                         '- "80%"', "image: registry.example/rbln:1"):
            self.assertIn(expected, render.stdout)
        jobs = os.path.join(self.tmp, "jobs.yaml")
        with open(jobs, "w", encoding="utf-8") as f:
            f.write(render.stdout)
        code, out = validator(jobs)
        self.assertEqual(code, 0, out)
        self.assertIn("2 documents in 1 files are valid", out)
        # What could break the YAML or leave the store is refused.
        for bad in (["--artifact", "../etc"], ["--artifact", "a\nb"],
                    ["--budget", "0.8\"x"], ["--image", "a|b"]):
            args = {"--artifact": "llama", "--budget": "0.8", "--image": "i"}
            args[bad[0]] = bad[1]
            refused = subprocess.run(
                [os.path.join(SOURCE, "deploy", "fleet-budget.sh"),
                 "--render", "--nodes", "npu-1",
                 *[x for kv in args.items() for x in kv]],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                timeout=TIMEOUT_S, check=False)
            self.assertEqual(refused.returncode, 2, bad)
            self.assertEqual(refused.stdout, "", bad)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=60)


def issue(directory, name, cn, ext):
    """name.crt and name.key, of CN `cn`, signed by ca.crt."""
    openssl("req", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={cn}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=directory)
    with open(os.path.join(directory, f"{name}.ext"), "w",
              encoding="utf-8") as f:
        f.write(ext)
    openssl("x509", "-req", "-days", "2", "-in", f"{name}.csr", "-CA",
            "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-extfile",
            f"{name}.ext", "-out", f"{name}.crt", cwd=directory)


class ConfigMapTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="k8s-config-")
        self.addCleanup(shutil.rmtree, self.tmp)

    def rewritten_config(self):
        """The ConfigMap's file with every absolute path under self.tmp and
        every 0.0.0.0:PORT on a free loopback port; (text, {old: new})."""
        code, text = validator("--config-map",
                               os.path.join(MANIFESTS, "configmap.yaml"),
                               "rbln-artifactd", "rbln-artifactd.toml",
                               stdout_only=True)
        self.assertEqual(code, 0, text)
        moved = {}

        def move_path(match):
            moved[match.group(2)] = self.tmp + match.group(2)
            return f'"{match.group(1) or ""}{self.tmp}{match.group(2)}"'

        def move_address(match):
            moved[match.group(0)] = f'"127.0.0.1:{free_port()}"'
            return moved[match.group(0)]

        text = re.sub(r'"(unix:)?(/[^"]*)"', move_path, text)
        text = re.sub(r'"0\.0\.0\.0:\d+"', move_address, text)
        if os.geteuid() != 0:  # only root may give the socket to a group
            text = re.sub(r'(?m)^socket-group = .*$',
                          f'socket-group = "{os.getgid()}"', text)
        # Nothing of this host's is left in it.
        for path in re.findall(r'"(?:unix:)?(/[^"]*)"', text):
            self.assertTrue(path.startswith(self.tmp + "/"), path)
        return text, moved

    def test_config_map_starts_the_daemon(self):
        text, moved = self.rewritten_config()
        for key in ("/var/lib/rbln-artifactd", '"0.0.0.0:50051"',
                    '"0.0.0.0:8081"', "/etc/rbln-artifactd/tls/tls.crt"):
            self.assertIn(key, moved)
        socket_path = moved["/run/rbln-artifactd/rbln-artifactd.sock"]
        os.makedirs(os.path.dirname(socket_path))
        tls = os.path.dirname(moved["/etc/rbln-artifactd/tls/tls.crt"])
        os.makedirs(tls)
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out",
                "ca.crt", cwd=tls)
        issue(tls, "tls", "rbln-artifactd",
              "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        issue(tls, "fleet-job", "fleet-job", "extendedKeyUsage=clientAuth\n")
        store = moved["/var/lib/rbln-artifactd"]
        subprocess.run([os.path.join(BIN, "rbln-artifact-synth"), "--preset",
                        "tiny", "--out", os.path.join(store, "tiny")],
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        config = os.path.join(self.tmp, "rbln-artifactd.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(text)

        log_path = os.path.join(self.tmp, "daemon.log")
        with open(log_path, "w", encoding="utf-8") as log:
            daemon = subprocess.Popen(
                [os.path.join(BIN, "rbln-artifactd"), "--config", config],
                stdout=log, stderr=log)
        self.addCleanup(lambda: daemon.poll() is None and daemon.kill())

        def daemon_log():
            with open(log_path, encoding="utf-8") as f:
                return f.read()

        health = moved['"0.0.0.0:8081"'].strip('"')
        deadline = time.monotonic() + 60
        while daemon.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(
                    ("127.0.0.1", int(health.split(":")[1])), 1).close()
                break
            except OSError:
                time.sleep(0.05)
        self.assertIsNone(daemon.poll(), daemon_log())

        import grpc  # python3-grpcio, as tests/python_client_test.py
        with grpc.insecure_channel(health) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            name = b"rbln.artifact.v1.ArtifactService"
            # HealthCheckResponse{status: SERVING}, for HealthCheckRequest
            # {service: NAME}.
            self.assertEqual(
                check(b"\x0a" + bytes([len(name)]) + name, timeout=30),
                b"\x08\x01")

        mtls = moved['"0.0.0.0:50051"'].strip('"')
        write = subprocess.run(
            [os.path.join(BIN, "rbln-artifact"), "--server", mtls,
             "--tls-ca", os.path.join(tls, "ca.crt"),
             "--tls-cert", os.path.join(tls, "fleet-job.crt"),
             "--tls-key", os.path.join(tls, "fleet-job.key"),
             "--set-memory-budget", "0.5", "--model-id", "tiny"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=60, check=False)
        self.assertEqual(write.returncode, 0,
                         write.stderr + "\n" + daemon_log())
        self.assertIn("memory_budget 0.5 fits kvcache_num_blocks=",
                      write.stdout)
        self.assertIn("Set kvcache_num_blocks to ", write.stdout)
        self.assertTrue(os.path.exists(socket_path), daemon_log())

        # On the socket this test's uid (root in CI, else the daemon's own)
        # reads, but is no operator: no-default-operators.
        def on_socket(*flags):
            return subprocess.run(
                [os.path.join(BIN, "rbln-artifact"), "--server",
                 "unix:" + socket_path, *flags, "--model-id",
                 os.path.join(store, "tiny")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                timeout=60, check=False)
        read = on_socket("--get-kvcache-num-blocks")
        self.assertEqual(read.returncode, 0, read.stderr + daemon_log())
        refused = on_socket("--set-memory-budget", "0.4")
        self.assertEqual(refused.returncode, 1,
                         refused.stderr + "\n" + daemon_log())
        self.assertIn("PERMISSION_DENIED", refused.stderr)

        daemon.send_signal(signal.SIGTERM)
        self.assertEqual(daemon.wait(timeout=60), 0, daemon_log())
        self.assertIn('caller="cn:fleet-job" role=operator', daemon_log())
        self.assertRegex(daemon_log(),
                         r'method=FitMemoryBudget artifact="tiny" '
                         r'caller="user:[^"]+" role=reader '
                         r'outcome=PERMISSION_DENIED')


def main():
    program = unittest.main(exit=False, verbosity=2)
    result = program.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        print(f"SKIP: {result.skipped[0][1]}")
        sys.exit(SKIP)


if __name__ == "__main__":
    main()
