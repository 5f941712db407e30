#!/usr/bin/env python3
"""A codec for tests: speaks the external codec protocol, version 1
(docs/codec-protocol.md), over a file format of its own.

Its files are JSON objects:

    {"test_codec": 1, "granularity": "chiplet", "num_nodes": 1,
     "buckets_per_node": 2, "other": {"weights": [[100, 100]]},
     "kv_tensors": {"kv0": [[64, 64]]}}

Inspect answers those fields; rescale writes a copy with every named tensor's
numbers scaled by target / current (integer division, as bytes would be).

--mode chooses a misbehaviour for the whole process; a file's own "mode" key
chooses one for the requests about that file only (so that a test can break
one request and see the next one, on a fresh worker, succeed):

  ok              behave (the default)
  hang            on inspect and rescale: sleep forever
  exit            on inspect and rescale: exit with status 3
  garbage         answer inspect and rescale with a line that is not JSON
  wrong-shape     answer inspect with a list of the wrong length
  write-outside   on rescale also create the file --outside names (the
                  error of that attempt is the reply, FAILED)
  extra-file      on rescale also write a second file beside the output
  older-compiler  refuse rescale with OLDER_COMPILER
  no-hello        never answer hello
  stderr-flood    on inspect: write megabytes to stderr (long lines and
                  many short ones), then answer
  fork-sleeper    on inspect and rescale: first leave behind a detached
                  process (double fork, setsid) that sleeps for an hour
  keep-descriptor on rescale: say the output's inode on stderr, and leave
                  behind a detached process that keeps the output open
                  and, three seconds after the reply, writes over it
  two-links       on rescale: also link the output at --outside
  fifo            on rescale: make the output a FIFO instead

hello also answers "uid" (os.getuid()), an extra field for tests.
Standard library only; works under any uid (it needs no file but those it is
handed).
"""

import argparse
import json
import os
import socket
import sys
import time

MAX_FDS = 8


def reply(sock, message):
    sock.sendall((json.dumps(message) + "\n").encode())


def error(request_id, code, message):
    return {"id": request_id, "ok": False,
            "error": {"code": code, "message": message}}


def hang():
    while True:
        time.sleep(3600)


def read_source(fd):
    with open("/proc/self/fd/%d" % fd, "rb") as f:
        data = f.read()
    try:
        facts = json.loads(data)
    except ValueError:
        return None
    if not isinstance(facts, dict) or facts.get("test_codec") != 1:
        return None
    return facts


def detach(act):
    """Runs act() in a process that has left this one's session and parent
    (a double fork), as a daemonizing helper would."""
    if os.fork() != 0:
        os.wait()
        return
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    try:
        act()
    finally:
        os._exit(0)


def overwrite_later(fd):
    """What keep-descriptor leaves behind: writes over the file open at fd
    three seconds after the reply."""
    time.sleep(3)
    os.pwrite(fd, b"corrupted by a process the codec left behind", 0)
    time.sleep(60)


def misbehave(mode, sock):
    """Acts out the modes common to inspect and rescale; returns True when
    the request is answered (or never will be)."""
    if mode == "fork-sleeper":
        detach(lambda: time.sleep(3600))
    if mode == "hang":
        hang()
    if mode == "exit":
        sys.stderr.write("test codec: exiting with status 3 as asked\n")
        sys.stderr.flush()
        os._exit(3)
    if mode == "garbage":
        sock.sendall(b"this is not JSON \x01\xff\n")
        return True
    return False


def inspect(request, fds, mode, sock):
    facts = read_source(fds[0])
    if facts is None:
        return error(request["id"], "UNREADABLE",
                     "not a test codec file (a JSON object with "
                     "\"test_codec\": 1)")
    mode = facts.get("mode", mode)
    if misbehave(mode, sock):
        return None
    if mode == "stderr-flood":
        sys.stderr.write("x" * (4 << 20) + "\n")
        for i in range(20000):
            sys.stderr.write("flood line %d\n" % i)
        sys.stderr.flush()
    answer = {"id": request["id"], "ok": True}
    for key in ("granularity", "num_nodes", "buckets_per_node", "other",
                "kv_tensors"):
        answer[key] = facts[key]
    if mode == "wrong-shape":
        name = next(iter(answer["kv_tensors"]))
        answer["kv_tensors"][name] = answer["kv_tensors"][name] + [[1]]
    return answer


