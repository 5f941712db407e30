#!/usr/bin/python3
"""The Debian package, built and taken apart as an operator would get it.

Runs `cpack -G DEB` in the build directory (cmake/Install.cmake), unpacks the
.deb with `dpkg-deb -x` into a temporary root, and checks:
  * every program runs from there: --version prints the project version and
    the same commit as the build tree's program, --help its usage;
  * the man pages (when the build had help2man), the systemd unit, the
    .proto files and the docs are in the package;
  * the rebel adapter is in libexec, mode 0755 with a /usr/bin/python3
    line, and its --help and --version run from there (without rebel,
    --version names PYTHONPATH);
  * the control file: the package's name and version, and Depends naming
    Debian packages this machine has (dpkg-shlibdeps' libraries, adduser),
    among them the package of every shared library a program links (and,
    linked against gRPC's archives, none of gRPC, protobuf or Abseil in the
    daemon and the CLI);
  * `cmake --install --prefix DIR` (no package): the unit's ExecStart names
    DIR/sbin/rbln-artifactd, and the sysusers.d file is there and makes the
    users rbln-artifactd and rbln-codec (systemd-sysusers --root);
  * the maintainer scripts: postinst creates the rbln-artifactd system user
    and group, the codec's (rbln-codec, no home), and the store
    /var/lib/rbln-artifactd as the service user's, and no script starts or
    enables the unit. The scripts run with `systemctl` and its Debian
    helpers replaced by recorders on PATH, and are read for any start or enable. As root, postinst runs the real
    adduser in a private mount namespace over a copy of /etc (unshare -m),
    so that the user is made there and the machine's /etc is untouched;
    elsewhere adduser is a recorder too.
Exits 77 (skipped), saying why, where cpack or dpkg-deb is missing.
"""

import glob
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
PROGRAMS = {  # program -> where the package installs it
    "rbln-artifactd": "usr/sbin",
    "rbln-artifact": "usr/bin",
    "rbln-artifact-synth": "usr/bin",
}
MAN_PAGES = {
    "rbln-artifactd": ("usr/share/man/man8/rbln-artifactd.8.gz", "8",
                       r"\-\-listen"),
    "rbln-artifact": ("usr/share/man/man1/rbln-artifact.1.gz", "1",
                      r"\-\-server\-info"),
    "rbln-artifact-synth": ("usr/share/man/man1/rbln-artifact-synth.1.gz",
                            "1", r"\-\-preset"),
}
CODEC = "usr/libexec/rbln-artifactd/rbln_codec_rebel.py"
FILES = [
    "usr/lib/systemd/system/rbln-artifactd.service",
    "usr/share/rbln-artifactd/proto/rbln/artifact/v1/artifact_service.proto",
    "usr/share/rbln-artifactd/proto/google/rpc/status.proto",
    "usr/share/rbln-artifactd/rbln-artifactd.conf",
    "usr/lib/sysusers.d/rbln-artifactd.conf",
    "usr/share/doc/rbln-artifactd/README.md",
    "usr/share/doc/rbln-artifactd/docs/security.md",
]
# What a maintainer script must not do: start or enable the unit.
STARTS = re.compile(
    r"systemctl\b[^\n]*\b(start|enable|restart|reload-or-restart)\b"
    r"|deb-systemd-invoke\b[^\n]*\b(start|restart)\b"
    r"|deb-systemd-helper\b[^\n]*\benable\b")

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          **kwargs)


def build_package(cpack, build_dir, out_dir):
    """The path of the .deb cpack writes into out_dir."""
    made = run([cpack, "-G", "DEB", "-B", out_dir, "--config",
                os.path.join(build_dir, "CPackConfig.cmake")], cwd=build_dir)
    if made.returncode != 0:
        sys.exit(f"cpack -G DEB failed (exit {made.returncode}):\n"
                 f"{made.stdout}{made.stderr}")
    debs = glob.glob(os.path.join(out_dir, "*.deb"))
    if len(debs) != 1:
        sys.exit(f"cpack wrote {debs or 'no .deb'} into {out_dir}:\n"
                 f"{made.stdout}")
    return debs[0]


