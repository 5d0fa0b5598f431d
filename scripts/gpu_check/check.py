#!/usr/bin/env python3
"""The CPU-vs-GPU training comparisons of the GPU check (run.sh): which `lockstep train` runs to make,
and what to compare once they are made.

    check.py plan CHECK_DIR WORK        writes WORK/jobs/RUN.sh for each run and prints their paths
    check.py summarize CHECK_DIR WORK   prints the summary's markdown; exits 1 when a check failed
ONLY=REGEX keeps the runs (and checks) whose names match, e.g. ONLY='seed_cnn|gpt_mini'.

Each model config (configs/*.yaml) trains on the CPU and on the GPU in fp32, bf16 and fp16. The checks:
- cpu-vs-gpu: the GPU's final model against the CPU's, as the relative difference max |a - b| / max |b|
  (tests/train/train_cli.h's). f32, with TF32 off: <= 1e-5, or twice what the CPU's own kernels for
  two ISAs (the host's best and AVX2: ONEDNN_MAX_CPU_ISA=AVX2, other blockings and summation orders)
  end apart on the same job, where that is more: Adam turns summation-order differences in
  near-zero gradients into whole steps, so an Adam job's two CPU runs already differ by ~1e-4. bf16/fp16: twice the larger of how far the dtype moves the CPU's run from its f32 run
  and how far the CPU's native and emulated kernels (LOCKSTEP_LOW_PRECISION=emulated) end apart, and
  never less than a few roundings of the dtype (FLOOR).
- repeatable: the GPU run made twice gives the same bytes.
- graph: the run with cuda_graph: true gives the bytes of the eager (cuda_graph: false) run.
- ddp: 2 ranks sharing the one GPU against 2 ranks on the CPU (f32 bound), with the plain and the
  bf16-compressing comm hook.
- zero: ZeRO stages 1, 2 and 3, ZeRO-Offload (stage 2, the optimizer on the host), ZeRO-3 Offload
  (the optimizer and the parameters' partition on the host) and ZeRO-Infinity (on NVMe) with 2 ranks
  sharing the GPU against DDP there (f32 bound), and stage 2 stopped at a checkpoint and resumed
  against its uninterrupted run (bitwise).
- resume: a GPU run stopped at a checkpoint and resumed, and one whose rank died mid-run (restarted
  by the agent from the last checkpoint), give the bytes of the uninterrupted run.
- errors: a GPU out of memory and a device ordinal past the GPUs end the run with a message naming
  the device (exit 1 and 2), not a crash or a hang.
"""
import os
import re
import subprocess
import sys

MODELS = ["seed_cnn", "seed_cnn_features", "resnet18", "gpt_mini", "llama_tiny"]
PRECISIONS = {"fp32": [], "bf16": ["bf16.enabled=true"], "fp16": ["fp16.enabled=true"]}
# Exact f32 math on the GPU for the f32 comparisons (cuDNN's default TF32 is PyTorch's default too).
F32_EXACT = ["backends.cudnn.allow_tf32=false", "backends.cuda.matmul.allow_tf32=false"]
F32_BOUND = 1e-5
FLOOR = {"bf16": 2e-2, "fp16": 5e-3}
LANGUAGE = {"gpt_mini", "llama_tiny"}
# seed_cnn_features: AdamW, accumulation, clipping and a schedule (configs/seed_cnn_features.yaml)


def notReplayable(model, precision):
    """Why this job's step is not captured (parallel::stepGraphBlocker), or ""."""
    if precision == "fp16":
        return "fp16's loss scaler decides on the host whether a step is skipped"
    if model == "seed_cnn_features":
        return "gradient accumulation"
    return ""


