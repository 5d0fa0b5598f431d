"""What the PyTorch sides of the one-GPU benchmarks (torch_gpu_step.py, torch_gpu_lm.py) share: the
case flags, the order of the cases (eager first), compiling a case afresh, timing its steps, and
printing the versions line and one line per case (`failed:` when it throws, `skipped:` past the time
budget)."""
import gc
import re
import sys
import time
import traceback

import torch

MODES = ["eager", "compile", "reduce-overhead"]
DTYPES = ["f32", "bf16"]
# --profile-step: time_steps runs one step after the warmup between cudaProfilerStart and Stop
# (Nsight Compute's --profile-from-start off: bench/gpu_kernels.sh), and no timed steps.
PROFILE_STEP = False


def add_case_args(ap, models, steps, steps_help, warmup, warmup_help):
    """--steps, --warmup, --models (the names in `models`), --modes, --dtypes and --budget-s."""
    ap.add_argument("--steps", type=int, default=steps, help=steps_help)
    ap.add_argument("--warmup", type=int, default=warmup, help=warmup_help)
    ap.add_argument("--models", default=",".join(models), help="comma-separated: " + ", ".join(models))
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: " + ", ".join(DTYPES))
    ap.add_argument("--budget-s", type=float, default=0, help="start no case after this many seconds (0: no limit)")
    ap.add_argument("--profile-step", action="store_true",
                    help="after the warmup, one step between cudaProfilerStart/Stop (for ncu --profile-from-start "
                         "off: bench/gpu_kernels.sh); no timed steps")


def case_lists(ap, args, models):
    """The lists --models, --modes and --dtypes name; an argparse error for a name not known.
    Also takes --profile-step."""
    global PROFILE_STEP
    PROFILE_STEP = args.profile_step
    lists = args.models.split(","), args.modes.split(","), args.dtypes.split(",")
    for flag, given, known in zip(["--models", "--modes", "--dtypes"], lists, [models, MODES, DTYPES]):
        unknown = [g for g in given if g not in known]
        if unknown:
            ap.error(f"{flag}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    return lists


def eager_first(models, modes, dtypes, of):
    """The cases of(model, dtype, mode) gives: every eager one, then the compiled ones model by model
    (per dtype, the modes in order)."""
    out = [c for m in models for d in dtypes if "eager" in modes for c in of(m, d, "eager")]
    out += [c for m in models for d in dtypes for mode in modes if mode != "eager" for c in of(m, d, mode)]
    return out


def compiled(fn, mode):
    """torch.compile of fn in a compiled mode ("compile": the default one)."""
    # Each case compiles afresh: the guards of the last case's model would otherwise count towards
    # dynamo's recompile limit, past which it falls back to eager without a word.
    torch._dynamo.reset()
    return torch.compile(fn, mode=None if mode == "compile" else mode)


def time_steps(step, warmup, steps):
    """Seconds for `steps` calls of step after `warmup` untimed ones, and the last call's result
    (with PROFILE_STEP, one call between cudaProfilerStart and Stop)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    if PROFILE_STEP:
        t0 = time.perf_counter()
        torch.cuda.cudart().cudaProfilerStart()
        out = step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        return time.perf_counter() - t0, out
    t0 = time.perf_counter()
    for _ in range(steps):
        out = step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def driver_version():
    """The driver's version as nvidia-smi shows it (the kernel module's), or "unknown"."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", f.read())
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def print_versions(more_keys):
    """The first line: torch, GPU, driver, CUDA and cuDNN, then `more_keys` ("key=value ...")."""
    props = torch.cuda.get_device_properties(0)
    print(f'torch={torch.__version__} gpu="{props.name}" sm={props.major}{props.minor} driver={driver_version()} '
          f"cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} {more_keys}", flush=True)


def run_cases(cases, budget_s, start):
    """Runs each (head, run) case and prints its line: head, the keys run() returns, the case's peak
    of GPU memory. A case that throws prints `head failed: ...` (its traceback to stderr); one that
    would start more than budget_s seconds (0: no limit) after `start` prints `head skipped: ...`."""
    for head, run in cases:
        if budget_s and time.monotonic() - start > budget_s:
            print(f"{head} skipped: the time budget (--budget-s {budget_s:g}) is spent", flush=True)
            continue
        torch.cuda.reset_peak_memory_stats()
        try:
            keys = run()
            print(f"{head} {keys} peak_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}", flush=True)
        except Exception as e:  # torch.compile may not work there: say so and go on
            print(f"{head} failed: {e!r}"[:400].replace("\n", " "), flush=True)
            traceback.print_exc(file=sys.stderr)
        gc.collect()
        torch.cuda.empty_cache()