def check_control(deb, version, root):
    fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends"])
    check(fields.returncode == 0, f"dpkg-deb -f: {fields.stderr}")
    control = dict(line.split(": ", 1)
                   for line in fields.stdout.splitlines() if ": " in line)
    check(control.get("Package") == "rbln-artifactd",
          f"Package: {control.get('Package')}")
    check(control.get("Version") == version,
          f"Version: {control.get('Version')}, CMake says {version}")
    depends = control.get("Depends", "")
    names = [re.split(r"[\s(]", alternative.strip())[0]
             for dep in depends.split(",") for alternative in dep.split("|")]
    # OpenSSL is shared in every build; rbln-artifact-synth links protobuf
    # shared.
    for wanted in (r"libc6", r"libssl3", r"libprotobuf[0-9]+", r"adduser"):
        check(any(re.fullmatch(wanted, name) for name in names),
              f"Depends has no {wanted}: {depends}")
    # What is installed here, by name or by what it provides (spdlog's
    # package provides libspdlog1.10-fmt9, which Depends names); a name dpkg
    # knows only as "not-installed" does not count.
    installed = set()
    listing = run(["dpkg-query", "-W",
                   "-f=${db:Status-Abbrev}|${Package}|${Provides}\n"])
    for line in listing.stdout.splitlines():
        status, package, provides = (line.split("|") + ["", ""])[:3]
        if status.startswith("ii"):
            installed.add(package)
            installed.update(re.split(r"[\s(]", item.strip())[0]
                             for item in provides.split(",") if item.strip())
    for name in names:
        check(name in installed,
              f"Depends names {name}, which no installed package is or "
              f"provides here")
    for program, directory in PROGRAMS.items():
        check_links(os.path.join(root, directory, program), program, names,
                    depends)


# What the daemon and the CLI must not load when linked against gRPC's
# archives (cmake/StaticGrpc.cmake).
ARCHIVED = re.compile(r"lib(grpc|gpr|upb|address_sorting|protobuf|absl_|re2)")


def owners(library):
    """The packages that own `library` (a path), by dpkg -S, which knows
    a merged-/usr file by either spelling."""
    for path in dict.fromkeys([library, os.path.realpath(library)]):
        found = run(["dpkg", "-S", path])
        packages = [package.split(":")[0].strip()
                    for line in found.stdout.splitlines()
                    if ": " in line and not line.startswith("diversion ")
                    for package in line.split(": ", 1)[0].split(",")]
        if found.returncode == 0 and packages:
            return packages
    return []


def check_links(path, program, names, depends):
    """Every shared library `program` links (its own NEEDED entries; theirs
    come with their packages) is from a package Depends names, or one such
    a package provides (libspdlog1.10 provides libspdlog1.10-fmt9); with
    gRPC's archives, the daemon and the CLI link none of gRPC, protobuf or
    Abseil."""
    header = run(["objdump", "-p", path]).stdout
    needed = re.findall(r"NEEDED\s+(\S+)", header)
    check(needed, f"objdump -p {path} lists no NEEDED libraries")
    loaded = run(["ldd", path]).stdout
    found = dict(re.findall(r"^\s*(\S+) => (/\S+)", loaded, re.M))
    interpreter = re.search(r"\s(/\S*ld-linux\S*)", loaded)
    if interpreter:
        found.setdefault(os.path.basename(interpreter.group(1)),
                         interpreter.group(1))
    if (os.environ.get("RBLN_GRPC_ARCHIVES") == "ON" and
            program != "rbln-artifact-synth"):
        shared = [soname for soname in needed if ARCHIVED.match(soname)]
        check(not shared, f"{program} is linked against gRPC's archives "
                          f"(cmake/StaticGrpc.cmake) but links {shared}")
    for soname in needed:
        library = found.get(soname)
        packages = owners(library) if library else []
        offered = set(packages)
        for package in packages:
            provides = run(["dpkg-query", "-W", "-f=${Provides}", package])
            offered.update(re.split(r"[\s(]", item.strip())[0]
                           for item in provides.stdout.split(","))
        check(offered & set(names),
              f"{program} links {soname} ({library or 'not found by ldd'}, "
              f"from {', '.join(packages) or 'no package'}), which Depends "
              f"does not name: {depends}")