def runs(check_dir, work):
    """name -> (env, lockstep train arguments)."""
    corpus = os.path.join(work, "corpus.txt")
    out = {}

    def add(name, model, device, sets, env="", nproc=1, extra=""):
        cfg = os.path.join(check_dir, "configs", model + ".yaml")
        args = [cfg, "--output-dir", os.path.join(work, "runs", name), "--set", "device=" + device]
        if model in LANGUAGE:
            args += ["--set", "data.root=" + corpus]
        for s in sets:
            args += ["--set", s]
        if nproc > 1:
            args += ["--nproc-per-node", str(nproc)]
        out[name] = (env, args, extra)

    for m in MODELS:
        for p, psets in PRECISIONS.items():
            exact = F32_EXACT if p == "fp32" else []
            add(f"{m}.{p}.cpu", m, "cpu", psets, env="LOCKSTEP_NUM_THREADS=2")
            if p == "fp32":
                # the CPU's kernels for another ISA (other blockings, other summation orders): the
                # f32 bound. The lent GPU machines' hosts have AVX-512 (AMX), so AVX2 is another set.
                add(f"{m}.{p}.cpu_avx2", m, "cpu", psets, env="LOCKSTEP_NUM_THREADS=2 ONEDNN_MAX_CPU_ISA=AVX2")
            if p != "fp32":
                add(f"{m}.{p}.cpu_emulated", m, "cpu", psets,
                    env="LOCKSTEP_NUM_THREADS=2 LOCKSTEP_LOW_PRECISION=emulated")
            for run in ("gpu", "gpu_again"):
                add(f"{m}.{p}.{run}", m, "cuda", psets + exact + ["cuda_graph=false"])
            if not notReplayable(m, p):
                add(f"{m}.{p}.graph", m, "cuda", psets + exact + ["cuda_graph=true"])
    # DDP: the gradient buckets reduced in full and through the bf16 compression hook
    for hook in ("allreduce", "bf16_compress"):
        sets = ["ddp.comm_hook=" + hook]
        add(f"seed_cnn.fp32.cpu.world2.{hook}", "seed_cnn", "cpu", sets, env="LOCKSTEP_NUM_THREADS=2", nproc=2)
        add(f"seed_cnn.fp32.gpu.world2.{hook}", "seed_cnn", "cuda", sets + F32_EXACT + ["cuda_graph=false"],
            nproc=2)
    # ZeRO stages 1 and 2 on the GPU (2 ranks sharing it): the partition in GPU memory, against DDP
    # there; stage 2 also stopped at a checkpoint and resumed.
    for stage in (1, 2, 3):
        add(f"seed_cnn.fp32.gpu.world2.zero{stage}", "seed_cnn", "cuda",
            [f"zero_optimization.stage={stage}"] + F32_EXACT + ["cuda_graph=false"], nproc=2)
    # ZeRO-Offload: stage 2 with the optimizer on the host (pinned copies).
    add("seed_cnn.fp32.gpu.world2.zero2.offload", "seed_cnn", "cuda",
        ["zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
         "zero_optimization.offload_optimizer.pin_memory=true"] + F32_EXACT + ["cuda_graph=false"], nproc=2)
    # ZeRO-3 Offload: stage 3 with the optimizer and the parameters' partition on the host.
    zero3_offload = ["zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_optimizer.pin_memory=true",
                     "zero_optimization.offload_param.device=cpu", "zero_optimization.offload_param.pin_memory=true",
                     "zero_optimization.stage3_param_persistence_threshold=0"] + F32_EXACT + ["cuda_graph=false"]
    add("seed_cnn.fp32.gpu.world2.zero3.offload", "seed_cnn", "cuda", zero3_offload, nproc=2)
    add("seed_cnn.fp32.gpu.world2.zero3.offload.resumed", "seed_cnn", "cuda",
        zero3_offload + ["checkpoint.every_steps=4", "max_steps=8"], nproc=2, extra="resume")
    add("seed_cnn.fp32.gpu.world2.zero3.offload.straight", "seed_cnn", "cuda",
        zero3_offload + ["checkpoint.every_steps=4"], nproc=2)
    # Seed 002's zero_optimization section (stage 3, parameters and optimizer offloaded to pinned
    # host memory) with fp16 on gpt-mini, one rank: against the plain fp16 GPU run. Hysteresis 1:
    # DeepSpeed's ZeRO scaler then divides at every overflow as its FP16_Optimizer (no ZeRO) does.
    add("gpt_mini.fp16.gpu.zero3_offload", "gpt_mini", "cuda",
        PRECISIONS["fp16"] + ["fp16.hysteresis=1", "zero_optimization.stage=3",
                              "zero_optimization.offload_param.device=cpu",
                              "zero_optimization.offload_param.pin_memory=true",
                              "zero_optimization.offload_optimizer.device=cpu",
                              "zero_optimization.offload_optimizer.pin_memory=true",
                              "zero_optimization.contiguous_gradients=true", "zero_optimization.overlap_comm=true",
                              "zero_optimization.stage3_param_persistence_threshold=0", "cuda_graph=false"])
    # bf16 with ZeRO stage 2 (2 ranks sharing the GPU): bf16 parameters and gradients, f32 master
    # weights in the partition; against DDP's bf16 autocast there, and stopped and resumed.
    bf16_zero = PRECISIONS["bf16"] + ["zero_optimization.stage=2", "cuda_graph=false"]
    add("seed_cnn.bf16.gpu.world2.ddp", "seed_cnn", "cuda", PRECISIONS["bf16"] + ["cuda_graph=false"], nproc=2)
    add("seed_cnn.bf16.gpu.world2.zero2", "seed_cnn", "cuda", bf16_zero, nproc=2)
    add("seed_cnn.bf16.gpu.world2.zero2.resumed", "seed_cnn", "cuda",
        bf16_zero + ["checkpoint.every_steps=4", "max_steps=8"], nproc=2, extra="resume")
    add("seed_cnn.bf16.gpu.world2.zero2.straight", "seed_cnn", "cuda", bf16_zero + ["checkpoint.every_steps=4"],
        nproc=2)
    # ... and with a rank dying after step 6 as kill -9 leaves it, the job restarted from step 4.
    add("seed_cnn.bf16.gpu.world2.zero2.crashed", "seed_cnn", "cuda", bf16_zero + ["checkpoint.every_steps=4"],
        env="LOCKSTEP_TRAIN_CRASH_AFTER_STEP=6", nproc=2, extra="restart")
    # World 4 (four ranks sharing the GPU): ZeRO stage 3 against DDP there.
    for kind, sets in (("ddp", []), ("zero3", ["zero_optimization.stage=3"])):
        add(f"seed_cnn.fp32.gpu.world4.{kind}", "seed_cnn", "cuda", sets + F32_EXACT + ["cuda_graph=false"], nproc=4)
    # ZeRO-Infinity: stage 3 with the parameters' and the optimizer's partitions on NVMe (/tmp here).
    add("seed_cnn.fp32.gpu.world2.zero3.infinity", "seed_cnn", "cuda",
        ["zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
         "zero_optimization.offload_optimizer.nvme_path=/tmp", "zero_optimization.offload_param.device=nvme",
         "zero_optimization.offload_param.nvme_path=/tmp", "zero_optimization.stage3_param_persistence_threshold=0"]
        + F32_EXACT + ["cuda_graph=false"], nproc=2)
    zero_resume = ["zero_optimization.stage=2", "cuda_graph=false", "checkpoint.every_steps=4"] + F32_EXACT
    add("seed_cnn.fp32.gpu.world2.zero2.resumed", "seed_cnn", "cuda", zero_resume + ["max_steps=8"], nproc=2,
        extra="resume")
    add("seed_cnn.fp32.gpu.world2.zero2.straight", "seed_cnn", "cuda", zero_resume, nproc=2)
    # Stopped after a checkpoint at step 8, then resumed to the end (16 steps).
    resume = ["cuda_graph=false", "checkpoint.every_steps=4"] + F32_EXACT
    add("seed_cnn.fp32.gpu.resumed", "seed_cnn", "cuda", resume + ["max_steps=8"], extra="resume")
    add("seed_cnn.fp32.gpu.straight", "seed_cnn", "cuda", resume)
    # A rank that dies without cleaning up after step 6 (as kill -9 leaves it), restarted by the
    # agent from the checkpoint of step 4.
    add("seed_cnn.fp32.gpu.crashed", "seed_cnn", "cuda", resume, env="LOCKSTEP_TRAIN_CRASH_AFTER_STEP=6",
        extra="restart")
    # Bad input: a GPU out of memory (ResNet-18 at batch 2,048 needs ~10 GB; another process holds
    # all but 4 GiB of the GPU meanwhile), an ordinal past the machine's GPUs.
    add("bad.oom", "resnet18", "cuda", ["data.size=2048", "train_micro_batch_size_per_gpu=2048", "max_steps=1"],
        extra="oom")
    add("bad.ordinal", "seed_cnn", "cuda:7", [])
    return out