def rescale(request, fds, mode, outside, sock):
    facts = read_source(fds[0])
    if facts is None:
        return error(request["id"], "UNREADABLE",
                     "not a test codec file (a JSON object with "
                     "\"test_codec\": 1)")
    mode = facts.get("mode", mode)
    if misbehave(mode, sock):
        return None
    if mode == "older-compiler":
        return error(request["id"], "OLDER_COMPILER",
                     "test codec 1.0 has no exp_rescale_buffer_size: upgrade "
                     "it")
    out_name = request["out_name"]
    if "/" in out_name or out_name in (".", ".."):
        return error(request["id"], "BAD_REQUEST",
                     "out_name must be a plain file name")
    for name, (target, current) in request["factors"].items():
        if name not in facts["kv_tensors"] or current <= 0:
            return error(request["id"], "BAD_REQUEST",
                         "no tensor %r to rescale" % name)
        facts["kv_tensors"][name] = [
            [b * target // current for b in node]
            for node in facts["kv_tensors"][name]]
    out_dir = "/proc/self/fd/%d" % fds[1]
    out_path = os.path.join(out_dir, out_name)
    if mode == "fifo":
        os.mkfifo(out_path)
        return {"id": request["id"], "ok": True}
    with open(out_path, "x") as f:
        json.dump(facts, f)
    if mode == "two-links":
        os.link(out_path, outside)
    if mode == "keep-descriptor":
        kept = os.open(out_path, os.O_WRONLY)
        sys.stderr.write("test codec: output inode %d\n" % os.fstat(kept).st_ino)
        sys.stderr.flush()
        detach(lambda: overwrite_later(kept))
        os.close(kept)
    if mode == "extra-file":
        with open(os.path.join(out_dir, "extra"), "x") as f:
            f.write("not asked for\n")
    if mode == "write-outside":
        try:
            with open(outside, "x") as f:
                f.write("written outside the scratch directory\n")
        except OSError as e:
            return error(request["id"], "FAILED", str(e))
    return {"id": request["id"], "ok": True}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="ok")
    parser.add_argument("--outside", default="/nonexistent/outside")
    args = parser.parse_args()

    sock = socket.socket(fileno=0)
    buffer = b""
    pending_fds = []
    while True:
        while b"\n" not in buffer:
            data, ancdata, _, _ = sock.recvmsg(
                1 << 16, socket.CMSG_SPACE(MAX_FDS * 4))
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    count = len(payload) // 4
                    pending_fds += list(
                        int.from_bytes(payload[i * 4:i * 4 + 4],
                                       sys.byteorder)
                        for i in range(count))
            if not data:
                return 0  # EOF: the daemon is done with us
            buffer += data
        line, buffer = buffer.split(b"\n", 1)
        try:
            request = json.loads(line)
        except ValueError:
            reply(sock, error(None, "BAD_REQUEST", "not a JSON line"))
            continue
        fds = pending_fds[:len(request.get("fds", []))]
        pending_fds = pending_fds[len(fds):]
        op = request.get("op")
        try:
            if op == "hello":
                if args.mode == "no-hello":
                    hang()
                answer = {"id": request["id"], "ok": True, "protocol": 1,
                          "codec": "test", "codec_version": "1.0",
                          "api": "per_chiplet", "can_rescale": True,
                          "uid": os.getuid()}
            elif op == "inspect":
                answer = inspect(request, fds, args.mode, sock)
            elif op == "rescale":
                answer = rescale(request, fds, args.mode, args.outside, sock)
            else:
                answer = error(request.get("id"), "BAD_REQUEST",
                               "unknown op %r" % op)
        finally:
            for fd in fds:
                os.close(fd)
        if answer is not None:
            reply(sock, answer)


if __name__ == "__main__":
    sys.exit(main())