def check_programs(root, bin_dir):
    env = dict(os.environ)
    for var in ("RBLN_ARTIFACTD_SOCKET", "RBLN_ARTIFACTD_ADDRESS",
                "RBLN_ARTIFACTD_STORE"):
        env.pop(var, None)
    for program, directory in PROGRAMS.items():
        path = os.path.join(root, directory, program)
        if not os.access(path, os.X_OK):
            failures.append(f"{directory}/{program} is not in the package")
            continue
        built = run([os.path.join(bin_dir, program), "--version"], env=env)
        version = run([path, "--version"], env=env)
        check(version.returncode == 0 and version.stdout == built.stdout,
              f"{program} --version from the package: exit "
              f"{version.returncode}, {version.stdout!r}{version.stderr!r}; "
              f"the build tree's says {built.stdout!r}")
        check(re.fullmatch(re.escape(program) + " " +
                           re.escape(os.environ["RBLN_EXPECTED_VERSION"]) +
                           r" \(commit \S+\)\n", version.stdout),
              f"{program} --version: {version.stdout!r}")
        helped = run([path, "--help"], env=env)
        check(helped.returncode == 0 and "Usage: " in helped.stdout and
              "--version" in helped.stdout,
              f"{program} --help from the package: exit {helped.returncode}, "
              f"{helped.stdout[:200]!r}{helped.stderr[:200]!r}")


def check_codec(root):
    """The rebel adapter as the package installs it (cmake/Install.cmake)."""
    path = os.path.join(root, CODEC)
    if not os.path.isfile(path):
        failures.append(f"{CODEC} is not in the package")
        return
    check(os.stat(path).st_mode & 0o7777 == 0o755,
          f"{CODEC} has mode {os.stat(path).st_mode & 0o7777:o}, not 755")
    with open(path, encoding="utf-8") as f:
        check(f.readline() == "#!/usr/bin/python3\n",
              f"{CODEC} does not start with #!/usr/bin/python3")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    helped = run([path, "--help"], env=env)
    check(helped.returncode == 0 and
          "usage: rbln_codec_rebel.py" in helped.stdout,
          f"{CODEC} --help: exit {helped.returncode}, "
          f"{helped.stdout[:200]!r}{helped.stderr[:200]!r}")
    version = run([path, "--version"], env=env)
    lines = version.stdout.splitlines()
    if version.returncode == 0:  # rebel-compiler is installed here
        version_ok = len(lines) == 2 and lines[1].startswith("rebel-compiler")
    else:
        version_ok = (version.returncode == 1 and
                       "PYTHONPATH" in version.stderr)
    check(len(lines) >= 1 and version_ok and re.fullmatch(
        r"rbln_codec_rebel \S+ \(codec protocol 1\)", lines[0]),
          f"{CODEC} --version: exit {version.returncode}, "
          f"{version.stdout!r}{version.stderr[:300]!r}")


def check_files(root, man_pages):
    for relative in FILES:
        check(os.path.isfile(os.path.join(root, relative)),
              f"{relative} is not in the package")
    unit = os.path.join(root, FILES[0])
    if os.path.isfile(unit):
        starts = unit_exec_starts(unit)
        check(len(starts) == 1 and
              os.path.isfile(os.path.join(root, starts[0].lstrip("/"))),
              f"the unit's ExecStart {starts} is not a program of the package")
    proto = os.path.join(root, FILES[1])
    if os.path.isfile(proto):
        with open(proto, encoding="utf-8") as f:
            check("rpc GetServerInfo" in f.read(),
                  "the packaged artifact_service.proto has no GetServerInfo")
    if not man_pages:
        print("note: the build had no help2man, so the man pages are not "
              "checked")
        return
    for program, (relative, section, flag) in MAN_PAGES.items():
        path = os.path.join(root, relative)
        if not os.path.isfile(path):
            failures.append(f"{relative} is not in the package")
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            page = f.read()
        title = re.search(r'^\.TH "?([^" ]+)"? "?(\d)"? .*"' +
                          re.escape(program) + " " +
                          re.escape(os.environ["RBLN_EXPECTED_VERSION"]),
                          page, re.M)
        check(title is not None and title.group(1) == program.upper() and
              title.group(2) == section,
              f"{relative}: no .TH {program.upper()} {section} ... "
              f"{program} VERSION line")
        check(flag in page, f"{relative} does not document {flag}")