def selected(name):
    """Whether ONLY (a regular expression on run names, e.g. 'seed_cnn|resnet18') keeps this run."""
    only = os.environ.get("ONLY", "")
    return not only or re.search(only, name) is not None


def checks():
    """(check name, kind, run a, run b, precision, reference runs' prefix), those ONLY keeps."""
    out = []
    for m in MODELS:
        for p in PRECISIONS:
            out.append((f"{m} {p} cpu-vs-gpu", "close", f"{m}.{p}.gpu", f"{m}.{p}.cpu", p, f"{m}.{p}"))
            out.append((f"{m} {p} repeatable", "bitwise", f"{m}.{p}.gpu_again", f"{m}.{p}.gpu", p, ""))
            if not notReplayable(m, p):
                out.append((f"{m} {p} graph = eager", "bitwise", f"{m}.{p}.graph", f"{m}.{p}.gpu", p, ""))
    # the CPU's ISA variance of the 1-rank job; with the compressing hook also how far bf16 gradients
    # move the CPU's 2-rank run
    out.append(("seed_cnn fp32 ddp world 2 (allreduce) cpu-vs-gpu", "close", "seed_cnn.fp32.gpu.world2.allreduce",
                "seed_cnn.fp32.cpu.world2.allreduce", "fp32", "seed_cnn.fp32"))
    out.append(("seed_cnn fp32 ddp world 2 (bf16_compress) cpu-vs-gpu", "close",
                "seed_cnn.fp32.gpu.world2.bf16_compress", "seed_cnn.fp32.cpu.world2.bf16_compress", "fp32",
                "seed_cnn.fp32", ("seed_cnn.fp32.cpu.world2.bf16_compress", "seed_cnn.fp32.cpu.world2.allreduce")))
    for stage in (1, 2, 3):
        out.append((f"seed_cnn fp32 ZeRO stage {stage} world 2 gpu = ddp gpu", "close",
                    f"seed_cnn.fp32.gpu.world2.zero{stage}", "seed_cnn.fp32.gpu.world2.allreduce", "fp32",
                    "seed_cnn.fp32"))
    out.append(("seed_cnn fp32 ZeRO-Offload (stage 2, optimizer on the host) world 2 gpu = ddp gpu", "close",
                "seed_cnn.fp32.gpu.world2.zero2.offload", "seed_cnn.fp32.gpu.world2.allreduce", "fp32",
                "seed_cnn.fp32"))
    out.append(("seed_cnn fp32 ZeRO-3 Offload (optimizer and parameters on the host) world 2 gpu = ddp gpu",
                "close", "seed_cnn.fp32.gpu.world2.zero3.offload", "seed_cnn.fp32.gpu.world2.allreduce", "fp32",
                "seed_cnn.fp32"))
    out.append(("gpt_mini fp16 ZeRO-3 Offload (seed 002's section) gpu = gpu", "close",
                "gpt_mini.fp16.gpu.zero3_offload", "gpt_mini.fp16.gpu", "fp16", "gpt_mini.fp16"))
    out.append(("seed_cnn bf16 ZeRO stage 2 (f32 master weights) world 2 gpu = ddp gpu", "close",
                "seed_cnn.bf16.gpu.world2.zero2", "seed_cnn.bf16.gpu.world2.ddp", "bf16", "seed_cnn.bf16"))
    out.append(("seed_cnn bf16 ZeRO stage 2 world 2 crashed and restarted = straight", "bitwise",
                "seed_cnn.bf16.gpu.world2.zero2.crashed", "seed_cnn.bf16.gpu.world2.zero2.straight", "bf16", ""))
    out.append(("seed_cnn fp32 ZeRO stage 3 world 4 gpu = ddp gpu", "close", "seed_cnn.fp32.gpu.world4.zero3",
                "seed_cnn.fp32.gpu.world4.ddp", "fp32", "seed_cnn.fp32"))
    out.append(("seed_cnn bf16 ZeRO stage 2 world 2 resume = straight", "bitwise",
                "seed_cnn.bf16.gpu.world2.zero2.resumed", "seed_cnn.bf16.gpu.world2.zero2.straight", "bf16", ""))
    out.append(("seed_cnn fp32 ZeRO-Infinity (partitions on NVMe) world 2 gpu = ddp gpu", "close",
                "seed_cnn.fp32.gpu.world2.zero3.infinity", "seed_cnn.fp32.gpu.world2.allreduce", "fp32",
                "seed_cnn.fp32"))
    out.append(("seed_cnn fp32 ZeRO-3 Offload world 2 resume = straight", "bitwise",
                "seed_cnn.fp32.gpu.world2.zero3.offload.resumed", "seed_cnn.fp32.gpu.world2.zero3.offload.straight",
                "fp32", ""))
    out.append(("seed_cnn fp32 ZeRO stage 2 world 2 resume = straight", "bitwise",
                "seed_cnn.fp32.gpu.world2.zero2.resumed", "seed_cnn.fp32.gpu.world2.zero2.straight", "fp32", ""))
    out.append(("seed_cnn fp32 resume = straight", "bitwise", "seed_cnn.fp32.gpu.resumed",
                "seed_cnn.fp32.gpu.straight", "fp32", ""))
    out.append(("seed_cnn fp32 crashed and restarted = straight", "bitwise", "seed_cnn.fp32.gpu.crashed",
                "seed_cnn.fp32.gpu.straight", "fp32", ""))
    # (name, "error", run, expected exit codes, what its output must say, "")
    out.append(("a GPU out of memory is a clear error", "error", "bad.oom", {"1"},
                r"out of memory.*cuda:0|cuda:0.*out of memory", ""))
    out.append(("a device past the GPUs is a config error", "error", "bad.ordinal", {"2"}, r"cuda:7", ""))
    return [c for c in out if selected(c[2]) and (c[1] == "error" or selected(c[3]))]


