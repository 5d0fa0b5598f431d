"""peak_rss.py OUT CMD...: runs CMD (stdout passed through, stderr to OUT.err.$RANK) and writes its peak
resident set size in KiB to OUT.$RANK: the kernel's own high-water mark of the child (getrusage of the
waited-for children, what VmHWM shows), so no sampling can miss a short peak. Exits with CMD's status."""
import os
import resource
import subprocess
import sys

out, cmd = sys.argv[1], sys.argv[2:]
rank = os.environ.get("RANK", "0")
with open(f"{out}.err.{rank}", "wb") as err:
    code = subprocess.call(cmd, stderr=err)
with open(f"{out}.{rank}", "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code if code >= 0 else 128 - code)