def unit_exec_starts(unit):
    with open(unit, encoding="utf-8") as f:
        return re.findall(r"^ExecStart=(\S+)", f.read(), re.M)


def check_plain_install(cmake, build_dir, work):
    """`cmake --install --prefix DIR`, as docs/installing.md does with
    /usr/local: the unit's ExecStart names DIR/sbin/rbln-artifactd, which
    is there, and the sysusers.d file that makes its user is installed."""
    prefix = os.path.join(work, "prefix")
    env = {k: v for k, v in os.environ.items() if k != "DESTDIR"}
    made = run([cmake, "--install", build_dir, "--prefix", prefix], env=env)
    check(made.returncode == 0,
          f"cmake --install --prefix {prefix}: exit {made.returncode}: "
          f"{made.stdout}{made.stderr}")
    daemon = os.path.join(prefix, "sbin", "rbln-artifactd")
    unit = os.path.join(prefix, "lib/systemd/system/rbln-artifactd.service")
    starts = unit_exec_starts(unit) if os.path.isfile(unit) else []
    check(starts == [daemon] and os.access(daemon, os.X_OK),
          f"cmake --install --prefix {prefix}: the unit's ExecStart is "
          f"{starts}, not the installed {daemon}")
    sysusers = os.path.join(prefix, "lib/sysusers.d/rbln-artifactd.conf")
    if os.path.isfile(sysusers):
        with open(sysusers, encoding="utf-8") as f:
            text = f.read()
        check(re.search(r'^u rbln-artifactd - "rbln-artifactd" '
                        r'/var/lib/rbln-artifactd$', text, re.M),
              f"{sysusers} does not create the user rbln-artifactd")
        check_sysusers(sysusers, work)
    else:
        failures.append(f"cmake --install installed no {sysusers}")
    codec = os.path.join(prefix, "libexec/rbln-artifactd/rbln_codec_rebel.py")
    check(os.access(codec, os.X_OK),
          f"cmake --install installed no executable {codec}")
    # A full build makes everything an install takes: nothing is skipped.
    for page in ("man8/rbln-artifactd.8.gz", "man1/rbln-artifact.1.gz",
                 "man1/rbln-artifact-synth.1.gz"):
        check(os.path.isfile(os.path.join(prefix, "share/man", page)),
              f"cmake --install installed no {page}")
    check("Skipped" not in made.stdout,
          f"cmake --install skipped what a full build makes: {made.stdout}")


def check_sysusers(sysusers, work):
    """systemd-sysusers applies the installed file to an empty /etc under
    --root: the daemon's user and the codec's, each a system user with a
    group of its own and no login, the codec's without a home."""
    if not shutil.which("systemd-sysusers"):
        print("note: no systemd-sysusers: the sysusers file is not applied")
        return
    root = os.path.join(work, "sysusers-root")
    os.makedirs(os.path.join(root, "etc"))
    made = run(["systemd-sysusers", "--root", root, sysusers])
    check(made.returncode == 0,
          f"systemd-sysusers {sysusers}: exit {made.returncode}: "
          f"{made.stderr}")
    with open(os.path.join(root, "etc", "passwd"), encoding="utf-8") as f:
        passwd = f.read()
    with open(os.path.join(root, "etc", "group"), encoding="utf-8") as f:
        group = f.read()
    for name in ("rbln-artifactd", "rbln-codec"):
        check_system_user(name, "\n".join(
            [line for line in passwd.splitlines()
             if line.startswith(name + ":")] +
            [line for line in group.splitlines()
             if line.startswith(name + ":")]))
    check(re.search(r"^rbln-codec:x:\d+:\d+:[^:]*:/nonexistent:", passwd,
                    re.M),
          f"{sysusers} gives rbln-codec a home: {passwd!r}")


def copy_etc(work):
    """A copy of /etc for a private mount namespace (what cannot be read,
    such as sockets, is left out)."""
    etc = os.path.join(work, "etc")
    shutil.copytree("/etc", etc, symlinks=True,
                    ignore_dangling_symlinks=True,
                    copy_function=copy_if_regular)
    return etc


def copy_if_regular(source, target):
    try:
        shutil.copy2(source, target)
    except OSError:
        pass