def plan(check_dir, work):
    os.makedirs(os.path.join(work, "runs"), exist_ok=True)
    with open(os.path.join(work, "corpus.txt"), "w") as f:
        words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "a", "cat", "sat",
                 "on", "mat", "while", "rain", "fell", "softly", "in", "town"]
        x = 12345
        for line in range(600):
            n = 6 + line % 9
            ws = []
            for _ in range(n):
                x = (1103515245 * x + 12345) % (1 << 31)
                ws.append(words[x % len(words)])
            f.write(" ".join(ws) + ".\n")
    planned = {n: r for n, r in runs(check_dir, work).items() if selected(n)}
    # the longest first: ResNet-18 on the CPU, then every GPU run (each loads CUDA and cuDNN), then the rest
    order = sorted(planned, key=lambda n: (0 if n.startswith("resnet18") and ".cpu" in n else
                                           1 if "device=cuda" in planned[n][1] else 2, n))
    for name in order:
        env, args, extra = planned[name]
        log = os.path.join(work, "runs", name + ".log")
        quoted = " ".join("'" + a + "'" for a in args)
        cmd = f'{env} timeout 180 "$LOCKSTEP_BIN_PATH" train {quoted}'
        if extra == "oom":
            flag = os.path.join(work, "runs", "hog.ready")
            cmd = (f"python3 -c 'import torch, time; f, _ = torch.cuda.mem_get_info(); "
                   f"x = torch.empty(f - 4 * 2**30, dtype=torch.uint8, device=\"cuda\"); "
                   f"open(\"{flag}\", \"w\").close(); time.sleep(600)' & hog=$!; "
                   f"for i in $(seq 600); do [ -e '{flag}' ] && break; sleep 0.1; done; {cmd}; "
                   f"rc=$?; kill $hog; exit $rc")
        if extra == "restart":
            cmd = cmd.replace(" train ", " train --max-restarts 1 ", 1)
        if extra == "resume":
            # the same job again, to its end, from the newest checkpoint
            full = quoted.replace(" '--set' 'max_steps=8'", "")
            cmd = f"{cmd} && {env} timeout 180 \"$LOCKSTEP_BIN_PATH\" train {full} --resume"
        job = os.path.join(work, "jobs", name + ".sh")
        os.makedirs(os.path.dirname(job), exist_ok=True)
        with open(job, "w") as f:
            f.write(f"( {cmd} ) > '{log}' 2>&1; echo $? > '{work}/runs/{name}.rc'\n")
        print(job)


