#!/usr/bin/env python3
"""The GPU check's test programs: each cut into gtest shards that run at once, then every test that
failed, crashed its shard or never ran because of it run again alone, so that one call to a GPU
machine tells a faulting test from the tests its fault poisoned.

    gtests.py WORK PROGRAM...

A kernel that faults (an illegal address, a misaligned access) leaves CUDA's context with a sticky
error: every later test in that process fails, or the process aborts and the shard's later tests
never run. So after the shards:
  - each failed, crashed or unrun test runs in a process of its own (ISOLATE_MAX of them, default 40,
    ISOLATE_JOBS at once, default 8, each stopped after ISOLATE_TIMEOUT s, default 90): passing
    alone marks it poisoned by another test, not failing by itself;
  - a test that fails alone with a CUDA fault runs once more under NVIDIA's compute-sanitizer
    (memcheck; SANITIZER=path, else found on PATH or under /usr/local/cuda; SANITIZE_MAX tests,
    default 3, SANITIZER_TIMEOUT s each, default 180) with LOCKSTEP_CUDA_EXACT_SIZES=1 (the
    allocator's size classes would hide an overrun), which names the kernel, the access and, with
    the build's line information, the source line; without the tool, with CUDA_LAUNCH_BLOCKING=1,
    so the error surfaces at the launch that faulted.
A shard that prints nothing for TEST_STALL s (default 150; the longest GPU test took 66 s on an
H200) is stopped as hung, as is one past TEST_TIMEOUT s (default 360); its running test is named and
not run again. TESTS_PER_SHARD (15) tests make a shard, at most 4 a program. At DEADLINE s from the
start (default none) shards still running are stopped and no rerun starts, so that the results are
written before a caller's time limit.

Writes, under WORK: logs/NAME.shardK.{log,rc} and xml/NAME.shardK.xml (check.py sums them), and
isolated/: one log per rerun and results.tsv (program, test, what happened in its shard, alone,
the first failure line alone, what the sanitizer or the blocking rerun said), which check.py's
summary prints.
"""
import os
import re
import signal
import subprocess
import sys
import time

from check import readText as read  # beside it in scripts/gpu_check and in the bundle's check/

START = time.monotonic()
CUDA_FAULT = re.compile(
    r"illegal memory access|misaligned address|illegal instruction|unspecified launch failure|"
    r"CUDA_EXCEPTION|EXECUTION_FAILED|an illegal|out of bounds|hardware stack error|device-side assert")
STATUS = re.compile(r"^\[ +(RUN|OK|FAILED|SKIPPED) +\] (\S+?)(?:,| \(|$)")


def env_number(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        sys.exit(f"gtests.py: {name}={os.environ[name]!r} is not a number of seconds or tests")


def listed_tests(program):
    """The program's tests in their run order, as Suite.name (parameterised: Prefix/Suite.name/Param)."""
    try:
        out = subprocess.run([program, "--gtest_list_tests"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    tests, suite = [], None
    for line in out.splitlines():
        if not line.strip() or line.startswith(("Running main", "Note:")):
            continue
        name = line.split("#", 1)[0].rstrip()
        if not line.startswith(" "):
            suite = name
        elif suite:
            tests.append(suite + name.strip())
    return tests


class Run:
    """A program started in a session of its own, its output to a log, stopped at its limits."""

    def __init__(self, argv, log, cwd, env=None, timeout=None, stall=None):
        self.log, self.timeout, self.stall = log, timeout, stall
        self.started = self.last_output = time.monotonic()
        self.size = 0
        self.killed = ""  # "timeout" or "hung" when stopped
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=cwd,
                                         env=env, start_new_session=True)

    def poll(self):
        """The exit status once it ended (128 + signal for a signal; 124 stopped), else None."""
        rc = self.proc.poll()
        if rc is not None:
            return 128 - rc if rc < 0 else rc
        now = time.monotonic()
        size = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        if size != self.size:
            self.size, self.last_output = size, now
        if self.timeout and now - self.started > self.timeout:
            self.stop("timeout")
        elif self.stall and now - self.last_output > self.stall:
            self.stop("hung")
        return None

    def stop(self, why):
        self.killed = why
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=5)
                return
            except subprocess.TimeoutExpired:
                pass


def wait_all(runs, on_end, deadline=0):
    """Polls runs (a list of (key, Run)) until each ends, stopping those left at deadline (seconds
    from the start; 0: none); on_end(key, run, rc) for each."""
    pending = list(runs)
    while pending:
        for item in list(pending):
            if deadline and time.monotonic() - START > deadline and item[1].proc.poll() is None:
                item[1].stop("deadline")
            rc = item[1].poll()
            if rc is not None:
                pending.remove(item)
                on_end(item[0], item[1], 124 if item[1].killed else rc)
        if pending:
            time.sleep(0.2)


def outcomes(log_text):
    """Per test seen in a gtest log: ok, failed, skipped, or started (RUN with no end)."""
    seen = {}
    for line in log_text.splitlines():
        m = STATUS.match(line)
        if not m:
            continue
        kind, name = m.groups()
        if kind == "RUN":
            seen[name] = "started"
        elif name in seen and seen[name] == "started":
            seen[name] = {"OK": "ok", "FAILED": "failed", "SKIPPED": "skipped"}[kind]
    return seen


def first_failure(text):
    """The first line that says what failed (a gtest failure's message, an error, a signal)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r": Failure$", line):
            rest = [l.strip() for l in lines[i + 1:i + 4] if l.strip() and not l.startswith("[")]
            return " ".join(rest)[:300] or line[:300]
    for line in lines:
        if re.search(r"error|Error|terminate|Aborted|Segmentation|exception", line) and not line.startswith("["):
            return line.strip()[:300]
    return ""


def sanitizer_tool():
    named = os.environ.get("SANITIZER")
    if named:
        return None if named == "none" else named
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/local/cuda/bin",
                                                             "/usr/local/cuda/compute-sanitizer"]:
        p = os.path.join(d, "compute-sanitizer")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def sanitizer_report(text):
    """The sanitizer's first finding: its first error line and the kernel/location lines after it."""
    lines = [l[len("========="):].strip() for l in text.splitlines() if l.startswith("=========")]
    lines = [l for l in lines if l]
    for i, line in enumerate(lines):
        if re.match(r"(Invalid|Misaligned|Out of bounds|Program hit|Race|Uninitialized|Error|Malloc|"
                    r"Leaked|Barrier|Illegal)", line):
            return " / ".join(lines[i:i + 4])[:400]
    summary = [l for l in lines if l.startswith("ERROR SUMMARY")]
    return (summary[-1] if summary else "no report (the run ended before it: see the log)")[:400]


def safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:150]