def check_system_user(name, getent):
    """`getent passwd` and `getent group` of `name`, as printed after
    postinst: a system user (uid below 1000) with its own group, no login."""
    lines = getent.splitlines()
    user = lines[0].split(":") if lines else []
    group = lines[1].split(":") if len(lines) > 1 else []
    check(len(user) == 7 and user[0] == name and
          int(user[2]) < 1000 and user[6].endswith("nologin"),
          f"no {name} system user: {getent!r}")
    check(len(group) == 4 and group[0] == name and
          len(user) == 7 and group[2] == user[3],
          f"no {name} group for the user: {getent!r}")


def check_state_directory(output):
    """The last line of postinst's run: `stat` of /var/lib/rbln-artifactd,
    which postinst makes as the service user's (StateDirectory= would chown
    a root-owned one recursively)."""
    lines = output.splitlines()
    check(lines and lines[-1] == "rbln-artifactd:rbln-artifactd 755",
          f"postinst did not make /var/lib/rbln-artifactd "
          f"rbln-artifactd:rbln-artifactd 0755: {output!r}")


def check_existing_accounts(postinst, work, env):
    """postinst where an admin made the accounts first (in a private mount
    namespace over a fresh copy of /etc): a lone group rbln-artifactd
    becomes the user's group; an ordinary (login) user rbln-artifactd is
    kept with a warning, and postinst still succeeds."""
    os.makedirs(os.path.join(work, "accounts"))
    for setup, expect_warning in (
            ("groupadd --system rbln-artifactd", False),
            ("useradd --uid 4242 --user-group rbln-artifactd", True)):
        ran = run(["unshare", "-m", "sh", "-ec",
                   'mount --bind "$1" /etc; mount -t tmpfs tmpfs /var/lib; '
                   f'{setup}; "$2" configure; id -gn rbln-artifactd',
                   "sh", copy_etc(os.path.join(work, "accounts", setup[:3])),
                   postinst], env=env)
        check(ran.returncode == 0 and
              ran.stdout.splitlines()[-1:] == ["rbln-artifactd"],
              f"postinst configure after '{setup}': exit {ran.returncode}, "
              f"{ran.stdout!r} {ran.stderr!r}")
        warned = "is not a system user" in ran.stderr
        check(warned == expect_warning,
              f"postinst configure after '{setup}': stderr {ran.stderr!r}")