def compare(check_dir, work, a, b):
    fa = os.path.join(work, "runs", a, "model.safetensors")
    fb = os.path.join(work, "runs", b, "model.safetensors")
    for name, f in ((a, fa), (b, fb)):
        rc = readText(os.path.join(work, "runs", name + ".rc")).strip()
        if rc != "0" or not os.path.exists(f):
            tail = lastError(os.path.join(work, "runs", name + ".log"))
            return None, f"run {name} failed (exit {rc or '?'}): {tail}"
    r = subprocess.run([sys.executable, os.path.join(check_dir, "compare.py"), fa, fb], capture_output=True,
                       text=True)
    fields = dict(re.findall(r"(\w+)=(\S+)", r.stdout))
    if r.returncode != 0 or "rel" not in fields:
        return None, (r.stdout + r.stderr).strip()[-300:]
    return fields, ""


def readText(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def lastError(path):
    lines = [l for l in readText(path).splitlines() if l.strip()]
    errs = [l for l in lines if re.search(r"error|Error|cannot|refused|failed", l)]
    return ((errs or lines or ["no output"])[-1])[:300].replace("|", "/")


def testSummary(work):
    """Per GPU test program (its gtest shards summed): passed / failed / skipped and the failed tests' names."""
    rows = []
    ok = True
    xml_dir = os.path.join(work, "xml")
    logs = os.path.join(work, "logs")
    shards = {}  # program -> its shards' file stems (NAME.shardK, or NAME for an unsharded run)
    for f in sorted(os.listdir(logs) if os.path.isdir(logs) else []):
        if f.endswith(".rc"):
            stem = f[:-3]
            shards.setdefault(re.sub(r"\.shard\d+$", "", stem), []).append(stem)
    for name, stems in sorted(shards.items()):
        rcs, cases, failed, skipped, skips, errors = [], 0, [], 0, [], []
        for stem in stems:
            rc = readText(os.path.join(logs, stem + ".rc")).strip()
            xml = readText(os.path.join(xml_dir, stem + ".xml"))
            rcs.append(rc)
            cases += len(re.findall(r'<testcase name="([^"]+)"[^>]*classname="([^"]+)"[^>]*?(/>|>)', xml))
            failed += re.findall(r'<testcase name="([^"]+)"[^>]*classname="([^"]+)"[^>]*>\s*<failure', xml)
            skipped += len(re.findall(r'result="skipped"', xml))
            skips += re.findall(r'<skipped message="([^"]*)"', xml)
            if rc != "0":
                errors.append(f"exit {rc}: {lastError(os.path.join(logs, stem + '.log'))}")
        failed = sorted(set(failed))
        npass = cases - len(failed) - skipped
        # on a GPU machine a skipped GPU test is one that did not run: a failure of the check
        good = not errors and not failed and cases > 0 and skipped == 0
        ok = ok and good
        names = ", ".join(f"{c}.{n}" for n, c in failed)[:600]
        detail = names or ("" if good else (errors or ["no tests ran"])[0])
        if skipped and not names:
            detail = f"skipped: {(skips or ['?'])[0][:200]}"
        count = f"{npass} passed, {len(failed)} failed, {skipped} skipped"
        if len(stems) > 1:
            count += f" ({len(stems)} shards)"
        rows.append(f"| {name} | {'PASS' if good else 'FAIL'} | {count} | {detail} |")
    return rows, ok


def isolatedSummary(work):
    """gtests.py's reruns (isolated/results.tsv), a table row each."""
    rows = []
    for line in readText(os.path.join(work, "isolated", "results.tsv")).splitlines():
        cells = (line.split("\t") + [""] * 6)[:6]
        rows.append("| " + " | ".join(c.replace("|", "/")[:400] for c in cells) + " |")
    return rows


def hostIsa(work):
    """The oneDNN ISA of the CPU runs (run.json's environment), for the summary."""
    try:
        with open(os.path.join(work, "runs", "seed_cnn.fp32.cpu", "run.json")) as f:
            text = f.read()
        return re.search(r'"isa":\s*"([^"]+)"', text).group(1)
    except (OSError, AttributeError):
        return "host"


def summarize(check_dir, work):
    isa = hostIsa(work)
    print("## GPU test programs\n")
    print("| program | result | counts | failed |")
    print("|---|---|---|---|")
    rows, ok = testSummary(work)
    print("\n".join(rows))
    isolated = isolatedSummary(work)
    if isolated:
        print("\n### Failed, crashed or unrun tests, each run again alone (gtests.py)\n")
        print("| program | test | in its shard | alone | first failure alone | compute-sanitizer / blocking launches |")
        print("|---|---|---|---|---|---|")
        print("\n".join(isolated))
    print("\n## Training comparisons (`lockstep train`, final model.safetensors)\n")
    print("| check | result | measured | bound |")
    print("|---|---|---|---|")
    for name, kind, a, b, p, ref, *also in checks():
        if kind == "error":
            rc = readText(os.path.join(work, "runs", a + ".rc")).strip()
            log = readText(os.path.join(work, "runs", a + ".log"))
            said = re.search(p, log, re.S) is not None
            good = rc in b and said
            ok = ok and good
            line = lastError(os.path.join(work, "runs", a + ".log"))
            print(f"| {name} | {'PASS' if good else 'FAIL'} | exit {rc}: {line} | exit {'/'.join(sorted(b))}, "
                  f"says /{p}/ |")
            continue
        fields, why = compare(check_dir, work, a, b)
        if fields is None:
            ok = False
            print(f"| {name} | FAIL | {why} | |")
            continue
        rel = float(fields["rel"])
        if kind == "bitwise":
            good = fields["bitwise"] == "yes"
            measured, bound = f"bitwise {fields['bitwise']} (rel {rel:.2e})", "bitwise"
        elif p == "fp32":
            # 1e-5, or twice what the CPU's kernels for two ISAs end apart on this job
            other, why = compare(check_dir, work, ref + ".cpu", ref + ".cpu_avx2") if ref else (None, "")
            cpu_diff = float(other["rel"]) if other else 0.0
            limit = max(F32_BOUND, 2 * cpu_diff)
            bound = f"{limit:.1e}" + (f" (cpu {isa} vs avx2 kernels {cpu_diff:.1e}" if other else
                                      f" (no avx2 run{': ' + why if why else ''}")
            if also:  # a further effect on the CPU's run that the GPU's may show too
                extra, why = compare(check_dir, work, *also[0])
                extra_diff = float(extra["rel"]) if extra else 0.0
                limit = max(limit, 2 * extra_diff)
                bound = f"{limit:.1e}" + bound[bound.index(" ("):] + (
                    f", {also[0][0]} vs {also[0][1]} {extra_diff:.1e}" if extra else f", {why}")
            bound += ")"
            good, measured = rel <= limit, f"rel {rel:.2e}"
        else:
            # twice the larger of what the dtype moves the CPU's run (vs its f32 run) and what the
            # CPU's native and emulated kernels differ by, at least FLOOR: if the GPU's and the CPU's
            # runs are each that close to the f32 run, they are within twice it of each other
            emu, why = compare(check_dir, work, ref + ".cpu", ref + ".cpu_emulated")
            f32, why32 = compare(check_dir, work, ref + ".cpu", ref.split(".")[0] + ".fp32.cpu")
            emu_diff = float(emu["rel"]) if emu else 0.0
            f32_diff = float(f32["rel"]) if f32 else 0.0
            limit = max(2 * emu_diff, 2 * f32_diff, FLOOR[p])
            good = rel <= limit
            measured = f"rel {rel:.2e}"
            bound = f"{limit:.1e} (cpu {p} vs cpu fp32 {f32_diff:.1e}, cpu native vs emulated {emu_diff:.1e})"
        ok = ok and good
        print(f"| {name} | {'PASS' if good else 'FAIL'} | {measured} | {bound} |")
    print("\nNot replayed as CUDA graphs (cuda_graph: auto runs them eagerly): fp16 jobs (the loss "
          "scaler decides on the host), seed_cnn_features (gradient accumulation), the ZeRO jobs "
          "(cuda_graph=false).")
    print(f"\n**{'ALL PASSED' if ok else 'SOME CHECKS FAILED'}**")
    return 0 if ok else 1


if __name__ == "__main__":
    what, check_dir, work = sys.argv[1:4]
    if what == "plan":
        plan(check_dir, work)
        sys.exit(0)
    sys.exit(summarize(check_dir, work))