def main():
    work, programs = os.path.abspath(sys.argv[1]), [os.path.abspath(p) for p in sys.argv[2:]]
    for d in ("logs", "xml", "isolated"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    per_shard = max(1, int(env_number("TESTS_PER_SHARD", 15)))
    timeout, stall = env_number("TEST_TIMEOUT", 360), env_number("TEST_STALL", 150)
    deadline = env_number("DEADLINE", 0)

    # 1. The shards, all at once.
    listed, runs = {}, []
    for program in programs:
        if not os.access(program, os.X_OK):
            continue
        name = os.path.basename(program)
        listed[name] = (program, listed_tests(program))
        shards = min(4, max(1, -(-len(listed[name][1]) // per_shard)))
        for k in range(shards):
            env = dict(os.environ, GTEST_TOTAL_SHARDS=str(shards), GTEST_SHARD_INDEX=str(k))
            stem = f"{name}.shard{k}"
            argv = [program, f"--gtest_output=xml:{os.path.join(work, 'xml', stem + '.xml')}"]
            runs.append(((name, stem), Run(argv, os.path.join(work, "logs", stem + ".log"), work, env,
                                           timeout, stall)))
    shard_ends = {}

    def shard_ended(key, run, rc):
        name, stem = key
        with open(os.path.join(work, "logs", stem + ".rc"), "w") as f:
            f.write(f"{rc}\n")
        if run.killed:
            why = {"hung": f"no output for {stall:.0f} s", "timeout": f"past TEST_TIMEOUT={timeout:.0f} s",
                   "deadline": f"at DEADLINE={deadline:.0f} s from the start"}[run.killed]
            with open(run.log, "a") as f:
                f.write(f"\n[gtests.py] shard stopped: {why}\n")
        shard_ends.setdefault(name, []).append((stem, rc, run.killed))

    wait_all(runs, shard_ended, deadline)

    # 2. What each program's tests did in their shards; the ones to run again alone.
    rows, again = [], []
    for name, (program, tests) in listed.items():
        ends = shard_ends.get(name, [])
        if all(rc == 0 for _, rc, _ in ends):
            continue
        seen = {}
        for stem, rc, killed in ends:
            for test, what in outcomes(read(os.path.join(work, "logs", stem + ".log"))).items():
                if what == "started":
                    what = {"hung": "hung", "timeout": "stopped at the time limit",
                            "deadline": "stopped at the deadline"}.get(killed, f"crashed its shard (exit {rc})")
                seen[test] = what
        for test in tests:
            what = seen.get(test, "not run (its shard ended before it)")
            if what in ("ok", "skipped"):
                continue
            if what.startswith(("hung", "stopped")):
                rows.append([name, test, what, "not run again", "", ""])
            else:
                again.append((name, program, test, what))
    isolate_max = int(env_number("ISOLATE_MAX", 40))
    for name, _, test, what in again[isolate_max:]:
        rows.append([name, test, what, f"not run again (past ISOLATE_MAX={isolate_max})", "", ""])
    again = again[:isolate_max]

    # 3. Each alone, a few at a time, until the deadline.
    jobs = max(1, int(env_number("ISOLATE_JOBS", 8)))
    alone_timeout = env_number("ISOLATE_TIMEOUT", 90)
    results = {}

    def run_batch(items, make_argv, env_extra, limit, suffix):
        queue, running = list(items), []
        while queue or running:
            while queue and len(running) < jobs and not (deadline and time.monotonic() - START > deadline):
                item = queue.pop(0)
                name, program, test = item[0], item[1], item[2]
                stem = f"{name}.{safe(test)}{suffix}"
                gfilter = test.replace("-", "?")  # gtest's filter reads '-' as its negative part
                xml = os.path.join(work, "isolated", stem + ".xml")
                argv = make_argv(program) + [f"--gtest_filter={gfilter}", f"--gtest_output=xml:{xml}"]
                env = dict(os.environ, **env_extra)
                env.pop("GTEST_TOTAL_SHARDS", None)
                env.pop("GTEST_SHARD_INDEX", None)
                running.append((item, Run(argv, os.path.join(work, "isolated", stem + ".log"), work, env, limit)))
            if not running:  # past the deadline: the rest is not started
                for item in queue:
                    results[(item[0], item[2], suffix)] = (None, "not run again (past the deadline)")
                break
            for entry in list(running):
                if deadline and time.monotonic() - START > deadline + 15 and entry[1].proc.poll() is None:
                    entry[1].stop("deadline")  # the caller's limit is near: what ran so far is written
                rc = entry[1].poll()
                if rc is not None:
                    running.remove(entry)
                    item, run = entry
                    text = read(run.log)
                    if run.killed:
                        rc = 124
                        text += f"\n[gtests.py] stopped: {'the deadline' if run.killed == 'deadline' else 'its time limit'}\n"
                    results[(item[0], item[2], suffix)] = (rc, text)
            time.sleep(0.2)

    run_batch(again, lambda p: [p], {}, alone_timeout, "")
    faulting = []
    for name, program, test, what in again:
        rc, text = results.get((name, test, ""), (None, "not run again"))
        if rc is None:
            rows.append([name, test, what, text, "", ""])
            continue
        ran = outcomes(text).get(test)
        if rc == 0 and ran == "ok":
            alone = "PASS"
        elif rc == 0 and ran == "skipped":
            alone = "skipped"
        elif rc == 124:
            alone = ("stopped at the deadline" if text.endswith("stopped: the deadline\n") else
                     f"stopped after {alone_timeout:.0f} s")
        elif ran == "failed":
            alone = "FAIL"
        else:
            alone = f"FAIL (exit {rc})"
        row = [name, test, what, alone, first_failure(text), ""]
        rows.append(row)
        if alone.startswith("FAIL") and CUDA_FAULT.search(text):
            faulting.append((name, program, test, row))

    # 4. The faulting ones under compute-sanitizer (or with blocking launches).
    sanitize_max = int(env_number("SANITIZE_MAX", 3))
    tool = sanitizer_tool()
    picked = faulting[:sanitize_max]
    if tool:
        argv = lambda p: [tool, "--tool", "memcheck", "--print-limit", "10", "--error-exitcode", "99", p]
        run_batch(picked, argv, {"LOCKSTEP_CUDA_EXACT_SIZES": "1"}, env_number("SANITIZER_TIMEOUT", 180),
                  ".sanitizer")
        for name, _, test, row in picked:
            rc, text = results.get((name, test, ".sanitizer"), (None, "not run (past the deadline)"))
            row[5] = "compute-sanitizer: " + (text if rc is None else sanitizer_report(text))
    else:
        run_batch(picked, lambda p: [p], {"CUDA_LAUNCH_BLOCKING": "1"}, alone_timeout, ".blocking")
        for name, _, test, row in picked:
            rc, text = results.get((name, test, ".blocking"), (None, "not run (past the deadline)"))
            row[5] = ("no compute-sanitizer here; with CUDA_LAUNCH_BLOCKING=1: " +
                      (text if rc is None else first_failure(text) or f"exit {rc}"))
    with open(os.path.join(work, "isolated", "results.tsv"), "w") as f:
        for row in rows:
            f.write("\t".join(c.replace("\t", " ").replace("\n", " ") for c in row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