def check_maintainer_scripts(deb, work):
    control_dir = os.path.join(work, "control")
    extracted = run(["dpkg-deb", "-e", deb, control_dir])
    check(extracted.returncode == 0, f"dpkg-deb -e: {extracted.stderr}")
    for script in ("preinst", "postinst", "prerm", "postrm"):
        path = os.path.join(control_dir, script)
        if not os.path.exists(path):
            continue
        check(os.access(path, os.X_OK), f"{script} is not executable")
        syntax = run(["sh", "-n", path])
        check(syntax.returncode == 0, f"{script}: sh -n: {syntax.stderr}")
        with open(path, encoding="utf-8") as f:
            # Comments may say what an operator runs.
            text = "\n".join(line for line in f.read().splitlines()
                             if not line.lstrip().startswith("#"))
        found = STARTS.search(text)
        check(found is None,
              f"{script} starts or enables the unit: {found and found.group(0)}")

    # The scripts run as dpkg runs them, with recorders for the commands that
    # would change this machine.
    recorders = os.path.join(work, "recorders")
    log = os.path.join(work, "calls.log")
    os.makedirs(recorders)
    private_etc = (os.geteuid() == 0 and shutil.which("unshare") and
                   shutil.which("adduser"))
    recorded = ["systemctl", "deb-systemd-invoke", "deb-systemd-helper",
                "systemd-sysusers"]
    if not private_etc:
        print("note: not root, or no unshare or adduser: adduser is recorded, "
              "not run")
        recorded += ["adduser", "useradd", "groupadd"]
    for command in recorded:
        with open(os.path.join(recorders, command), "w") as f:
            f.write(f'#!/bin/sh\necho "{command} $*" >> "{log}"\n')
        os.chmod(os.path.join(recorders, command), 0o755)
    env = dict(os.environ, PATH=recorders + ":" + os.environ["PATH"])
    calls = {}
    for script, argument in (("postinst", "configure"), ("prerm", "remove"),
                             ("postrm", "remove"), ("postrm", "purge")):
        path = os.path.join(control_dir, script)
        if not os.path.exists(path):
            failures.append(f"the package has no {script}")
            continue
        open(log, "w").close()
        if private_etc and script == "postinst":
            # Twice: a reinstall finds the user there already. /var/lib is
            # an empty tmpfs there, so the store directory is made anew.
            ran = run(["unshare", "-m", "sh", "-ec",
                       'mount --bind "$1" /etc; '
                       'mount -t tmpfs tmpfs /var/lib; "$2" configure; '
                       '"$2" configure; getent passwd rbln-artifactd; '
                       'getent group rbln-artifactd; '
                       'getent passwd rbln-codec; getent group rbln-codec; '
                       'stat -c "%U:%G %a" /var/lib/rbln-artifactd',
                       "sh", copy_etc(work), path], env=env)
            lines = ran.stdout.splitlines()
            check_system_user("rbln-artifactd", "\n".join(lines[-5:-3]))
            check_system_user("rbln-codec", "\n".join(lines[-3:-1]))
            check_state_directory(ran.stdout)
            check_existing_accounts(path, work, env)
        else:
            ran = run([path, argument], env=env)
        check(ran.returncode == 0,
              f"{script} {argument}: exit {ran.returncode}: {ran.stderr}")
        with open(log) as f:
            calls[(script, argument)] = f.read().splitlines()
    postinst = calls.get(("postinst", "configure"), [])
    if not private_etc:
        check(any(re.fullmatch(r"adduser .*--system\b.*", call) and
                  "--ingroup" in call.split() and
                  call.split()[-1] == "rbln-artifactd" for call in postinst),
              f"postinst configure did not create the rbln-artifactd system "
              f"user (adduser --system --ingroup rbln-artifactd ... "
              f"rbln-artifactd); it ran: {postinst}")
        check(any(re.fullmatch(r"adduser .*--system\b.*", call) and
                  "--no-create-home" in call.split() and
                  call.split()[-1] == "rbln-codec" for call in postinst),
              f"postinst configure did not create the codec's system user "
              f"(adduser --system ... --no-create-home rbln-codec); it ran: "
              f"{postinst}")
    for (script, argument), made in calls.items():
        for call in made:
            words = call.split()
            allowed = (words[:2] == ["systemctl", "daemon-reload"] or
                       words[:3] == ["systemctl", "stop",
                                     "rbln-artifactd.service"] or
                       words[0] == "adduser")
            check(allowed and not STARTS.search(call),
                  f"{script} {argument} ran '{call}'")


def main():
    cpack = os.environ.get("RBLN_CPACK") or shutil.which("cpack")
    missing = [tool for tool, path in (
        ("cpack", cpack), ("dpkg-deb", shutil.which("dpkg-deb")),
        ("dpkg-shlibdeps", shutil.which("dpkg-shlibdeps")),
        ("objdump", shutil.which("objdump")),
        ("file", shutil.which("file"))) if not path or not os.path.exists(path)]
    if missing:
        print(f"SKIP: {', '.join(missing)} not found; deploy/install-deps.sh "
              "installs them")
        return SKIP
    build_dir = os.environ["RBLN_BUILD_DIR"]
    work = tempfile.mkdtemp(prefix="rbln-package-")
    try:
        deb = build_package(cpack, build_dir, os.path.join(work, "out"))
        root = os.path.join(work, "root")
        unpacked = run(["dpkg-deb", "-x", deb, root])
        if unpacked.returncode != 0:
            sys.exit(f"dpkg-deb -x {deb}: {unpacked.stderr}")
        check_control(deb, os.environ["RBLN_EXPECTED_VERSION"], root)
        check_programs(root, os.environ["RBLN_BIN_DIR"])
        check_files(root, os.environ.get("RBLN_MAN_PAGES") == "ON")
        check_codec(root)
        check_maintainer_scripts(deb, work)
        check_plain_install(os.environ.get("RBLN_CMAKE") or "cmake",
                            build_dir, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        print(f"ok: {os.path.basename(deb)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
