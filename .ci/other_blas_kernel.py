"""Print the OpenBLAS kernel to run the numerically sensitive tests under a second time: one
this CPU can run that is not the one OpenBLAS picks for it (AVX2's Haswell where it picks
AVX-512's, Sandybridge's AVX where it picks Haswell's or Zen's), checked by asking OpenBLAS
under it. Nothing when there is no such kernel (no OpenBLAS, or a CPU without AVX)."""

import os
import subprocess
import sys

ASK = ("import numpy, threadpoolctl; print(next((i.get('architecture') or '' for i in "
       "threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'), ''))")


def kernel(coretype: str | None = None) -> str:
    env = dict(os.environ, **({"OPENBLAS_CORETYPE": coretype} if coretype else {}))
    return subprocess.run([sys.executable, "-c", ASK], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    picked = kernel()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = set(cpuinfo.read().split())
    except OSError:
        flags = set()
    if picked in ("Haswell", "Zen"):
        other = "Sandybridge" if "avx" in flags else ""
    else:
        other = "Haswell" if "avx2" in flags else ""
    if not picked or not other:
        print(f"no second OpenBLAS kernel here (OpenBLAS picks {picked or 'none'})", file=sys.stderr)
        return
    if kernel(other) != other:
        sys.exit(f"OPENBLAS_CORETYPE={other} did not take: OpenBLAS still reports {kernel(other)!r}")
    print(f"OpenBLAS picks {picked} here; the second pass runs {other}", file=sys.stderr)
    print(other)


if __name__ == "__main__":
    main()
