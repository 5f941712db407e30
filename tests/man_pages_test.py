#!/usr/bin/python3
"""The man pages (cmake/Install.cmake, man/*.h2m), rendered as man(1) shows
them (`groff -man -Tutf8`) and read as a user would:
  * each renders without a warning, in 80 columns;
  * its sections are those of man-pages(7), each once and in that order;
  * every example of the program's --help is in EXAMPLES, one command alone
    on its lines (continued with a backslash), and no command starts in the
    middle of a line;
  * EXIT STATUS lists the exit codes of --help, each the tag of its own
    paragraph; ENVIRONMENT names each variable once, as a tag;
  * nothing --help prints after its options leaks into the page: none of
    its lead-ins ("Exit codes:", "Paths:") is there;
  * no page names a path of this repository (docs/..., deploy/...).
Exits 77 (skipped), saying why, when the build wrote no man pages (it had
no help2man) or groff is missing. Run by ctest with RBLN_MAN_DIR (the
pages), RBLN_BIN_DIR (the programs) and RBLN_MAN_PAGES (ON when the build
writes pages) set.
"""

import gzip
import os
import re
import shutil
import subprocess
import sys
import unittest

SKIP = 77
MAN_DIR = os.environ.get("RBLN_MAN_DIR", "build/man")
BIN_DIR = os.environ.get("RBLN_BIN_DIR", "build/bin")
WIDTH = 80
# The sections of a page, in their order (issue 43; put in this order by
# cmake/order_man_sections.pl).
SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES",
            "ENVIRONMENT", "FILES", "EXIT STATUS", "SEE ALSO")
# program -> (section of the manual, the page's sections).
PAGES = {
    "rbln-artifactd": ("8", SECTIONS),
    "rbln-artifact": ("1", SECTIONS),
    # It reads no environment variable.
    "rbln-artifact-synth": ("1", tuple(s for s in SECTIONS
                                       if s != "ENVIRONMENT")),
}
# Where a section's paragraphs start (their tags, in a list) in the
# rendered page, and where a heading starts.
BODY_INDENT = 7
HEADING = re.compile(r"^[A-Z][A-Z ]*[A-Z]$")
# A folder of the repository at the start of a path: "docs/daemon.md", but
# not "/usr/share/doc/rbln-artifactd/docs/daemon.md".
REPOSITORY_PATH = re.compile(
    r"(?<![\w/.~-])(bench|build|client|cmake|codecs|common|core|deploy|docs|"
    r"man|proto|server|tests|tools)/")


def run_help(program):
    """`program --help`, with the environment that changes its defaults
    cleared as cmake/Install.cmake clears it for help2man."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RBLN_ARTIFACTD_")}
    done = subprocess.run([os.path.join(BIN_DIR, program), "--help"],
                          capture_output=True, text=True, env=env,
                          check=False, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"{program} --help: exit {done.returncode}: "
                             f"{done.stderr}")
    return done.stdout


def help_footer(help_text):
    """What --help prints after its options: from its "Examples:" on."""
    at = help_text.find("\nExamples:\n")
    if at < 0:
        raise AssertionError("--help has no Examples: heading")
    return help_text[at + 1:]


def commands(lines, program):
    """The commands of `program` among `lines`: each from a line that starts
    with the program's name, joined with the lines its backslashes continue,
    its white space made single spaces."""
    found = []
    current = None
    for line in lines:
        text = line.strip()
        if current is not None:
            current += " " + text
        elif text.startswith(program + " "):
            current = text
        if current is not None and not current.endswith("\\"):
            found.append(" ".join(current.split()))
            current = None
        elif current is not None:
            current = current[:-1]
    return found


def help_examples(help_text, program):
    footer = help_footer(help_text).split("\n\n")[0]
    return commands(footer.splitlines()[1:], program)


def help_exit_codes(help_text):
    footer = help_footer(help_text)
    at = footer.find("\nExit codes:\n")
    if at < 0:
        raise AssertionError("--help has no Exit codes: heading")
    return re.findall(r"^  (\d+) ", footer[at:], re.M)


def render(roff):
    """The page as man(1) shows it, as plain text (no bold or underline),
    and groff's warnings."""
    done = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-P-cbou"],
                          input=roff, capture_output=True, text=True,
                          check=False, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"groff: exit {done.returncode}: {done.stderr}")
    return done.stdout, done.stderr


def sections(rendered):
    """[(heading, [lines])] of the rendered page, in order, without its
    header and footer lines."""
    found = []
    lines = rendered.strip().splitlines()
    for line in lines[1:-1]:
        if HEADING.match(line):
            found.append((line, []))
        elif found:
            found[-1][1].append(line)
    return found


def tags(lines):
    """The tags of a section's tagged paragraphs: the first word of each
    line that starts at the body's indent."""
    return [line.split()[0] for line in lines
            if len(line) > BODY_INDENT and
            line[:BODY_INDENT].isspace() and
            not line[BODY_INDENT].isspace()]


