"""torch.topk on the top-k benchmark's shape, and the memory floor.

Prints the median time of torch.topk(scores, k, sorted=True) over 20 runs
after 5 warm-ups, and the device's measured copy bandwidth (a clone of a
1 GiB tensor: 2 GiB moved), from which bench/topk.sh takes the floor:
score bytes read once / bandwidth.
"""
import sys

import torch

B, Q, N, K = (int(x) for x in sys.argv[1:5])
scores = torch.randn(B, Q, N, device="cuda")


def median_ms(fn):
    times = []
    for i in range(25):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if i >= 5:
            times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


topk_ms = median_ms(lambda: torch.topk(scores, K, dim=-1, sorted=True))
big = torch.empty(1 << 28, device="cuda")  # 1 GiB
copy_ms = median_ms(lambda: big.clone())
bandwidth = 2 * big.numel() * 4 / (copy_ms * 1e6)  # GB/s
print(f"torch_topk median_ms={topk_ms:.4f} copy_GBps={bandwidth:.1f}")