class ManPageTest(unittest.TestCase):
    def page(self, program):
        """The page's roff source, its rendering and its sections."""
        section = PAGES[program][0]
        path = os.path.join(MAN_DIR, f"{program}.{section}.gz")
        self.assertTrue(os.path.isfile(path),
                        f"no {path}: build the target rbln_man_pages")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            roff = f.read()
        rendered, warnings = render(roff)
        self.assertEqual(warnings, "", f"{program}({section}): groff warns")
        return roff, rendered, dict(sections(rendered))

    def test_renders_in_eighty_columns(self):
        for program in PAGES:
            _, rendered, _ = self.page(program)
            for line in rendered.splitlines():
                self.assertLessEqual(len(line), WIDTH,
                                     f"{program}: {line!r}")

    def test_sections_are_in_their_place(self):
        for program, (_, expected) in PAGES.items():
            _, rendered, _ = self.page(program)
            headings = [heading for heading, _ in sections(rendered)]
            self.assertEqual(tuple(headings), expected, program)

    def test_every_example_of_the_help_is_alone_on_its_lines(self):
        for program in PAGES:
            _, _, found = self.page(program)
            self.assertIn("EXAMPLES", list(found), program)
            examples = found["EXAMPLES"]
            in_page = commands(examples, program)
            in_help = help_examples(run_help(program), program)
            self.assertGreaterEqual(len(in_help), 2, program)
            for example in in_help:
                self.assertIn(example, in_page, f"{program}: EXAMPLES")
            # A command that starts in the middle of a line is two examples
            # run together, or an example glued to a paragraph.
            for line in examples:
                at = line.find(program + " -")
                self.assertIn(at, (-1, len(line) - len(line.lstrip())),
                              f"{program}: {line!r}")

    def test_exit_codes_and_variables_are_lists(self):
        for program in PAGES:
            _, _, found = self.page(program)
            self.assertIn("EXIT STATUS", list(found), program)
            self.assertEqual(tags(found["EXIT STATUS"]),
                             help_exit_codes(run_help(program)), program)
            if "ENVIRONMENT" in found:
                variables = tags(found["ENVIRONMENT"])
                self.assertGreaterEqual(len(variables), 3, program)
                self.assertEqual(len(variables), len(set(variables)),
                                 f"{program}: {variables}")
                for variable in variables:
                    self.assertRegex(variable, r"^[A-Z][A-Z_]+$", program)

    def test_nothing_after_the_help_options_leaks_in(self):
        for program in PAGES:
            _, rendered, _ = self.page(program)
            text = " ".join(rendered.split())
            # The first words of each paragraph, up to their colon.
            paragraphs = help_footer(run_help(program)).split("\n\n")
            lead_ins = [paragraph[:paragraph.index(":") + 1]
                        for paragraph in paragraphs if ":" in paragraph]
            self.assertIn("Exit codes:", lead_ins, program)
            for lead_in in lead_ins:
                self.assertFalse(" ".join(lead_in.split()) in text,
                                 f"{program}: --help's {lead_in!r} is in "
                                 "the page")

    def test_no_repository_paths(self):
        for program in PAGES:
            roff, _, _ = self.page(program)
            named = REPOSITORY_PATH.findall(roff.replace("\\-", "-"))
            self.assertEqual(named, [], program)

    def test_the_checks_see_what_they_should(self):
        # The checker itself, on a rendered page of two examples run
        # together (the fault this test is for) and on its own help.
        glued = ["       prog --a x prog --b y", "       prog --c \\",
                 "           --d"]
        self.assertEqual(commands(glued, "prog"),
                         ["prog --a x prog --b y", "prog --c --d"])
        self.assertEqual(
            tags(["       0      success.", "              more",
                  "       64     usage"]), ["0", "64"])
        self.assertEqual(
            REPOSITORY_PATH.findall("see docs/cli.md and deploy/x, not "
                                    "/usr/share/doc/p/docs/cli.md"),
            ["docs", "deploy"])
        self.assertEqual(
            help_examples("Usage: prog\n\nExamples:\n  prog --a \\\n"
                          "      --b\n  prog --c\n\nExit codes:\n"
                          "  0  ok\n  2  usage\n", "prog"),
            ["prog --a --b", "prog --c"])


if __name__ == "__main__":
    if os.environ.get("RBLN_MAN_PAGES") == "OFF":
        print("skipped: the build wrote no man pages (no help2man; "
              "deploy/install-deps.sh installs it)")
        sys.exit(SKIP)
    if shutil.which("groff") is None:
        print("skipped: no groff to render the man pages (Debian's "
              "groff-base; deploy/install-deps.sh installs it)")
        sys.exit(SKIP)
    unittest.main()
